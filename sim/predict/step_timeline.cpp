#include "sim/predict/step_timeline.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/engine/simulator.h"
#include "sim/engine/streams.h"

namespace vramsim {
namespace {

// Note [Op compute dtype]: which FLOP/s ceiling an op gets. Tensor-core kinds (the forward GEMMs, their
// backwards, FlashAttention) compute in their output's dtype; fp32 GEMMs stay on the fp32 peak because
// PyTorch leaves TF32 off for matmuls by default. Other kernels are elementwise or reductions, costed at the
// fp32 CUDA-core peak.
bool uses_tensor_cores(const std::string& kind) {
  static const char* const kKinds[] = {"mm",
                                       "addmm",
                                       "bmm",
                                       "mm_backward",
                                       "addmm_backward",
                                       "bmm_backward",
                                       "_scaled_dot_product_flash_attention",
                                       "_scaled_dot_product_flash_attention_backward"};
  return std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds);
}

ComputeDType compute_dtype(const Op& op, DType output) {
  if (!uses_tensor_cores(op.kind)) {
    return ComputeDType::kFp32;
  }
  switch (output) {
    case DType::kBFloat16:
      return ComputeDType::kBf16;
    case DType::kFloat16:
      return ComputeDType::kFp16;
    default:
      return ComputeDType::kFp32;
  }
}

// Which op each schedule event belongs to: an allocation to its tensor's producer, a free to its last user.
OpId event_op(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t i) {
  const Tensor& t = graph.tensor(schedule.event_tensor[i]);
  return schedule.events[i].action == TraceAction::kAlloc ? t.producer : t.last_consumer();
}

struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Dispatches each op's allocations at its start and its frees at its end, and times the steps.
class Dispatcher final : public IStreamObserver {
 public:
  Dispatcher(const OpGraph& graph, const AllocationSchedule& schedule, Timeline& out) : m_out(out) {
    const std::size_t n_ops = graph.op_count();
    m_allocs.resize(n_ops);
    m_frees.resize(n_ops);
    // tensor_lifetime.h: events come op by op in op order, allocations of an op before its frees.
    for (std::size_t i = 0; i < schedule.events.size(); ++i) {
      const OpId op = event_op(graph, schedule, i);
      std::vector<Range>& ranges = schedule.events[i].action == TraceAction::kAlloc ? m_allocs : m_frees;
      Range& r = ranges[op];
      if (r.begin == r.end) {
        r.begin = i;
        r.end = i;
      }
      SIM_ASSERT_INTERNAL(r.end == i);  // schedule events of one op are not contiguous
      r.end = i + 1;
    }
    out.ops.assign(n_ops, OpTime{});
    out.event_time_ns.assign(schedule.events.size(), 0);
    out.event_order.reserve(schedule.events.size());
  }

  void on_op_start(const StreamOp& op) override {
    m_out.ops[op.op_id].start_ns = op.start_ns;
    dispatch(m_allocs[op.op_id], op.start_ns);
  }

  void on_op_end(const StreamOp& op) override {
    const TimeNs end = op.start_ns + op.duration_ns;
    m_out.ops[op.op_id].end_ns = end;
    m_out.end_ns = std::max(m_out.end_ns, end);
    dispatch(m_frees[op.op_id], end);
  }

 private:
  void dispatch(const Range& r, TimeNs time_ns) {
    for (std::size_t i = r.begin; i < r.end; ++i) {
      m_out.event_order.push_back(i);
      m_out.event_time_ns[i] = time_ns;
    }
  }

  Timeline& m_out;
  std::vector<Range> m_allocs;
  std::vector<Range> m_frees;
};

}  // namespace

