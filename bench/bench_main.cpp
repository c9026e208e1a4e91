// vramsim_bench: Google Benchmark main. The real-trace cases are registered here, at run time, from the trace
// files found on this machine; without any, only the synthetic cases run.
#include <cstdio>

#include <benchmark/benchmark.h>

#include "bench/bench_traces.h"
#include "sim/core/malloc_tuning.h"

int main(int argc, char** argv) {
  vramsim::tune_malloc_for_graphs();  // as vramsim's main() runs predictions
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  if (vramsim::bench::trace_dirs().empty()) {
    std::fprintf(stderr,
                 "vramsim_bench: no trace directory found (%s, %s, $VRAMSIM_BENCH_TRACES); "
                 "running the synthetic cases only\n",
                 VRAMSIM_REAL_TRACES_DIR, VRAMSIM_SAMPLE_TRACES_DIR);
  }
  vramsim::bench::register_replay_benchmarks();
  vramsim::bench::register_io_benchmarks();
  vramsim::bench::register_policy_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
