// The training step on a time axis, with the host and the device apart, as eager PyTorch runs it.
//
// The host (the Python thread) issues the op graph's ops in program order. Each op that launches kernels
// costs it `host_op_ns`; ops that launch nothing (reference drops, set_to_none, checkpoint bookkeeping) cost
// nothing. The host blocks only where the program synchronises: an op's `host_waits_for`
// (Event.synchronize(), FSDP's rate limiter), or when `launch_queue_depth` kernels are issued and not yet
// started (CUDA's launch queue is finite). Otherwise it runs ahead of the device.
//
// The device runs each op on its stream (sim/engine/streams.h) no earlier than the host issued it, after the
// ops before it on that stream and after the ops of other streams whose outputs it reads (cudaEventRecord /
// cudaStreamWaitEvent pairs, as PyTorch code that uses side streams writes them), for its roofline duration;
// a collective (Op::comm_bytes) takes comm_bytes over the GPU's link bandwidth instead.
//
// The caching allocator runs on the host, so the allocation schedule's events are dispatched in program
// order at the host's issue times: an op's outputs when the host issues it, the tensors it was the last user
// of right after. The one exception is a deferred free (Tensor::record_stream, spec ST2-ST3): its
// free_requested comes at the host's free, but its free_completed only at the first allocation the host makes
// after the device has run the recording stream's work issued before the free (the allocator notices
// completed events at the start of malloc: process_events), or at the end of the run.
//
// What the times mean: the roofline's device-side estimate (sim/engine/roofline.h) and an estimated host
// cost, not measurements. Memory results depend on them only through deferred frees: without record_stream,
// or with every op on one stream, the allocator sees the schedule's own order.
//
// Compute precision per op (Note [Op compute dtype] in step_timeline.cpp): matmuls and attention run on
// tensor cores in the dtype of their output (bf16/fp16 under autocast); fp32 matmuls use the fp32 peak, as
// PyTorch's default torch.backends.cuda.matmul.allow_tf32 = False does; everything else is costed at the fp32
// CUDA-core peak (those ops are memory-bound, so the ceiling hardly matters).
#pragma once

#include <cstddef>
#include <vector>

#include "sim/core/types.h"
#include "sim/engine/roofline.h"
#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"

namespace vramsim {

struct OpTime {
  TimeNs issue_ns = 0;  // the host issued it (and allocated its outputs)
  TimeNs start_ns = 0;  // on the device
  TimeNs end_ns = 0;
};

// The host's side of the timeline.
struct TimelineOptions {
  // est.: the CPU time of one eager op that launches kernels (Python, the dispatcher, the launch): published
  // eager-mode profiles put it at ~5-20 us per op; 10 us is the middle.
  TimeNs host_op_ns = 10'000;
  // Kernels the host may have issued ahead of the device before a launch blocks (CUDA's launch queue holds
  // about a thousand).
  std::size_t launch_queue_depth = 1024;
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
  // Indexed by schedule event: the stream its op ran on (kCudaGraphPoolStream for a graph-pool tensor), found
  // once here so that timed_schedule() need not look up the tensor and its ops again (issue 40).
  std::vector<StreamId> event_stream;
  std::vector<StepTime> steps;  // steps 1..N, in order
  TimeNs end_ns = 0;            // when the last op ends
};

// Runs the graph's ops through the engine. `roofline` null: every op takes 0 ns and the host costs nothing
// (the time axis is absent; deferred frees complete at the next allocation). Cost: O((ops + events) log ops).
Timeline simulate_timeline(const OpGraph& graph, const AllocationSchedule& schedule, const Roofline* roofline,
                           const TimelineOptions& host = {});

// The schedule as the engine dispatched it: events reordered by `timeline.event_order` (only deferred frees'
// free_completed move), stamped with their times and their op's stream; event_tensor, live bytes, the peak
// and the phase markers follow.
AllocationSchedule timed_schedule(const OpGraph& graph, const AllocationSchedule& schedule,
                                  const Timeline& timeline);
// The same, taking over `schedule`'s string table instead of copying it (predict's untimed schedule is not
// used after this: one string per op name fewer to copy and free).
AllocationSchedule timed_schedule(const OpGraph& graph, AllocationSchedule&& schedule,
                                  const Timeline& timeline);

}  // namespace vramsim
