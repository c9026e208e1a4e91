#include "sim/predict/run_report.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/core/error.h"
#include "sim/graph/op_graph.h"
#include "sim/predict/gpu_memory.h"
#include "sim/simulate/policy_run.h"

namespace vramsim {
namespace {

TensorCategory category_of(std::string_view name) {
  for (const TensorCategory c :
       {TensorCategory::kParameter, TensorCategory::kGradient, TensorCategory::kOptimizerState,
        TensorCategory::kActivation, TensorCategory::kTemporary, TensorCategory::kWorkspace,
        TensorCategory::kInput, TensorCategory::kCommunication, TensorCategory::kKvCache}) {
    if (category_name(c) == name) {
      return c;
    }
  }
  return TensorCategory::kTemporary;  // untagged, or a category of another tool
}

// The model's allocated and reserved bytes after every request.
struct Observed {
  std::vector<std::int64_t> allocated;
  std::vector<std::int64_t> reserved;
  PolicyRunResult result;
};

Observed observe(const Workload& workload, Bytes capacity, const CachingConfig& config) {
  const std::size_t n = workload.requests.ops().size();
  Observed o;
  o.allocated.resize(n);
  o.reserved.resize(n);
  PolicyRunOptions options;
  options.capacity_bytes = capacity;
  options.config = config;
  options.free_space_at_allocated_peak = false;
  options.on_request = [&](std::size_t i, const DeviceStats& s) {
    o.allocated[i] = s.allocated_bytes[kStatAll].current;
    o.reserved[i] = s.reserved_bytes[kStatAll].current;
  };
  // The native policy; the configuration says whether its segments are expandable.
  o.result = run_policy(find_policy("pytorch"), workload.requests, options);
  return o;
}

std::int64_t before(const std::vector<std::int64_t>& after, std::size_t index) {
  return index == 0 || after.empty() ? 0 : after[std::min(index, after.size()) - 1];
}

// Index of the first marker at or after `from` for which `pred` holds, or markers.size().
template <typename Pred>
std::size_t find_marker(const std::vector<RunMarker>& m, std::size_t from, Pred pred) {
  for (std::size_t i = from; i < m.size(); ++i) {
    if (pred(m[i])) {
      return i;
    }
  }
  return m.size();
}

// `series` (bytes after each event) where the last step enters each phase.
PhaseBytes phases_of(const std::vector<RunMarker>& markers, const std::vector<std::int64_t>& series,
                     std::size_t events) {
  PhaseBytes out;
  int last = 0;
  for (const RunMarker& m : markers) {
    last = std::max(last, m.step);
  }
  if (last == 0) {
    return out;
  }
  const auto at = [&](std::size_t marker) {
    return before(series, marker < markers.size() ? markers[marker].request_index : events);
  };
  const auto in_step = [&](std::size_t i) { return i < markers.size() && markers[i].step == last; };
  const std::size_t fwd =
      find_marker(markers, 0, [&](const RunMarker& m) { return m.step == last && m.phase == "forward"; });
  if (fwd == markers.size()) {
    return out;
  }
  out.before_forward = at(fwd);
  out.after_forward = at(find_marker(markers, fwd, [](const RunMarker& m) { return m.phase != "forward"; }));
  // The last backward and the last optimizer step of the step (gradient accumulation runs several backwards).
  std::size_t last_backward = markers.size();
  std::size_t last_optimizer = markers.size();
  for (std::size_t i = fwd; in_step(i); ++i) {
    if (markers[i].phase == "backward") {
      last_backward = i;
    } else if (markers[i].phase == "optimizer") {
      last_optimizer = i;
    }
  }
  if (last_backward < markers.size()) {
    out.after_backward =
        at(find_marker(markers, last_backward, [](const RunMarker& m) { return m.phase != "backward"; }));
  }
  if (last_optimizer < markers.size()) {
    out.after_optimizer_step =
        at(find_marker(markers, last_optimizer, [](const RunMarker& m) { return m.phase != "optimizer"; }));
  }
  return out;
}

// The step each event belongs to, from the markers (0 before the first).
std::vector<int> steps_of(std::size_t events, const std::vector<RunMarker>& markers) {
  std::vector<int> out(events, 0);
  std::size_t m = 0;
  int step = 0;
  for (std::size_t i = 0; i < events; ++i) {
    while (m < markers.size() && markers[m].request_index <= i) {
      step = markers[m++].step;
    }
    out[i] = step;
  }
  return out;
}

// The five largest of the tensors live at the peak, larger first and equal sizes by name, as partial_sort
// over all of them in allocation order orders them. A tensor is named (name_of builds a string) only when the
// sort compares it with one of the same size: naming all of them, about 1,700 at the quick start's peak, to
// keep five cost a twentieth of a prediction outside the allocator model (issue 40).
class LargestLive {
 public:
  LargestLive(const Workload& w, const TensorNamer& name_of) : m_w(w), m_name_of(name_of) {}
  void add(std::size_t at, TensorCategory c) {
    m_slots.push_back(Slot{at, c, std::nullopt});
    m_order.push_back(Key{m_w.requests.ops()[at].size_bytes, m_slots.size() - 1});
  }
  std::vector<LiveTensor> take() {
    const std::size_t n_top = std::min<std::size_t>(5, m_order.size());
    std::partial_sort(m_order.begin(), m_order.begin() + static_cast<std::ptrdiff_t>(n_top), m_order.end(),
                      [this](const Key& a, const Key& b) {
                        return a.size_bytes != b.size_bytes ? a.size_bytes > b.size_bytes
                                                            : named(a.slot).name < named(b.slot).name;
                      });
    std::vector<LiveTensor> top;
    top.reserve(n_top);
    for (std::size_t k = 0; k < n_top; ++k) {
      top.push_back(std::move(named(m_order[k].slot)));
    }
    return top;
  }

