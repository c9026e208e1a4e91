#include "sim/predict/step_timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "sim/core/assert.h"
#include "sim/engine/simulator.h"
#include "sim/engine/streams.h"

namespace vramsim {
namespace {

// Note [Op compute dtype]: which FLOP/s ceiling an op gets. Tensor-core kinds (the forward GEMMs, their
// backwards, FlashAttention) compute in 16 bits when an operand is 16-bit (device_work: whatever they write,
// as a compiled backward writing an fp32 weight gradient from bf16 operands), else in their output's dtype
// (their first input's where they write into a reused buffer and allocate nothing); fp32 GEMMs stay on the
// fp32 peak because PyTorch leaves TF32 off for matmuls by default. Other kernels are elementwise or
// reductions, costed at the fp32 CUDA-core peak. torchao's float8 GEMM (torch._scaled_mm, forward and
// backward: grad_input and grad_weight are _scaled_mm calls on float8 operands too,
// torchao/float8/float8_linear.py matmul_with_hp_or_float8_args) runs cuBLASLt's FP8 tensor-core kernels
// whatever its output dtype, so it gets the FP8 ceiling (GpuSpec::peak_flops_per_s falls back to FP16's where
// the GPU has no FP8 path), and so does Transformer Engine's te.Linear under fp8_autocast (module/linear.py
// _Linear: general_gemm on the quantized input and weight forward, and for dgrad and wgrad backward).
bool uses_tensor_cores(const std::string& kind) {
  static constexpr std::string_view kKinds[] = {"mm",
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
  if (op.kind == "_scaled_mm" || op.kind == "_scaled_mm_backward" || op.kind == "te._Linear" ||
      op.kind == "te._Linear_backward") {
    return ComputeDType::kFp8;
  }
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

// What the device is asked to do per op, derived once from the graph.
struct DeviceWork {
  std::vector<TimeNs> duration;
  std::vector<bool> memory_bound;
  std::vector<bool> read_elsewhere;                    // an op of another stream reads one of its outputs
  std::vector<std::vector<OpId>> cross_stream_inputs;  // producers on other streams of what it reads
};

DeviceWork device_work(const OpGraph& graph, const Roofline* roofline) {
  const std::size_t n_ops = graph.op_count();
  DeviceWork w;
  w.duration.assign(n_ops, 0);
  w.memory_bound.assign(n_ops, false);
  w.read_elsewhere.assign(n_ops, false);
  w.cross_stream_inputs.resize(n_ops);
  // An op's first output dtype picks its compute precision (kernel scratch, raw bytes allocated before a
  // backward's gradients, says nothing about it). An op that allocates nothing, such as a compiled kernel
  // writing into a buffer Inductor reuses (inductor_memory.cpp emit), computes in its first input's dtype:
  // a compiled layer's down_proj mm reads bf16 and writes bf16 into a dead buffer.
  std::vector<DType> output_dtype(n_ops, DType::kFloat32);
  std::vector<bool> has_output(n_ops, false);
  std::vector<std::optional<DType>> first_input(n_ops);
  // A tensor-core op that reads a 16-bit operand multiplies in 16 bits whatever it writes: a compiled
  // backward under autocast writes the fp32 weight gradient of an fp32 parameter first, from bf16 operands.
  std::vector<std::optional<DType>> half_input(n_ops);
  std::vector<StreamId> op_stream(n_ops);  // read once in order: the loop below reads it per consumer
  for (OpId id = 0; id < n_ops; ++id) {
    op_stream[id] = graph.op(id).stream;
  }
  for (const Tensor& t : graph.tensors()) {
    if (!has_output[t.producer] && t.dtype != DType::kUInt8) {
      has_output[t.producer] = true;
      output_dtype[t.producer] = t.dtype;
    }
    for (OpId c : t.consumers) {
      if (!first_input[c] && t.dtype != DType::kUInt8) {
        first_input[c] = t.dtype;
      }
      if (!half_input[c] && (t.dtype == DType::kBFloat16 || t.dtype == DType::kFloat16)) {
        half_input[c] = t.dtype;
      }
      if (op_stream[c] != op_stream[t.producer]) {
        w.read_elsewhere[t.producer] = true;
        w.cross_stream_inputs[c].push_back(t.producer);
      }
    }
  }
  for (OpId id = 0; id < n_ops; ++id) {
    const OpId target = graph.op(id).stream_waits_for;
    if (target != kNoOp) {
      SIM_ASSERT(target < id);  // a stream can wait only for work already issued
      w.read_elsewhere[target] = true;
      w.cross_stream_inputs[id].push_back(target);
    }
  }
  if (roofline == nullptr) {
    return w;
  }
  for (OpId id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (op.comm_bytes > 0) {  // a collective: the links, not the SMs, bound it
      w.duration[id] = roofline->gpu().launch_overhead_ns +
                       static_cast<TimeNs>(std::ceil(static_cast<double>(op.comm_bytes) * 1e9 /
                                                     roofline->gpu().link_bytes_per_s));
      w.memory_bound[id] = true;
    } else if (op.flops > 0 || op.bytes_moved > 0) {
      const OpWork work{
          op.flops, static_cast<double>(op.bytes_moved),
          compute_dtype(
              op, half_input[id] && uses_tensor_cores(op.kind)
                      ? *half_input[id]
                      : (has_output[id] ? output_dtype[id] : first_input[id].value_or(DType::kFloat32)))};
      w.duration[id] = roofline->duration_ns(work);
      w.memory_bound[id] = roofline->memory_bound(work);
    }
  }
  return w;
}

// The host thread and the allocator it calls: issues the ops in program order onto the streams, dispatches
// the schedule's events at issue times, and holds deferred frees until their stream events complete.
class HostThread final : public IStreamObserver {
 public:
  HostThread(const OpGraph& graph, const AllocationSchedule& schedule, const DeviceWork& work,
             const TimelineOptions& options, Simulator& sim, Timeline& out)
      : m_graph(graph), m_schedule(schedule), m_work(work), m_options(options), m_sim(sim), m_out(out) {
    const std::size_t n_ops = graph.op_count();
    m_allocs.resize(n_ops);
    m_frees.resize(n_ops);
    out.event_stream.assign(schedule.events.size(), 0);
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
      const Tensor& t = graph.tensor(schedule.event_tensor[i]);
      out.event_stream[i] = t.graph_pool ? kCudaGraphPoolStream : graph.op(op).stream;
    }
    m_done.assign(n_ops, false);
    m_done_event.assign(n_ops, 0);
    out.ops.assign(n_ops, OpTime{});
    out.event_time_ns.assign(schedule.events.size(), 0);
    out.event_order.reserve(schedule.events.size());
  }

  void attach(Streams& streams) { m_streams = &streams; }

  // Issues ops until the program ends or the host blocks; resumed by the simulator.
  void run() {
    while (m_next < m_graph.op_count()) {
      const OpId id = static_cast<OpId>(m_next);
      const Op& op = m_graph.op(id);
      if (op.host_waits_for != kNoOp && !m_done[op.host_waits_for]) {
        SIM_ASSERT(op.host_waits_for < id);  // the host would wait for an op it has not issued
        m_waiting_for = op.host_waits_for;
        return;
      }
      const bool kernel = m_work.duration[id] > 0;
      if (kernel && m_issued_kernels - m_started_kernels >= m_options.launch_queue_depth) {
        m_queue_full = true;
        return;
      }
      issue(id, op);
      ++m_next;
      if (kernel) {
        ++m_issued_kernels;
        if (m_options.host_op_ns > 0) {
          m_sim.schedule(m_options.host_op_ns, [this] { run(); });
          return;
        }
      }
    }
  }

  // After the simulation: deferred frees still waiting complete at the end of the run.
  void finish() {
    complete_ready(m_out.end_ns);
    for (auto& [event, frees] : m_pending) {
      (void)event;
      for (std::size_t i : frees) {
        dispatch_one(i, m_out.end_ns);
      }
    }
    m_pending.clear();
  }

  bool all_issued() const { return m_next == m_graph.op_count(); }

  void on_op_start(const StreamOp& op) override {
    m_out.ops[op.op_id].start_ns = op.start_ns;
    if (m_work.duration[op.op_id] > 0) {
      ++m_started_kernels;
      if (m_queue_full) {
        m_queue_full = false;
        m_sim.schedule(0, [this] { run(); });
      }
    }
  }

  void on_op_end(const StreamOp& op) override {
    const TimeNs end = op.start_ns + op.duration_ns;
    m_out.ops[op.op_id].end_ns = end;
    m_out.end_ns = std::max(m_out.end_ns, end);
    m_done[op.op_id] = true;
    if (m_waiting_for == op.op_id) {
      m_waiting_for = kNoOp;
      m_sim.schedule(0, [this] { run(); });
    }
  }

  void on_event_completed(CudaEventId event, StreamId /*stream*/, TimeNs /*time_ns*/) override {
    auto it = m_pending.find(event);
    if (it != m_pending.end()) {
      m_ready.insert(m_ready.end(), it->second.begin(), it->second.end());
      m_pending.erase(it);
    }
  }

 private:
  void issue(OpId id, const Op& op) {
    const TimeNs now = m_sim.now();
    m_out.ops[id].issue_ns = now;
    for (OpId producer : m_work.cross_stream_inputs[id]) {
      m_streams->wait_event(op.stream, m_done_event[producer]);
    }
    m_streams->enqueue_op(op.stream, id, m_work.duration[id]);
    if (m_work.read_elsewhere[id]) {
      m_done_event[id] = m_streams->record_event(op.stream);
    }
    const Range& allocs = m_allocs[id];
    if (allocs.begin != allocs.end) {
      complete_ready(now);  // malloc starts with process_events
    }
    for (std::size_t i = allocs.begin; i < allocs.end; ++i) {
      dispatch_one(i, now);
    }
    const Range& frees = m_frees[id];
    for (std::size_t i = frees.begin; i < frees.end; ++i) {
      const TraceEvent& e = m_schedule.events[i];
      const Tensor& t = m_graph.tensor(m_schedule.event_tensor[i]);
      if (e.action == TraceAction::kFreeCompleted && deferred(t)) {
        // The event recorded on the used-on stream at the free: the block waits for it.
        m_pending[m_streams->record_event(t.record_stream)].push_back(i);
        continue;
      }
      dispatch_one(i, now);
    }
  }

  bool deferred(const Tensor& t) const {
    return t.record_stream != kNoRecordStream && t.record_stream != m_graph.op(t.producer).stream;
  }

  void complete_ready(TimeNs now) {
    for (std::size_t i : m_ready) {
      dispatch_one(i, now);
    }
    m_ready.clear();
  }

  void dispatch_one(std::size_t i, TimeNs time_ns) {
    m_out.event_order.push_back(i);
    m_out.event_time_ns[i] = time_ns;
  }

  const OpGraph& m_graph;
  const AllocationSchedule& m_schedule;
  const DeviceWork& m_work;
  const TimelineOptions& m_options;
  Simulator& m_sim;
  Timeline& m_out;
  Streams* m_streams = nullptr;
  std::vector<Range> m_allocs;
  std::vector<Range> m_frees;
  std::vector<bool> m_done;
  std::vector<CudaEventId> m_done_event;
  std::size_t m_next = 0;
  OpId m_waiting_for = kNoOp;
  bool m_queue_full = false;
  std::size_t m_issued_kernels = 0;
  std::size_t m_started_kernels = 0;
  std::map<CudaEventId, std::vector<std::size_t>> m_pending;  // free_completed events per stream event
  std::vector<std::size_t> m_ready;  // their events completed; noticed at the next malloc
};

}  // namespace

Timeline simulate_timeline(const OpGraph& graph, const AllocationSchedule& schedule, const Roofline* roofline,
                           const TimelineOptions& host) {
  Timeline out;
  const DeviceWork work = device_work(graph, roofline);
  TimelineOptions options = host;
  if (roofline == nullptr) {
    options.host_op_ns = 0;  // no time axis
  }
  Simulator sim;
  HostThread thread(graph, schedule, work, options, sim, out);
  Streams streams(sim, &thread);
  thread.attach(streams);
  sim.schedule(0, [&thread] { thread.run(); });
  sim.run();
  thread.finish();
  SIM_ASSERT_INTERNAL(thread.all_issued());  // the host blocked for good
  SIM_ASSERT_INTERNAL(streams.idle());       // ops left on a stream after the run
  SIM_ASSERT_INTERNAL(out.event_order.size() == schedule.events.size());  // schedule events not dispatched

  // Per-step times and the roofline's bound for each op.
  const std::size_t n_ops = graph.op_count();
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
    if (work.duration[id] > 0) {
      ++st.kernels;
      (work.memory_bound[id] ? st.memory_ns : st.compute_ns) += work.duration[id];
    }
  }
  return out;
}

namespace {

// timed_schedule's body: everything but the string table, which the caller copies or moves into `out`.
AllocationSchedule reorder_schedule(const OpGraph& graph, const AllocationSchedule& schedule,
                                    const Timeline& timeline, AllocationSchedule out) {
  SIM_ASSERT(timeline.event_order.size() == schedule.events.size());  // timeline of another schedule
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
    const Tensor& t = graph.tensor(schedule.event_tensor[i]);
    e.stream = timeline.event_stream.size() == n  // else a timeline made without simulate_timeline
                   ? timeline.event_stream[i]
                   : (t.graph_pool ? kCudaGraphPoolStream : graph.op(event_op(graph, schedule, i)).stream);
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

}  // namespace

AllocationSchedule timed_schedule(const OpGraph& graph, const AllocationSchedule& schedule,
                                  const Timeline& timeline) {
  AllocationSchedule out;
  out.strings = schedule.strings;
  return reorder_schedule(graph, schedule, timeline, std::move(out));
}

AllocationSchedule timed_schedule(const OpGraph& graph, AllocationSchedule&& schedule,
                                  const Timeline& timeline) {
  AllocationSchedule out;
  out.strings = std::move(schedule.strings);
  return reorder_schedule(graph, schedule, timeline, std::move(out));
}

}  // namespace vramsim
