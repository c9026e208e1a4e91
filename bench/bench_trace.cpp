// BM_Trace_*: the C++ half of `vramsim trace` — analyze_traced_run (two passes of the allocator model when
// the run does not fit, the bill, phases and steps) on a traced run the size of a Llama-2-7B step. The trace
// is predict's own generated one (same events and tags as a traced step); markers are placed where its phase
// tag changes. The Python half (running the script on the meta device) is measured end to end in README.md.
#include <benchmark/benchmark.h>

#include "sim/predict/step_prediction.h"
#include "sim/trace/traced_run.h"

namespace vramsim::bench {
namespace {

TracedRun llama_7b_run() {
  RequestArgs a;
  a.model = "llama-2-7b";
  a.gpu = "h100";
  a.batch = 1;
  a.seq = 4096;
  a.precision = "amp-bf16";
  a.checkpointing = "full";
  a.steps = 2;
  TracedRun run;
  (void)predict(make_request(a), &run.trace);
  const auto& events = run.trace.device_traces.front().events;
  std::uint32_t last = kNoTag;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action == TraceAction::kAlloc && events[i].phase_tag != last) {
      last = events[i].phase_tag;
      run.markers.push_back({i, 1, run.trace.strings[last]});
    }
  }
  run.workload = workload_from_trace(run.trace, run.markers);
  return run;
}

void BM_Trace_Analyze_Llama2_7B(benchmark::State& state) {
  const TracedRun run = llama_7b_run();
  RunDevice device;
  device.gpu = state.range(0) == 0 ? "h100" : "h200";  // 0: it does not fit (two replays), 1: it fits
  Prediction p;
  for (auto _ : state) {
    p = analyze_traced_run(run, device);
    benchmark::DoNotOptimize(p.peak_reserved_bytes);
  }
  state.counters["requests"] = static_cast<double>(p.requests);
  state.counters["ooms"] = static_cast<double>(p.num_ooms);
  state.counters["requests_per_s"] =
      benchmark::Counter(static_cast<double>(p.requests), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Trace_Analyze_Llama2_7B)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vramsim::bench