 private:
  struct Slot {
    std::size_t at = 0;  // the tensor's allocation request
    TensorCategory category = TensorCategory::kTemporary;
    std::optional<LiveTensor> tensor;  // once named
  };
  struct Key {
    Bytes size_bytes = 0;
    std::size_t slot = 0;
  };
  LiveTensor& named(std::size_t slot) {
    Slot& s = m_slots[slot];
    if (!s.tensor) {
      const RequestLabel& label = m_w.labels[s.at];
      const Bytes size = m_w.requests.ops()[s.at].size_bytes;
      LiveTensor t =
          m_name_of ? m_name_of(s.at) : LiveTensor{m_w.tag(label.op_tag), s.category, label.layer, size};
      t.category = s.category;
      t.size_bytes = size;
      s.tensor = std::move(t);
    }
    return *s.tensor;
  }
  const Workload& m_w;
  const TensorNamer& m_name_of;
  std::vector<Slot> m_slots;
  std::vector<Key> m_order;
};

// One walk over the requests: the requested bytes after each, the number of allocations, and at the peak
// request the bill (requested bytes per category, rounding = the model's allocated - requested) and the five
// largest live tensors.
std::vector<std::int64_t> walk_requests(Prediction& p, const Workload& w,
                                        const std::vector<std::int64_t>& alloc, const TensorNamer& name_of) {
  const std::vector<RequestOp>& ops = w.requests.ops();
  // allocation id (dense: 0 .. alloc_count() - 1) -> its request while live, kDead otherwise
  constexpr std::size_t kDead = static_cast<std::size_t>(-1);
  std::vector<std::size_t> live(w.requests.alloc_count(), kDead);
  std::vector<std::int64_t> requested(ops.size(), 0);
  std::int64_t req = 0;
  LargestLive largest(w, name_of);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const RequestOp& op = ops[i];
    if (op.kind == RequestOp::Kind::kAlloc) {
      live[op.alloc_id] = i;
      req += static_cast<std::int64_t>(op.size_bytes);
      ++p.tensors;
    } else if (op.alloc_id < live.size() && live[op.alloc_id] != kDead) {
      live[op.alloc_id] = kDead;
      req -= static_cast<std::int64_t>(w.requests.alloc_op(op.alloc_id).size_bytes);
    }
    requested[i] = req;
    if (i != p.peak_request_index) {
      continue;
    }
    for (const std::size_t at : live) {  // in allocation order
      if (at == kDead) {
        continue;
      }
      const TensorCategory c = category_of(w.tag(w.labels[at].category_tag));
      add_to_bill(p.bill, c, static_cast<std::int64_t>(ops[at].size_bytes));
      largest.add(at, c);
    }
    const RequestLabel& label = w.labels[i];
    p.bill.allocator_rounding = alloc[i] - req;
    p.peak_phase = w.tag(label.phase_tag).empty() ? "-" : w.tag(label.phase_tag);
    p.peak_op = w.tag(label.op_tag);
    p.peak_layer = label.layer;
  }
  p.top_tensors = largest.take();
  return requested;
}

// Each step's peaks of allocated, requested and reserved bytes (steps 1 .. the last marker's).
void fill_steps(Prediction& p, const std::vector<int>& step_of, const Observed& o,
                const std::vector<std::int64_t>& requested) {
  p.steps.resize(static_cast<std::size_t>(p.phases_step));
  for (int s = 1; s <= p.phases_step; ++s) {
    p.steps[static_cast<std::size_t>(s - 1)].step = s;
  }
  for (std::size_t i = 0; i < step_of.size(); ++i) {
    if (step_of[i] < 1 || step_of[i] > p.phases_step) {
      continue;
    }
    StepPeak& sp = p.steps[static_cast<std::size_t>(step_of[i] - 1)];
    sp.peak_allocated_bytes = std::max(sp.peak_allocated_bytes, o.allocated[i]);
    sp.peak_requested_bytes = std::max(sp.peak_requested_bytes, requested[i]);
    sp.peak_reserved_bytes = std::max(sp.peak_reserved_bytes, o.reserved[i]);
  }
}

}  // namespace

