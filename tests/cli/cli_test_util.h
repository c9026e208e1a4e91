// What the CLI tests share: running the vramsim binary with stdout and stderr apart, and per-process scratch
// files (CTest runs test cases in parallel processes).
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "test_paths.h"

namespace vramsim::test {

struct CliRun {
  int exit_code = -1;  // 128 + signal when a signal ended it
  std::string out;     // stdout
  std::string err;     // stderr
};

// This process's scratch folder, emptied on first use and removed at exit. It is named after the pid, and a
// fresh container hands out the same pids run after run: a folder left by an earlier run (killed, or on a
// machine whose /tmp outlives its runs) must not leak its files into this one (a file appended to would
// read twice).
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() / ("vramsim_cli_tests." + std::to_string(getpid()))) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::filesystem::path scratch(const std::string& name) {
  static const ScratchDir dir;  // one per process: an inline function's statics are shared by every file
  std::filesystem::create_directories(dir.path());
  return dir.path() / name;
}

// `args` run by the shell after the binary's path (so they may redirect stdout), stderr kept apart.
inline CliRun run_vramsim(const std::string& args) {
  const std::filesystem::path err_file = scratch("stderr.txt");
  const std::string cmd = vramsim_binary() + " " + args + " 2>" + err_file.string();
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    r.out.append(buf.data(), n);
  }
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

inline std::filesystem::path write_file(const std::string& name, const std::string& bytes) {
  const std::filesystem::path p = scratch(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

inline std::string sample(const std::string& name) {
  return (source_dir() / "traces" / "samples" / name).string();
}

}  // namespace vramsim::test
