// Runs the vramsim binary the tests were built with (vramsim_binary()) and captures what it prints.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_paths.h"

namespace vramsim::test {

// `args` appended to the binary's path and run by the shell, stderr merged into stdout. `status`, when
// given, receives the exit status.
inline std::string run_cli(const std::string& args, int* status = nullptr) {
  const std::string cmd = vramsim_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof buf, pipe) != nullptr) {
    out += buf;
  }
  const int rc = pipe != nullptr ? pclose(pipe) : -1;
  if (status != nullptr) {
    *status = WEXITSTATUS(rc);
  }
  return out;
}

}  // namespace vramsim::test
