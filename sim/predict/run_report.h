// From a run's allocator trace to the report `predict` and `trace` print: the trace replayed through the
// allocator model on the device, and every figure — peaks, the bill at the peak, phases, per-step peaks,
// fragmentation, the verdict — observed on the model's own state after each event (ReplayOptions::on_event),
// at the run's phase markers. Nothing is re-counted from request sizes.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_prediction.h"
#include "sim/replay/memory_timeline.h"
#include "traces/snapshot.h"

namespace vramsim {

// From this event on (index into the device-0 trace), the run is in `phase` of training step `step` (0 =
// setup). The phases predict and trace use: setup, forward, loss, after_forward (an inference forward
// returned), backward, post_backward, optimizer, after_optimizer, zero_grad.
struct RunMarker {
  std::size_t event_index = 0;
  int step = 0;
  std::string phase;
};

struct RunDevice {
  std::string gpu;           // GPU table name; empty = capacity_bytes
  Bytes capacity_bytes = 0;  // --capacity (no CUDA context counted)
  std::optional<std::string> alloc_conf;
  ContextOptions context;  // --module-loading, --cuda-context
};

// The name and decoder layer of the tensor an alloc event made (for "largest live tensors"); without it the
// event's op tag and layer are used.
using TensorNamer = std::function<LiveTensor(std::size_t alloc_event_index)>;

// Replays `trace` (device 0) on the device (its total less the CUDA context; a second time without the limit
// when it runs out of memory, for what the run needs) and explains it. Sets everything in Prediction except
// model_name, ops and timing; `tensors` is the number of allocations. Throws InputError.
Prediction explain_run(const Snapshot& trace, const std::vector<RunMarker>& markers, const RunDevice& device,
                       const TensorNamer& name_of = {});

// The allocator model over `trace` (device 0) on the device explain_run() gave `p`, for the pictures
// (--html, --perfetto). Throws InputError.
MemoryTimeline observe_run(const Snapshot& trace, const Prediction& p,
                           const std::optional<std::string>& alloc_conf);

}  // namespace vramsim
