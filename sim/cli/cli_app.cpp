// The command line's parser and dispatch (main.cpp's, and the Python package's through cli_app.h).
#include "sim/cli/cli_app.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/error.h"

namespace vramsim::cli {
namespace {

// CLI11 reads integers with strtoll/strtoull: "-1" becomes 2^64 - 1 for an unsigned option, a number past the
// type's range saturates (18446744073709551616 -> 2^63 - 1), and "010" is octal. Every integer option of
// every command gets this check first: plain decimal digits (a sign for a signed one) that fit in 64 bits;
// leading zeros are dropped so that the number means what it says.
std::string canonical_integer(std::string& text, bool is_unsigned) {
  std::string_view digits = text;
  const bool negative = digits.starts_with('-');
  if (negative || digits.starts_with('+')) {
    digits.remove_prefix(1);
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return fmt::format("'{}' is not a whole number", text);
  }
  if (negative && is_unsigned) {
    return fmt::format("{} is negative", text);
  }
  while (digits.size() > 1 && digits.front() == '0') {
    digits.remove_prefix(1);
  }
  const std::string canonical = (negative ? "-" : "") + std::string(digits);
  bool fits = false;
  if (is_unsigned) {
    std::uint64_t value = 0;
    fits = std::from_chars(digits.data(), digits.data() + digits.size(), value).ec == std::errc{};
  } else {
    std::int64_t value = 0;
    fits = std::from_chars(canonical.data(), canonical.data() + canonical.size(), value).ec == std::errc{};
  }
  if (!fits) {
    return fmt::format("{} is out of range (at most {} in magnitude)", text,
                       is_unsigned ? "18446744073709551615" : "9223372036854775807");
  }
  text = canonical;
  return {};
}

void check_integer_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") {
      continue;
    }
    const bool is_unsigned = type == "UINT";
    // A transform, not a check: CLI11 hands checks a copy of the text, and the canonical form must be parsed.
    option->transform(CLI::Validator(
        [is_unsigned](std::string& text) { return canonical_integer(text, is_unsigned); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) {
    check_integer_options(*sub);
  }
}

// The app with every subcommand registered, or only `command` when it names one: CLI11 checks each new
// option's names against those its command has (quadratic in a command's options), and registering the ten
// commands' options was about 6 % of the instructions of a quick-start `vramsim predict` (issue 40's profile)
// though one command runs. `result` goes to the commands that can hand one back.
std::unique_ptr<CLI::App> make_app(std::function<int()>& run, CommandResult* result,
                                   std::string_view command = {}) {
  auto app = std::make_unique<CLI::App>(
      "vramsim: a faithful model of PyTorch's CUDA caching allocator, for replaying memory snapshots "
      "and predicting GPU memory use");
  app->set_version_flag("--version", "vramsim 0.1");
  app->require_subcommand(1);
  static constexpr std::string_view kCommands[] = {"replay", "convert", "predict", "fit",   "plan",
                                                   "merge",  "compare", "sweep",   "trace", "techniques"};
  const bool known = std::find(std::begin(kCommands), std::end(kCommands), command) != std::end(kCommands);
  const auto want = [&](std::string_view name) { return !known || name == command; };
  if (want("replay")) {
    add_replay_command(*app, run, result);
  }
  if (want("convert")) {
    add_convert_command(*app, run);
  }
  if (want("predict")) {
    add_predict_command(*app, run, result);
  }
  if (want("fit")) {
    add_fit_command(*app, run);
  }
  if (want("plan")) {
    add_plan_command(*app, run);
  }
  if (want("merge")) {
    add_merge_command(*app, run);
  }
  if (want("compare")) {
    add_compare_command(*app, run);
  }
  if (want("sweep")) {
    add_sweep_command(*app, run);
  }
  if (want("trace")) {
    add_trace_command(*app, run, result);
  }
  if (want("techniques")) {
    add_techniques_command(*app, run);
  }
  check_integer_options(*app);
  return app;
}

// Parses and runs; `result` (may be null) receives what predict / trace / replay computed.
// `program` is argv[0]: CLI11 names the app after it in --help's usage line.
int dispatch(const std::vector<std::string>& args, CommandResult* result, const char* program) {
  std::function<int()> run;
  const std::unique_ptr<CLI::App> app = make_app(run, result, args.empty() ? "" : args.front());
  // `vramsim trace SCRIPT.py -- ARGS...`: what follows "--" is the script's, handed over untouched.
  std::size_t parsed = args.size();
  set_trace_script_args({});
  if (!args.empty() && args.front() == "trace") {
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--") {
        set_trace_script_args(
            std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end()));
        parsed = i;
        break;
      }
    }
    check_trace_options(
        std::vector<std::string>(args.begin() + 1, args.begin() + static_cast<std::ptrdiff_t>(parsed)));
  }
  std::vector<const char*> argv{program};
  for (std::size_t i = 0; i < parsed; ++i) {
    argv.push_back(args[i].c_str());
  }
  try {
    app->parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: printed through stdio, where a caller may capture it
      std::ostringstream out, err;
      const int status = app->exit(e, out, err);
      fmt::print("{}", out.str());
      fmt::print(stderr, "{}", err.str());
      return status;
    }
    // An unknown option, a missing or malformed value: one line and exit status 2, as for any bad input.
    throw InputError(fmt::format("{} (see vramsim --help)", e.what()));
  }
  if (result != nullptr && !run) {
    throw InputError("this command has no result object");
  }
  return run();
}

}  // namespace

