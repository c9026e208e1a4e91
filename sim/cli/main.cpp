// vramsim: will this training job fit in GPU memory, and why not?
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "vramsim: a faithful model of PyTorch's CUDA caching allocator, for replaying memory snapshots "
      "and predicting GPU memory use"};
  app.set_version_flag("--version", "vramsim 0.1");
  app.require_subcommand(1);
  std::function<int()> run;
  vramsim::cli::add_replay_command(app, run);
  vramsim::cli::add_convert_command(app, run);
  vramsim::cli::add_predict_command(app, run);
  vramsim::cli::add_fit_command(app, run);
  vramsim::cli::add_compare_command(app, run);
  vramsim::cli::add_sweep_command(app, run);
  vramsim::cli::add_trace_command(app, run);
  // `vramsim trace SCRIPT.py -- ARGS...`: what follows "--" is the script's, handed over untouched.
  int parsed_argc = argc;
  if (argc > 1 && std::string_view(argv[1]) == "trace") {
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--") {
        vramsim::cli::set_trace_script_args(std::vector<std::string>(argv + i + 1, argv + argc));
        parsed_argc = i;
        break;
      }
    }
    try {
      vramsim::cli::check_trace_options(std::vector<std::string>(argv + 2, argv + parsed_argc));
    } catch (const vramsim::InputError& e) {
      fmt::print(stderr, "vramsim: error: {}\n", e.what());
      return 2;
    }
  }
  try {
    app.parse(parsed_argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e);  // --help, --version
    }
    // An unknown option, a missing or malformed value: one line and exit status 2, as for any bad input.
    fmt::print(stderr, "vramsim: error: {} (see vramsim --help)\n", e.what());
    return 2;
  }
  try {
    return run();
  } catch (const vramsim::InputError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "vramsim: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "vramsim: error: out of host memory\n");
    return 2;
  }
}