Prediction explain_run(const Workload& workload, const RunDevice& device, const TensorNamer& name_of) {
  const GpuMemory d = device_memory(device.gpu, device.capacity_bytes, device.context);
  Prediction p;
  p.gpu_name = d.name;
  p.cuda_context_source = d.context_source;
  p.total_bytes = d.total_bytes;
  p.cuda_context_bytes = d.context_bytes;
  if (d.total_bytes - d.context_bytes <= 0) {
    throw InputError(fmt::format("--capacity: {} bytes leave nothing after the CUDA context", d.total_bytes));
  }
  CachingConfig config = run_alloc_config(device);
  // per_process_memory_fraction limits what the allocator reserves to a share of the device's total: the run
  // is simulated on a device of that size (the allocator fails the same cudaMallocs), and the verdict's
  // headroom is measured against it.
  p.memory_fraction = predicted_memory_fraction(config.per_process_memory_fraction, d);
  p.allocator_capacity_bytes = allocator_limit_bytes(d, p.memory_fraction);
  config.per_process_memory_fraction.reset();
  p.nccl_bytes = device.nccl_bytes;
  if (d.total_bytes - d.context_bytes - p.nccl_bytes <= 0) {
    throw InputError(
        fmt::format("the {} bytes of the {} leave nothing after the CUDA context and NCCL's {} bytes",
                    d.total_bytes, d.name, p.nccl_bytes));
  }
  p.allocator_capacity_bytes =
      std::min(p.allocator_capacity_bytes, d.total_bytes - d.context_bytes - p.nccl_bytes);
  if (p.allocator_capacity_bytes <= 0) {
    throw InputError(fmt::format("--alloc-conf: per_process_memory_fraction {} leaves nothing of {} bytes",
                                 p.memory_fraction, d.total_bytes));
  }
  const std::vector<RunMarker>& markers = workload.markers;
  p.requests = workload.requests.ops().size();

  Observed o = observe(workload, static_cast<Bytes>(p.allocator_capacity_bytes), config);
  p.peak_allocated_bytes = o.result.peaks.peak_allocated_bytes;
  p.peak_reserved_bytes = o.result.peaks.peak_reserved_bytes;
  p.peak_active_bytes = o.result.peaks.peak_active_bytes;
  p.peak_requested_bytes = o.result.peaks.peak_requested_bytes;
  p.fragmentation = o.result.peaks.fragmentation();
  p.num_ooms = o.result.num_ooms;
  std::int64_t needed_reserved = p.peak_reserved_bytes;
  if (p.num_ooms > 0) {
    // What the program needs: the same workload on a device without a limit.
    o = observe(workload, SimulatedDevice::kUnlimited, config);
    if (o.result.num_ooms > 0) {  // the "unlimited" device is 1 EiB: any figure would be capped there
      throw InputError(
          "the run would need more than 1 EiB (2^60 bytes), the most vramsim models: lower --batch, --seq or "
          "the model's dimensions");
    }
    p.peak_requested_bytes = o.result.peaks.peak_requested_bytes;
    needed_reserved = o.result.peaks.peak_reserved_bytes;
  }
  const std::vector<std::int64_t>& alloc = o.allocated;
  if (!alloc.empty()) {
    p.peak_request_index =
        static_cast<std::size_t>(std::max_element(alloc.begin(), alloc.end()) - alloc.begin());
  }
  const std::vector<int> step_of = steps_of(p.requests, markers);
  const std::vector<std::int64_t> requested = walk_requests(p, workload, alloc, name_of);
  if (p.requests > 0) {
    p.peak_step = step_of[p.peak_request_index];
  }
  p.bill.allocator_overhead = p.peak_reserved_bytes - p.peak_allocated_bytes;
  p.bill.cuda_context = p.cuda_context_bytes;
  p.bill.nccl = p.nccl_bytes;
  for (const RunMarker& m : markers) {
    p.phases_step = std::max(p.phases_step, m.step);
  }
  p.phases = phases_of(markers, alloc, p.requests);
  p.phases_requested = phases_of(markers, requested, p.requests);
  fill_steps(p, step_of, o, requested);

  p.peak_allocated_needed_bytes = alloc.empty() ? 0 : *std::max_element(alloc.begin(), alloc.end());
  // After an OOM the shortfall is what the unlimited run reserved (it holds at least what was allocated).
  p.headroom_bytes = p.allocator_capacity_bytes - std::max(p.peak_reserved_bytes, needed_reserved);
  p.headroom_percent = 100.0 * static_cast<double>(p.headroom_bytes) / static_cast<double>(p.total_bytes);
  p.fits = p.num_ooms == 0 && p.headroom_bytes >= 0;
  return p;
}

CachingConfig run_alloc_config(const RunDevice& device) {
  CachingConfig base;
  base.torch_version = device.torch_version;
  if (device.alloc_conf) {
    return parse_alloc_conf(*device.alloc_conf, "--alloc-conf", base);
  }
  return device.alloc_conf_environment ? parse_alloc_conf_environment(*device.alloc_conf_environment, base)
                                       : base;
}

MemoryTimeline observe_run(const Workload& workload, const Prediction& p,
                           const std::optional<std::string>& alloc_conf,
                           const std::optional<AllocConfEnvironment>& environment,
                           TorchVersion torch_version) {
  PolicyRunOptions options;
  options.capacity_bytes = static_cast<Bytes>(p.allocator_capacity_bytes);
  RunDevice device;
  device.alloc_conf = alloc_conf;
  device.alloc_conf_environment = environment;
  device.torch_version = torch_version;
  options.config = run_alloc_config(device);
  options.config.per_process_memory_fraction.reset();  // already in allocator_capacity_bytes (explain_run)
  return observe_workload_timeline(workload, options);
}

}  // namespace vramsim