Timeline simulate_timeline(const OpGraph& graph, const AllocationSchedule& schedule,
                           const Roofline* roofline) {
  Timeline out;
  Dispatcher dispatcher(graph, schedule, out);
  Simulator sim;
  Streams streams(sim, &dispatcher);

  const std::size_t n_ops = graph.op_count();
  // An op's first output dtype picks its compute precision (kernel scratch, raw bytes allocated before a
  // backward's gradients, says nothing about it); an op whose output another stream reads records an event
  // that the reading stream waits for.
  std::vector<DType> output_dtype(n_ops, DType::kFloat32);
  std::vector<bool> has_output(n_ops, false);
  std::vector<bool> read_elsewhere(n_ops, false);
  for (const Tensor& t : graph.tensors()) {
    if (!has_output[t.producer] && t.dtype != DType::kUInt8) {
      has_output[t.producer] = true;
      output_dtype[t.producer] = t.dtype;
    }
    for (OpId c : t.consumers) {
      read_elsewhere[t.producer] =
          read_elsewhere[t.producer] || graph.op(c).stream != graph.op(t.producer).stream;
    }
  }
  std::vector<CudaEventId> done_event(n_ops, 0);
  std::vector<std::vector<OpId>> cross_stream_inputs(n_ops);
  for (const Tensor& t : graph.tensors()) {
    for (OpId c : t.consumers) {
      if (graph.op(c).stream != graph.op(t.producer).stream) {
        cross_stream_inputs[c].push_back(t.producer);
      }
    }
  }

  std::vector<TimeNs> duration(n_ops, 0);
  std::vector<bool> memory_bound(n_ops, false);
  for (OpId id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    for (OpId producer : cross_stream_inputs[id]) {
      streams.wait_event(op.stream, done_event[producer]);
    }
    if (roofline != nullptr && (op.flops > 0 || op.bytes_moved > 0)) {
      const OpWork work{op.flops, static_cast<double>(op.bytes_moved), compute_dtype(op, output_dtype[id])};
      duration[id] = roofline->duration_ns(work);
      memory_bound[id] = roofline->memory_bound(work);
    }
    streams.enqueue_op(op.stream, id, duration[id]);
    if (read_elsewhere[id]) {
      done_event[id] = streams.record_event(op.stream);
    }
  }
  sim.run();
  SIM_ASSERT_INTERNAL(streams.idle());  // ops left on a stream after the run
  SIM_ASSERT_INTERNAL(out.event_order.size() == schedule.events.size());  // schedule events not dispatched

  // Per-step times and the roofline's bound for each op.
  for (OpId id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (op.step <= 0) {
      continue;
    }
    if (out.steps.empty() || out.steps.back().step != op.step) {
      out.steps.push_back(StepTime{op.step, out.ops[id].start_ns, out.ops[id].end_ns, 0, 0, 0});
    }
    StepTime& st = out.steps.back();
    st.start_ns = std::min(st.start_ns, out.ops[id].start_ns);
    st.end_ns = std::max(st.end_ns, out.ops[id].end_ns);
    if (duration[id] > 0) {
      ++st.kernels;
      (memory_bound[id] ? st.memory_ns : st.compute_ns) += duration[id];
    }
  }
  return out;
}

AllocationSchedule timed_schedule(const OpGraph& graph, const AllocationSchedule& schedule,
                                  const Timeline& timeline) {
  SIM_ASSERT(timeline.event_order.size() == schedule.events.size());  // timeline of another schedule
  AllocationSchedule out;
  out.strings = schedule.strings;
  const std::size_t n = schedule.events.size();
  out.events.reserve(n);
  out.event_tensor.reserve(n);
  out.live_bytes_after.reserve(n);
  std::vector<std::size_t> new_index(n + 1, n);
  std::int64_t live = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = timeline.event_order[k];
    new_index[i] = k;
    TraceEvent e = schedule.events[i];
    e.time_ns = timeline.event_time_ns[i];
    e.stream = graph.op(event_op(graph, schedule, i)).stream;
    const Tensor& t = graph.tensor(schedule.event_tensor[i]);
    if (e.action == TraceAction::kAlloc) {
      live += static_cast<std::int64_t>(t.size_bytes);
    } else if (e.action == TraceAction::kFreeCompleted) {
      live -= static_cast<std::int64_t>(t.size_bytes);
    }
    out.events.push_back(e);
    out.event_tensor.push_back(schedule.event_tensor[i]);
    out.live_bytes_after.push_back(live);
    if (live > out.peak_live_bytes) {
      out.peak_live_bytes = live;
      out.peak_event_index = k;
    }
  }
  // A phase begins where its first event went; phases with no events left keep their relative place.
  out.phases = schedule.phases;
  for (PhaseMarker& m : out.phases) {
    m.event_index = new_index[m.event_index];
  }
  return out;
}

}  // namespace vramsim