int run_cli(const std::vector<std::string>& args, const char* program) {
  return dispatch(args, nullptr, program);
}

CommandResult run_cli_for_result(const std::vector<std::string>& args) {
  if (args.empty() || (args.front() != "predict" && args.front() != "trace" && args.front() != "replay")) {
    throw InputError(fmt::format("{}: only predict, trace and replay hand back a result object",
                                 args.empty() ? std::string("(no command)") : args.front()));
  }
  CommandResult result;
  (void)dispatch(args, &result, "vramsim");
  if (result.json.is_null()) {  // --help, or predict --list-models: nothing was computed
    throw InputError(fmt::format("{}: these arguments compute no result (--help, --list-*)", args.front()));
  }
  return result;
}

std::string capture_stdout(const std::function<void()>& print) {
#if !defined(__GLIBC__)
  // Only glibc lets stdout be reassigned (musl and emscripten declare it FILE* const); the calculator page
  // (web/) runs main() and never captures, the Python extension is built against glibc.
  (void)print;
  throw InputError("capturing a command's standard output needs glibc");
#else
  char* buffer = nullptr;
  std::size_t size = 0;
  FILE* memory = open_memstream(&buffer, &size);
  if (memory == nullptr) {
    throw std::bad_alloc();
  }
  std::fflush(stdout);
  FILE* const saved = stdout;
  stdout = memory;  // glibc: stdin, stdout and stderr are assignable variables
  const auto restore = [&] {
    stdout = saved;
    std::fclose(memory);
  };
  try {
    print();
  } catch (...) {
    restore();
    std::free(buffer);
    throw;
  }
  restore();
  std::string out(buffer, size);
  std::free(buffer);
  return out;
#endif
}

CapturedRun run_cli_captured(const std::vector<std::string>& args) {
  CapturedRun r;
  r.out = capture_stdout([&] { r.status = dispatch(args, nullptr, "vramsim"); });
  return r;
}

std::vector<OptionInfo> command_options(const std::string& command) {
  std::function<int()> run;
  const std::unique_ptr<CLI::App> app = make_app(run, nullptr);
  CLI::App* sub = nullptr;
  try {
    sub = app->get_subcommand(command);
  } catch (const CLI::OptionNotFound&) {
    throw InputError(fmt::format("unknown command '{}'", command));
  }
  std::vector<OptionInfo> out;
  for (const CLI::Option* o : sub->get_options()) {
    if (o->get_lnames().empty()) {
      continue;  // positional arguments and -h
    }
    OptionInfo info;
    for (const std::string& n : o->get_lnames()) {
      info.names.push_back("--" + n);
    }
    info.flag = o->get_expected_min() == 0;
    info.many = o->get_expected_max() > 1;
    info.description = o->get_description();
    out.push_back(std::move(info));
  }
  return out;
}

std::string one_line(std::string_view message) {
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
  return line;
}

}  // namespace vramsim::cli
