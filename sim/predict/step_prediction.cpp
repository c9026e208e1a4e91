#include "sim/predict/step_prediction.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/size_classes.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/graph/transformer_builder.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_timeline.h"
#include "sim/replay/trace_replay.h"

namespace vramsim {
namespace {

// Allocated bytes (rounded as the allocator rounds) after each event of the schedule.
std::vector<std::int64_t> allocated_after(const AllocationSchedule& s, const CachingConfig& config) {
  std::vector<std::int64_t> out(s.events.size());
  std::int64_t live = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const TraceEvent& e = s.events[i];
    if (e.action == TraceAction::kAlloc) {
      live += static_cast<std::int64_t>(round_size(e.size_bytes, config));
    } else if (e.action == TraceAction::kFreeRequested) {
      live -= static_cast<std::int64_t>(round_size(e.size_bytes, config));
    }
    out[i] = live;
  }
  return out;
}

std::int64_t before(const std::vector<std::int64_t>& after, std::size_t index) {
  return index == 0 ? 0 : after[std::min(index, after.size()) - 1];
}

// First marker index of `step`, or phases.size().
std::size_t step_begin_event(const AllocationSchedule& s, int step) {
  for (const PhaseMarker& m : s.phases) {
    if (m.step >= step) {
      return m.event_index;
    }
  }
  return s.events.size();
}

Snapshot prefix_snapshot(const Snapshot& full, std::size_t events) {
  Snapshot out;
  out.source = full.source;
  out.has_final_state = full.has_final_state;
  out.strings = full.strings;
  out.allocator_settings = full.allocator_settings;
  out.device_traces.resize(1);
  const auto& ev = full.device_traces.front().events;
  out.device_traces[0].events.assign(ev.begin(), ev.begin() + static_cast<std::ptrdiff_t>(events));
  return out;
}

std::vector<bool> live_tensors(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t count) {
  std::vector<bool> live(graph.tensors().size(), false);
  for (std::size_t i = 0; i < std::min(count, schedule.events.size()); ++i) {
    const TraceEvent& e = schedule.events[i];
    if (e.action == TraceAction::kAlloc) {
      live[schedule.event_tensor[i]] = true;
    } else if (e.action == TraceAction::kFreeRequested) {
      live[schedule.event_tensor[i]] = false;
    }
  }
  return live;
}

}  // namespace

void add_to_bill(MemoryBill& bill, TensorCategory c, std::int64_t bytes) {
  switch (c) {
    case TensorCategory::kParameter:
      bill.parameters += bytes;
      break;
    case TensorCategory::kGradient:
      bill.gradients += bytes;
      break;
    case TensorCategory::kOptimizerState:
      bill.optimizer_states += bytes;
      break;
    case TensorCategory::kActivation:
      bill.activations += bytes;
      break;
    case TensorCategory::kTemporary:
      bill.temporaries += bytes;
      break;
    case TensorCategory::kWorkspace:
      bill.temporaries += bytes;
      bill.workspace += bytes;
      break;
    case TensorCategory::kInput:
      bill.inputs += bytes;
      break;
  }
}

MemoryBill live_bill(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t event_count) {
  const std::vector<bool> live = live_tensors(graph, schedule, event_count);
  MemoryBill bill;
  for (const Tensor& t : graph.tensors()) {
    if (live[t.id]) {
      add_to_bill(bill, t.category, static_cast<std::int64_t>(t.size_bytes));
    }
  }
  return bill;
}

