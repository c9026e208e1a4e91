// vramsim: will this training job fit in GPU memory, and why not?
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/cli/cli_app.h"
#include "sim/core/error.h"
#include "sim/core/malloc_tuning.h"

namespace {

// One line on stderr, whatever the message holds: a library's what() may carry newlines or control bytes
// from a bad input; they are shown as \n and \xNN so that the error stays one line.
void print_error(std::string_view message) {
  std::fflush(stdout);
  fmt::print(stderr, "vramsim: error: {}\n", vramsim::cli::one_line(message));
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
  vramsim::tune_malloc_for_graphs();  // sim/core/malloc_tuning.h
  // Every failure ends here as one line and exit status 2: bad input (InputError), host memory, and anything
  // else a library throws (nlohmann, CLI11, the standard library) -- never an uncaught exception's abort.
  try {
    const std::vector<std::string> args(argc > 1 ? argv + 1 : argv, argc > 1 ? argv + argc : argv);
    const int status = vramsim::cli::run_cli(args, argc > 0 ? argv[0] : "vramsim");
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
