// `--perfetto FILE` (predict, trace, replay): a run as Chrome trace-event JSON, which Perfetto
// (ui.perfetto.dev, loaded from a local file) and chrome://tracing open:
//   * one track of op slices per simulated CUDA stream (predict only: the engine's roofline times);
//   * counter tracks of what the allocator model held: "allocator" (allocated, reserved and active bytes) and
//     "requested bytes alive" with one series per tensor category (parameters, gradients, optimizer states,
//     activations, temporaries, ...), which the UIs stack;
//   * instant events for the model's own device calls: cudaMalloc, cudaFree, map / unmap of expandable
//     segments, and OOM.
// Times: predict's are the engine's estimate, not a measurement (without a GPU, --capacity, every op takes
// 0 ns); a recording's are its own time_us; a trace without times is laid out one event per microsecond.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/types.h"
#include "sim/replay/memory_timeline.h"

namespace vramsim {

class OpGraph;
struct Timeline;

// One op on its stream, as the engine timed it.
struct OpSlice {
  std::string name;
  StreamId stream = 0;
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
  int step = 0;
  std::string phase;
  int layer = -1;
};

// What predict keeps for the pictures (PredictRequest::keep_timeline).
struct PredictedTimeline {
  std::vector<OpSlice> ops;  // in op order
  MemoryTimeline memory;     // the allocator model over the run
};

std::vector<OpSlice> op_slices(const OpGraph& graph, const Timeline& timeline);

// The trace-event JSON (deterministic: same input, same bytes). `ops` may be empty (a recording).
std::string perfetto_json(const std::vector<OpSlice>& ops, const MemoryTimeline& memory,
                          const std::string& title);

}  // namespace vramsim
