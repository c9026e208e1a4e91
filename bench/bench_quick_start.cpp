// Issue 40's cases, on the README's quick-start step (Llama-2-7B on an H200, batch 4 x 4096, bf16,
// adamw-8bit, full checkpointing, 2 steps: 8,524 ops, 21,143 allocator requests):
//   BM_QuickStart_Predict        predict() of it, as `vramsim predict` runs it (no process start, no
//   printing); BM_QuickStart_Allocator      the allocator model alone on the same workload (run_policy over
//   its
//                                requests, an observer after each, as predict drives it): the floor a
//                                prediction cannot go below; the target is predict within 5x of it;
//   BM_Replay_QuickStartTrace    what `vramsim replay` does with the trace `predict --trace-out` writes
//                                (30,985 events from an empty allocator): the file's bytes decoded from
//                                memory and replayed (read_vtrace / snapshot_from_pickle + replay_snapshot).
//                                Arg 0: .vtrace text, Arg 1: .pickle, Arg 2: .vtrace text read by the
//                                general road (see indent_event_lines). events/s = trace events per CPU
//                                second.
// Whole-process figures (process start, reading the file, printing) are measured with `perf stat`
// (bench/RESULTS.md).
#include <benchmark/benchmark.h>

#include <span>
#include <string>
#include <vector>

#include "bench/bench_allocator_loop.h"
#include "sim/alloc/registry.h"
#include "sim/engine/gpu_table.h"
#include "sim/engine/roofline.h"
#include "sim/graph/layer_stamp.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "sim/predict/step_timeline.h"
#include "sim/replay/trace_replay.h"
#include "sim/simulate/policy_run.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

namespace vramsim::bench {
namespace {

RequestArgs quick_start_args() {
  RequestArgs a;
  a.model = "llama-2-7b";
  a.gpu = "h200";
  a.batch = 4;
  a.seq = 4096;
  a.precision = "bf16";
  a.optimizer = "adamw-8bit";
  a.checkpointing = "full";
  return a;
}

// Arg 1: decoder layers stamped from a recorded one (layer_stamp.h, the default); Arg 0: every layer emitted
// by its code (set_layer_stamping(false), the direct road).
void BM_QuickStart_Predict(benchmark::State& state) {
  const PredictRequest request = make_request(quick_start_args());
  set_layer_stamping(state.range(0) == 1);
  Prediction p;
  for (auto _ : state) {
    p = predict(request);
    benchmark::DoNotOptimize(p.peak_reserved_bytes);
  }
  set_layer_stamping(true);
  state.counters["ops"] = static_cast<double>(p.ops);
  state.counters["requests"] = static_cast<double>(p.requests);
}
BENCHMARK(BM_QuickStart_Predict)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The op graph alone (build_training_steps), both roads.
void BM_QuickStart_Graph(benchmark::State& state) {
  const PredictRequest request = make_request(quick_start_args());
  set_layer_stamping(state.range(0) == 1);
  std::size_t ops = 0;
  for (auto _ : state) {
    const OpGraph graph = build_training_steps(request.model, request.options);
    ops = graph.op_count();
    benchmark::DoNotOptimize(ops);
  }
  set_layer_stamping(true);
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_QuickStart_Graph)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The README's quick-start fit (`vramsim fit ... --batch 4`: the largest batch that fits, 10 % margin),
// both roads; the target is 50 ms.
void BM_QuickStart_Fit(benchmark::State& state) {
  const PredictRequest request = make_request(quick_start_args());
  set_layer_stamping(state.range(0) == 1);
  FitResult r;
  for (auto _ : state) {
    r = fit(request, FitVary::kBatch, 0.1);
    benchmark::DoNotOptimize(r.best);
  }
  set_layer_stamping(true);
  state.counters["trials"] = static_cast<double>(r.trials.size());
  state.counters["best"] = static_cast<double>(r.best);
}
BENCHMARK(BM_QuickStart_Fit)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The workload predict hands the allocator (the engine's schedule), built once outside the loop.
void BM_QuickStart_Allocator(benchmark::State& state) {
  const PredictRequest request = make_request(quick_start_args());
  const OpGraph graph = build_training_steps(request.model, request.options);
  const AllocationSchedule untimed = build_allocation_schedule(graph);
  const Roofline roofline = Roofline::for_gpu(request.gpu, request.roofline);
  const Workload workload = workload_from_schedule(
      timed_schedule(graph, untimed, simulate_timeline(graph, untimed, &roofline, request.host)), "bench");
  // the context left out: it fits either way
  bench::run_allocator_loop(state, workload, find_gpu(request.gpu).total_memory_bytes);
}
BENCHMARK(BM_QuickStart_Allocator)->Unit(benchmark::kMillisecond);

Snapshot quick_start_trace() {
  Snapshot trace;
  (void)predict(make_request(quick_start_args()), &trace);
  trace.source = "quick-start";
  return trace;
}

// The same text with every event line indented by one blank: it means the same, but the reader's fast road
// takes only lines that start with their device number, so every event goes by the general road (tokens
// first: the reader as it was before issue 40's fast road). Arg 2 against Arg 0 is that change's ratio.
std::string indent_event_lines(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 32);
  bool line_start = true;
  for (const char c : text) {
    if (line_start && c >= '0' && c <= '9') {
      out += ' ';
    }
    out += c;
    line_start = c == '\n';
  }
  return out;
}

void BM_Replay_QuickStartTrace(benchmark::State& state) {
  static const Snapshot trace = quick_start_trace();
  const bool pickle = state.range(0) == 1;
  const std::string text = pickle                ? std::string()
                           : state.range(0) == 2 ? indent_event_lines(write_vtrace(trace))
                                                 : write_vtrace(trace);
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
BENCHMARK(BM_Replay_QuickStartTrace)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vramsim::bench
