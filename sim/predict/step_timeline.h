// The training step on a time axis: the op graph's ops run on simulated CUDA streams (sim/engine/streams.h)
// in dependency order, each taking its roofline duration, and the allocation schedule's events are
// dispatched from inside the engine's run loop: an op's outputs are allocated when it starts, the tensors it
// was the last user of are freed when it ends (tensor_lifetime.h). The allocator model then replays the
// events in exactly the order, and with the times, the engine dispatched them.
//
// What the times mean: the roofline's device-side estimate (sim/engine/roofline.h), not a measurement. The
// host is assumed to run ahead of the device (eager PyTorch launches asynchronously), so a step lasts as long
// as its kernels back to back. Ops that launch no kernel (reference drops, set_to_none, checkpoint
// bookkeeping: no FLOPs and no bytes moved) take no time.
//
// Compute precision per op (Note [Op compute dtype] in step_timeline.cpp): matmuls and attention run on
// tensor cores in the dtype of their output (bf16/fp16 under autocast); fp32 matmuls use the fp32 peak, as
// PyTorch's default torch.backends.cuda.matmul.allow_tf32 = False does; everything else is costed at the fp32
// CUDA-core peak (those ops are memory-bound, so the ceiling hardly matters).
//
// Cross-stream data dependencies become cudaEventRecord / cudaStreamWaitEvent pairs, as PyTorch code that
// uses side streams writes them. With every op on one stream (the eager default) the dispatch order equals
// the schedule's order.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/core/types.h"
#include "sim/engine/roofline.h"
#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"

namespace vramsim {

struct OpTime {
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
};

struct StepTime {
  int step = 0;           // 1-based; setup (step 0) is not a step
  TimeNs start_ns = 0;    // first kernel of the step starts
  TimeNs end_ns = 0;      // last kernel of the step ends
  TimeNs compute_ns = 0;  // summed durations of ops limited by arithmetic
  TimeNs memory_ns = 0;   // summed durations of ops limited by DRAM bandwidth (launch overhead included)
  std::size_t kernels = 0;
  TimeNs duration_ns() const { return end_ns - start_ns; }
};

struct Timeline {
  std::vector<OpTime> ops;               // indexed by OpId
  std::vector<std::size_t> event_order;  // schedule event indices, in the order the engine dispatched them
  std::vector<TimeNs> event_time_ns;     // indexed by schedule event
  std::vector<StepTime> steps;           // steps 1..N, in order
  TimeNs end_ns = 0;                     // when the last op ends
};

// Runs the graph's ops through the engine. `roofline` null: every op takes 0 ns (the order of events is still
// the engine's; only the time axis is absent). Cost: O((ops + events) log ops).
Timeline simulate_timeline(const OpGraph& graph, const AllocationSchedule& schedule,
                           const Roofline* roofline);

// The schedule as the engine dispatched it: events reordered by `timeline.event_order`, stamped with their
// times and their op's stream; event_tensor, live bytes, the peak and the phase markers follow.
AllocationSchedule timed_schedule(const OpGraph& graph, const AllocationSchedule& schedule,
                                  const Timeline& timeline);

}  // namespace vramsim