Prediction predict(const PredictRequest& request, Snapshot* trace_out) {
  validate(request.options);
  const GpuMemory device = device_memory(request.gpu, request.capacity_bytes);
  const CachingConfig config =
      request.alloc_conf ? parse_alloc_conf(*request.alloc_conf, "--alloc-conf") : CachingConfig{};

  const OpGraph graph = build_training_steps(request.model, request.options);
  std::optional<Roofline> roofline;
  if (!request.gpu.empty()) {
    roofline.emplace(Roofline::for_gpu(request.gpu));
  }
  // The engine runs the ops on their streams and dispatches the allocations; the allocator model replays
  // them in that order.
  const AllocationSchedule untimed = build_allocation_schedule(graph);
  const Timeline timeline = simulate_timeline(graph, untimed, roofline ? &*roofline : nullptr);
  const AllocationSchedule schedule = timed_schedule(graph, untimed, timeline);
  Snapshot snapshot = schedule_to_snapshot(schedule, "vramsim predict " + request.model.name);

  Prediction p;
  p.model_name = request.model.name;
  p.gpu_name = device.name;
  p.total_bytes = device.total_bytes;
  p.cuda_context_bytes = device.context_bytes;
  p.allocator_capacity_bytes = device.total_bytes - device.context_bytes;
  p.ops = graph.op_count();
  p.tensors = graph.tensors().size();
  p.events = schedule.events.size();
  if (p.allocator_capacity_bytes <= 0) {
    throw InputError(
        fmt::format("--capacity: {} bytes leave nothing after the CUDA context", device.total_bytes));
  }

  ReplayOptions ro;
  ro.alloc_conf = request.alloc_conf;
  ro.capacity_bytes = static_cast<Bytes>(p.allocator_capacity_bytes);
  const ReplayResult r = replay_snapshot(snapshot, ro);
  p.peak_allocated_bytes = r.peaks.peak_allocated_bytes;
  p.peak_reserved_bytes = r.peaks.peak_reserved_bytes;
  p.peak_requested_bytes = schedule.peak_live_bytes;
  p.fragmentation = r.peaks.fragmentation();
  p.num_ooms = static_cast<std::int64_t>(r.stats.num_ooms);

  // The event where allocated memory first peaks, and what is live there.
  const std::vector<std::int64_t> alloc_after = allocated_after(schedule, config);
  if (!alloc_after.empty()) {
    p.peak_event_index = static_cast<std::size_t>(std::max_element(alloc_after.begin(), alloc_after.end()) -
                                                  alloc_after.begin());
    const TensorId tid = schedule.event_tensor[p.peak_event_index];
    const Op& op = graph.op(graph.tensor(tid).producer);
    p.peak_step = op.step;
    p.peak_phase = std::string(phase_name(op.phase));
    p.peak_op = op.name;
    p.peak_layer = op.layer;

    const std::vector<bool> live = live_tensors(graph, schedule, p.peak_event_index + 1);
    std::vector<LiveTensor> all;
    std::int64_t requested = 0;
    for (const Tensor& t : graph.tensors()) {
      if (!live[t.id]) {
        continue;
      }
      add_to_bill(p.bill, t.category, static_cast<std::int64_t>(t.size_bytes));
      requested += static_cast<std::int64_t>(t.size_bytes);
      all.push_back({t.name, t.category, t.layer, t.size_bytes});
    }
    const std::size_t top = std::min<std::size_t>(5, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(top), all.end(),
                      [](const LiveTensor& a, const LiveTensor& b) {
                        return a.size_bytes != b.size_bytes ? a.size_bytes > b.size_bytes : a.name < b.name;
                      });
    all.resize(top);
    p.top_tensors = std::move(all);
    p.bill.allocator_rounding = alloc_after[p.peak_event_index] - requested;
  }
  p.bill.allocator_overhead = p.peak_reserved_bytes - p.peak_allocated_bytes;
  p.bill.cuda_context = p.cuda_context_bytes;

  // Phase boundaries of the last step.
  const int last = request.options.steps;
  p.phases_step = last;
  auto at = [&](Phase phase) -> std::optional<std::int64_t> {
    const std::optional<PhaseMarker> m = schedule.phase_begin(last, phase);
    if (!m) {
      return std::nullopt;
    }
    return before(alloc_after, m->event_index);
  };
  const std::size_t step_end = step_begin_event(schedule, last + 1);
  p.phases.before_forward = at(Phase::kForward);
  if (request.options.forward_only || request.options.inference) {
    p.phases.after_forward = before(alloc_after, step_end);
  } else {
    p.phases.after_forward = at(Phase::kLoss);
    p.phases.after_backward = at(Phase::kOptimizer);
    p.phases.after_optimizer_step = at(Phase::kZeroGrad);
    if (!p.phases.after_optimizer_step && p.phases.after_backward) {
      p.phases.after_optimizer_step = before(alloc_after, step_end);
    }
  }

  // Per-step peaks.
  for (int step = 1; step <= request.options.steps; ++step) {
    StepPeak sp;
    sp.step = step;
    const std::size_t b = step_begin_event(schedule, step);
    const std::size_t e = step_begin_event(schedule, step + 1);
    for (std::size_t i = b; i < e; ++i) {
      sp.peak_allocated_bytes = std::max(sp.peak_allocated_bytes, alloc_after[i]);
      sp.peak_requested_bytes = std::max(sp.peak_requested_bytes, schedule.live_bytes_after[i]);
    }
    if (step == request.options.steps) {
      sp.peak_reserved_bytes = p.peak_reserved_bytes;
    } else if (request.per_step_reserved) {
      sp.peak_reserved_bytes = replay_snapshot(prefix_snapshot(snapshot, e), ro).peaks.peak_reserved_bytes;
    }
    p.steps.push_back(sp);
  }

  if (roofline) {
    TimingEstimate t;
    for (const StepTime& st : timeline.steps) {
      t.steps.push_back(StepTiming{st.step, st.duration_ns(), st.compute_ns, st.memory_ns, st.kernels});
    }
    t.tokens_per_step = request.options.batch * request.options.seq * request.options.grad_accumulation;
    if (!t.steps.empty() && t.steps.back().time_ns > 0) {
      t.tokens_per_s =
          static_cast<double>(t.tokens_per_step) * 1e9 / static_cast<double>(t.steps.back().time_ns);
    }
    p.timing = std::move(t);
  }

  p.peak_allocated_needed_bytes =
      alloc_after.empty() ? 0 : *std::max_element(alloc_after.begin(), alloc_after.end());
  p.headroom_bytes = p.total_bytes - p.cuda_context_bytes -
                     (p.num_ooms > 0 ? std::max(p.peak_reserved_bytes, p.peak_allocated_needed_bytes)
                                     : p.peak_reserved_bytes);
  p.headroom_percent = 100.0 * static_cast<double>(p.headroom_bytes) / static_cast<double>(p.total_bytes);
  p.fits = p.num_ooms == 0 && p.headroom_bytes >= 0;
  if (trace_out != nullptr) {
    *trace_out = std::move(snapshot);
  }
  return p;
}

