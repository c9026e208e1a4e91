// BM_Pickle_Read / BM_Json_Load: decoding the largest trace file of each format, from memory, into a Snapshot
// (the file is read once, outside the timed loop). bytes/s counts input bytes.
//   BM_Pickle_Read/<file>         snapshot_from_pickle: what load_snapshot does (stack frames skipped)
//   BM_Pickle_Decode/<file>       read_pickle of everything, frames included (what skipping them saves)
//   BM_Json_Load/<file>           nlohmann::json::parse + snapshot_from_json
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "bench/bench_traces.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/snapshot.h"
#include "traces/trace_io.h"

namespace vramsim::bench {
namespace {

void finish(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}

void BM_Pickle_Read(benchmark::State& state, const std::vector<std::uint8_t>& bytes,
                    const std::string& name) {
  for (auto _ : state) {
    Snapshot s = snapshot_from_pickle(std::span<const std::uint8_t>(bytes), name);
    benchmark::DoNotOptimize(s.segments.data());
  }
  finish(state, bytes.size());
}

void BM_Pickle_Decode(benchmark::State& state, const std::vector<std::uint8_t>& bytes,
                      const std::string& name) {
  for (auto _ : state) {
    nlohmann::json j = read_pickle(std::span<const std::uint8_t>(bytes), name);
    benchmark::DoNotOptimize(j.size());
  }
  finish(state, bytes.size());
}

void BM_Json_Load(benchmark::State& state, const std::vector<std::uint8_t>& bytes, const std::string& name) {
  for (auto _ : state) {
    Snapshot s = snapshot_from_json(nlohmann::json::parse(bytes.begin(), bytes.end()), name);
    benchmark::DoNotOptimize(s.segments.data());
  }
  finish(state, bytes.size());
}

}  // namespace

void register_io_benchmarks() {
  static std::vector<std::uint8_t> pickle_bytes;
  static std::vector<std::uint8_t> json_bytes;
  static std::string pickle_name;
  static std::string json_name;
  try {
    if (const TraceFile f = largest_trace_file(".pickle"); !f.path.empty()) {
      pickle_bytes = read_bytes(f.path);
      pickle_name = f.path.filename().string();
      benchmark::RegisterBenchmark(("BM_Pickle_Read/" + f.label).c_str(), [](benchmark::State& state) {
        BM_Pickle_Read(state, pickle_bytes, pickle_name);
      })->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("BM_Pickle_Decode/" + f.label).c_str(), [](benchmark::State& state) {
        BM_Pickle_Decode(state, pickle_bytes, pickle_name);
      })->Unit(benchmark::kMillisecond);
    }
    if (const TraceFile f = largest_trace_file(".json"); !f.path.empty()) {
      json_bytes = read_bytes(f.path);
      json_name = f.path.filename().string();
      benchmark::RegisterBenchmark(("BM_Json_Load/" + f.label).c_str(), [](benchmark::State& state) {
        BM_Json_Load(state, json_bytes, json_name);
      })->Unit(benchmark::kMillisecond);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramsim_bench: skipping the file-format cases: %s\n", e.what());
  }
}

}  // namespace vramsim::bench
