// The vramsim command line as a library: main() runs it on argv, and the Python package (python/) runs the
// same parser and commands in its own process, so that every flag, default and error message is the CLI's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/cli/command_result.h"

namespace vramsim::cli {

// Parses `vramsim ARGS...` (`args` without the program name) and runs the chosen subcommand, printing what
// the command prints on stdout; returns its exit status (0, or 1 for `replay --check` that diverges).
// --help and --version print and return 0. Every user error throws InputError: a parse error's message is
// CLI11's with " (see vramsim --help)" appended, as main() prints it. Safe to call again in one process:
// each call starts from the commands' defaults. `program` (argv[0]) names the app in --help's usage line.
int run_cli(const std::vector<std::string>& args, const char* program = "vramsim");

// As run_cli, for `predict`, `trace` and `replay`: what the command computed is returned instead of being
// printed (its --json document; its --html / --perfetto pages made on request). Files the arguments name
// (--html, --trace-out, --out, ...) are still written. Throws InputError for another subcommand.
CommandResult run_cli_for_result(const std::vector<std::string>& args);

// What run_cli printed on stdout, captured in memory (capture_stdout), and its exit status. Not thread-safe:
// one call at a time in a process.
struct CapturedRun {
  int status = 0;
  std::string out;
};
CapturedRun run_cli_captured(const std::vector<std::string>& args);

// The options of `vramsim COMMAND` as its --help lists them: long names ("--lora-rank"), whether the option
// is a flag (takes no value, or an optional one: --compile[=MODE]), whether it takes several values, and its
// help text. Throws InputError for an unknown command.
struct OptionInfo {
  std::vector<std::string> names;
  bool flag = false;
  bool many = false;
  std::string description;
};
std::vector<OptionInfo> command_options(const std::string& command);

// `message` on one line: newlines as \n, other control bytes as \xNN (a bad input's bytes may be quoted).
std::string one_line(std::string_view message);

}  // namespace vramsim::cli
