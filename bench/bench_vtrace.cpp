// BM_Replay_QuickStartTrace: issue 40's replay case, what `vramsim replay` does with the trace that the
// README's quick-start `predict --trace-out` writes (Llama-2-7B on an H200, batch 4 x 4096, bf16, adamw-8bit,
// full checkpointing, 2 steps: 30,985 events from an empty allocator). The trace is generated once, outside
// the timed loop, in the form the command writes it; each iteration decodes the file's bytes from memory and
// replays them (read_vtrace / snapshot_from_pickle + replay_snapshot), as the command does after reading
// the file. Arg 0: .vtrace text, Arg 1: .pickle. events/s = trace events per CPU second. Whole-process
// figures (process start, reading the file, printing) are measured with `perf stat` (bench/RESULTS.md).
#include <benchmark/benchmark.h>

#include <span>
#include <string>
#include <vector>

#include "sim/predict/step_prediction.h"
#include "sim/replay/trace_replay.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

namespace vramsim::bench {
namespace {

Snapshot quick_start_trace() {
  RequestArgs a;
  a.model = "llama-2-7b";
  a.gpu = "h200";
  a.batch = 4;
  a.seq = 4096;
  a.precision = "bf16";
  a.optimizer = "adamw-8bit";
  a.checkpointing = "full";
  Snapshot trace;
  (void)predict(make_request(a), &trace);
  trace.source = "quick-start";
  return trace;
}

void BM_Replay_QuickStartTrace(benchmark::State& state) {
  static const Snapshot trace = quick_start_trace();
  const bool pickle = state.range(0) == 1;
  const std::string text = pickle ? std::string() : write_vtrace(trace);
  const std::vector<std::uint8_t> bytes =
      pickle ? write_pickle(snapshot_to_json(trace)) : std::vector<std::uint8_t>();
  std::size_t events = 0;
  for (auto _ : state) {
    const Snapshot s = pickle ? snapshot_from_pickle(std::span<const std::uint8_t>(bytes), "quick-start")
                              : read_vtrace(text, "quick-start");
    const ReplayResult r = replay_snapshot(s, ReplayOptions{});
    events = r.events;
    benchmark::DoNotOptimize(r.peaks.peak_reserved_bytes);
  }
  state.counters["events"] = static_cast<double>(events);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["file_bytes"] = static_cast<double>(pickle ? bytes.size() : text.size());
}
BENCHMARK(BM_Replay_QuickStartTrace)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vramsim::bench
