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

namespace {

// Parses the command line and runs the chosen subcommand; main() turns whatever it throws into one line.
int dispatch(int argc, char** argv) {
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
  vramsim::cli::add_plan_command(app, run);
  vramsim::cli::add_merge_command(app, run);
  vramsim::cli::add_compare_command(app, run);
  vramsim::cli::add_sweep_command(app, run);
  vramsim::cli::add_trace_command(app, run);
  vramsim::cli::add_techniques_command(app, run);
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
    vramsim::cli::check_trace_options(std::vector<std::string>(argv + 2, argv + parsed_argc));
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
  return run();
}

// One line on stderr, whatever the message holds: a library's what() may carry newlines or control bytes
// from a bad input; they are shown as \n and \xNN so that the error stays one line.
void print_error(std::string_view message) {
  std::string line;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\n' || byte == '\r') {
      line += "\\n";
    } else if (byte < 0x20 || byte == 0x7f) {
      line += fmt::format("\\x{:02X}", byte);
    } else {
      line += c;
    }
  }
  std::fflush(stdout);
  fmt::print(stderr, "vramsim: error: {}\n", line);
}

}  // namespace

int main(int argc, char** argv) {
  // Every failure ends here as one line and exit status 2: bad input (InputError), host memory, and anything
  // else a library throws (nlohmann, CLI11, the standard library) -- never an uncaught exception's abort.
  try {
    return dispatch(argc, argv);
  } catch (const vramsim::InputError& e) {
    print_error(e.what());
  } catch (const std::bad_alloc&) {
    print_error("out of host memory");
  } catch (const std::exception& e) {
    print_error(e.what());
  } catch (...) {
    print_error("unknown exception");
  }
  return 2;
}
