// `--perfetto FILE`: a predicted run as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev, loaded from
// a local file) and chrome://tracing open: one track of op slices per simulated CUDA stream (the engine's
// roofline times), and a counter track of the requested bytes alive, one series per tensor category
// (parameters, gradients, optimizer states, activations, temporaries, ...), which the UIs stack.
//
// The times are the engine's estimate, not a measurement; without a GPU (--capacity) every op takes 0 ns and
// the file has no time axis worth opening. Not in the file (yet): the allocator's own events (cudaMalloc,
// cudaFree, OOM) and reserved memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

class OpGraph;
struct Timeline;
struct AllocationSchedule;

struct PredictedTimeline {
  struct OpSlice {
    std::string name;
    StreamId stream = 0;
    TimeNs start_ns = 0;
    TimeNs end_ns = 0;
    int step = 0;
    std::string phase;
    int layer = -1;
  };
  struct MemorySample {
    TimeNs time_ns = 0;
    std::vector<std::int64_t> live_bytes;  // per category, in `categories` order
  };
  std::vector<OpSlice> ops;             // in op order
  std::vector<std::string> categories;  // category_name() of each TensorCategory
  std::vector<MemorySample> memory;     // one per distinct event time, in time order
  std::size_t peak_sample = 0;          // the sample holding the allocator model's peak event
};

// The ops and the live bytes per category over time of a timed schedule (timed_schedule()); `peak_event` is
// the index of the event where the allocator model saw its peak (Prediction::peak_event_index).
PredictedTimeline predicted_timeline(const OpGraph& graph, const Timeline& timeline,
                                     const AllocationSchedule& timed, std::size_t peak_event);

// The trace-event JSON (deterministic: same input, same bytes).
std::string perfetto_json(const PredictedTimeline& t, const std::string& title);

}  // namespace vramsim
