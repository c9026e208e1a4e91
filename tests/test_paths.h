// Where tests find their data. Tests that need ../shared (not in a user's fresh clone) call
// shared_or_skip(), which prints why they skipped instead of failing.
#pragma once

#include <filesystem>
#include <iostream>
#include <string>

namespace vramsim::test {

// The checkout and its ../shared (test_paths.cpp, the one source compiled with their paths: a path on every
// test source's command line would make each checkout's and build folder's objects differ, and ccache would
// never share them).
std::filesystem::path source_dir();
std::filesystem::path shared_dir();
// The vramsim binary the tests were built with (test_binary.cpp; vramsim_tests only).
std::string vramsim_binary();

inline std::filesystem::path test_data(const std::string& name) {
  return source_dir() / "tests" / "data" / name;
}
inline std::filesystem::path shared_real_traces() { return shared_dir() / "traces" / "real"; }

// True when ../shared/traces/real exists; otherwise prints a skip notice naming the test.
inline bool shared_or_skip(const std::string& test_name) {
  if (std::filesystem::is_directory(shared_real_traces())) {
    return true;
  }
  std::cout << "SKIPPED " << test_name << ": " << shared_real_traces().string()
            << " not found (the real snapshots live in the CI's shared/ folder, not in a fresh clone)\n";
  return false;
}

}  // namespace vramsim::test