PredictRequest make_request(const RequestArgs& a, bool require_device) {
  if (!a.gpu.empty() && !a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give only one of them");
  }
  if (require_device && a.gpu.empty() && a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give exactly one of them");
  }
  PredictRequest r;
  r.model = load_model(a.model);
  if (!a.model_code.empty()) {
    r.model.code = parse_model_code(a.model_code, "--model-code");
  }
  r.gpu = a.gpu;
  if (!a.gpu.empty()) {
    (void)gpu_memory(a.gpu);  // unknown names fail before any work
  } else if (!a.capacity.empty()) {
    r.capacity_bytes = parse_size(a.capacity, "--capacity");
    if (r.capacity_bytes == 0) {
      throw InputError("--capacity: must be positive");
    }
  }
  TrainingOptions& o = r.options;
  o.batch = a.batch;
  o.seq = a.seq;
  o.precision = parse_precision(a.precision);
  o.optimizer = parse_optimizer(a.optimizer);
  o.optimizer_impl = parse_optimizer_impl(a.optimizer, OptimizerImpl::kForeach);
  o.checkpointing = parse_checkpointing(a.checkpointing);
  o.attention = parse_attention(a.attention);
  o.dropout = a.dropout;
  o.grad_accumulation = a.grad_accumulation;
  o.steps = a.steps;
  o.forward_only = a.forward_only;
  o.inference = a.inference;
  validate(o);
  if (a.alloc_conf) {
    (void)parse_alloc_conf(*a.alloc_conf, "--alloc-conf");
    r.alloc_conf = a.alloc_conf;
  }
  return r;
}

FitVary parse_fit_vary(std::string_view text, std::string_view option) {
  if (text == "batch") {
    return FitVary::kBatch;
  }
  if (text == "seq") {
    return FitVary::kSeq;
  }
  throw InputError(fmt::format("{}: unknown value '{}' (expected batch or seq)", option, text));
}

double parse_margin(std::string_view text, std::string_view option) {
  std::string_view number = text;
  double scale = 1.0;
  if (!number.empty() && number.back() == '%') {
    number.remove_suffix(1);
    scale = 0.01;
  }
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc{} || ptr != number.data() + number.size() || !std::isfinite(value)) {
    throw InputError(fmt::format("{}: not a number or percentage: '{}'", option, text));
  }
  value *= scale;
  if (!(value >= 0.0 && value < 1.0)) {
    throw InputError(fmt::format("{}: must be in [0, 100%), got '{}'", option, text));
  }
  return value;
}

FitResult fit(const PredictRequest& request, FitVary vary, double margin, std::int64_t max_value) {
  if (!(margin >= 0.0 && margin < 1.0)) {
    throw InputError(fmt::format("--margin: must be in [0, 100%), got {}", margin));
  }
  FitResult out;
  out.vary = vary;
  out.margin = margin;
  {
    const GpuMemory d = device_memory(request.gpu, request.capacity_bytes);
    out.total_bytes = d.total_bytes;
    out.cuda_context_bytes = d.context_bytes;
    out.limit_bytes =
        static_cast<std::int64_t>(std::floor((1.0 - margin) * static_cast<double>(d.total_bytes)));
  }
  auto trial = [&](std::int64_t value) {
    PredictRequest r = request;
    r.per_step_reserved = false;
    (vary == FitVary::kBatch ? r.options.batch : r.options.seq) = value;
    const Prediction p = predict(r);
    FitTrial t;
    t.value = value;
    t.peak_reserved_bytes = p.peak_reserved_bytes;
    t.num_ooms = p.num_ooms;
    t.fits = p.num_ooms == 0 && p.peak_reserved_bytes + p.cuda_context_bytes <= out.limit_bytes;
    out.trials.push_back(t);
    return t.fits;
  };
  std::int64_t start = vary == FitVary::kBatch ? request.options.batch : request.options.seq;
  start = std::clamp<std::int64_t>(start, 1, max_value);
  std::int64_t lo = 0;  // largest value known to fit (0 = none)
  std::int64_t hi = 0;  // smallest value known not to fit (0 = none)
  if (trial(start)) {
    lo = start;
    while (hi == 0 && lo < max_value) {
      const std::int64_t next = std::min(lo * 2, max_value);
      if (trial(next)) {
        lo = next;
      } else {
        hi = next;
      }
    }
    if (hi == 0) {
      out.best = lo;  // fits up to the cap
      return out;
    }
  } else {
    hi = start;
    while (lo == 0 && hi > 1) {
      const std::int64_t next = hi / 2;
      if (trial(next)) {
        lo = next;
      } else {
        hi = next;
      }
    }
    if (lo == 0) {
      return out;  // even 1 does not fit
    }
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (trial(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  out.best = lo;
  return out;
}

}  // namespace vramsim
