// Shared helpers of the vramsim_bench program: where the real traces are, which of them the replay cases run,
// and the registration hooks each bench_*.cpp file provides to bench_main.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vramsim::bench {

struct TraceFile {
  std::filesystem::path path;
  std::string label;  // "<dir tag>:<file name without .pickle>", used in benchmark names
  std::uintmax_t bytes = 0;
};

// The trace directories that exist on this machine: the shared real-trace corpus (VRAMSIM_REAL_TRACES_DIR),
// traces/samples (VRAMSIM_SAMPLE_TRACES_DIR) and $VRAMSIM_BENCH_TRACES when set. Missing ones are skipped.
std::vector<std::filesystem::path> trace_dirs();

// The traces the replay cases run, in a fixed order: from the real corpus the largest recordings (every
// *fullstep* file, ctx512_forward, 2.7b_forward, cranberrii, MAGMA27), from the other directories every
// *.pickle file.
std::vector<TraceFile> replay_traces();

// The largest file in trace_dirs() whose name ends with `suffix` (".pickle", ".json"); empty path if none.
TraceFile largest_trace_file(const std::string& suffix);

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path);

// Registration hooks, called by main() before the run (the file lists are only known at run time).
void register_replay_benchmarks();
void register_io_benchmarks();
void register_policy_benchmarks();

}  // namespace vramsim::bench
