// vramsim: will this training job fit in GPU memory, and why not?
#include <malloc.h>
#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/error.h"

namespace {

// CLI11 reads integers with strtoll/strtoull: "-1" becomes 2^64 - 1 for an unsigned option, a number past the
// type's range saturates (18446744073709551616 -> 2^63 - 1), and "010" is octal. Every integer option of
// every command gets this check first: plain decimal digits (a sign for a signed one) that fit in 64 bits;
// leading zeros are dropped so that the number means what it says.
void check_integer_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") {
      continue;
    }
    const bool is_unsigned = type == "UINT";
    // A transform, not a check: CLI11 hands checks a copy of the text, and the canonical form must be parsed.
    option->transform(CLI::Validator(
        [is_unsigned](std::string& text) -> std::string {
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
            fits = std::from_chars(canonical.data(), canonical.data() + canonical.size(), value).ec ==
                   std::errc{};
          }
          if (!fits) {
            return fmt::format("{} is out of range (at most {} in magnitude)", text,
                               is_unsigned ? "18446744073709551615" : "9223372036854775807");
          }
          text = canonical;
          return {};
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) {
    check_integer_options(*sub);
  }
}

void print_error(std::string_view message);

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
  check_integer_options(app);
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
    // Through print_error: a value the parser quotes may hold control characters (an ANSI escape).
    print_error(fmt::format("{} (see vramsim --help)", e.what()));
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

// Standard output, flushed: what a command printed is only printed once the write succeeded. A full disk or
// a closed pipe (`> /dev/full`) is an error like any other, not a silent exit 0 with the output lost.
bool stdout_written() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && std::ferror(stdout) == 0) {
    return true;
  }
  const int error = errno;
  print_error(fmt::format("standard output: write error: {}",
                          error != 0 ? std::strerror(error) : "the output could not be written"));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // A prediction builds and drops graphs of tens of megabytes (a plan does it per configuration): with
  // glibc's defaults their large vectors are mmap'ed and unmapped each time and the heap top is trimmed after
  // each, so every prediction faults its pages in again (a tenth of predict's time, profiled on the
  // quick-start step). Keep freed memory in the heap instead: what a process holds stays what its largest
  // prediction needed. (glibc's mallopt, malloc/malloc.c; no effect under other allocators.)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
  // Every failure ends here as one line and exit status 2: bad input (InputError), host memory, and anything
  // else a library throws (nlohmann, CLI11, the standard library) -- never an uncaught exception's abort.
  try {
    const int status = dispatch(argc, argv);
    return stdout_written() ? status : 2;
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
