#include "sim/graph/tensor_lifetime.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {

namespace {
constexpr std::int64_t kMaxLiveBytes = std::int64_t{1} << 60;  // the allocator model's unlimited device
}  // namespace
namespace {

// Interns tags in first-seen order (the ids the trace prints). Open addressing over (hash, id) pairs instead
// of std::unordered_map: most op names are new (one per op), and a node per insert cost an allocation each
// (issue 40's profile of plan: 8 % in the map).
class StringTable {
 public:
  explicit StringTable(std::vector<std::string>& strings) : m_strings(strings) {
    for (std::uint32_t i = 0; i < m_strings.size(); ++i) {
      insert_new(hash(m_strings[i]), i);
    }
  }
  std::uint32_t intern(std::string_view s) {
    const std::size_t h = hash(s);
    for (std::size_t i = h & m_mask; m_slots.size() > 0 && m_slots[i].id != kEmpty; i = (i + 1) & m_mask) {
      if (m_slots[i].hash == h && m_strings[m_slots[i].id] == s) {
        return m_slots[i].id;
      }
    }
    m_strings.emplace_back(s);
    const auto id = static_cast<std::uint32_t>(m_strings.size() - 1);
    insert_new(h, id);
    return id;
  }

 private:
  static constexpr std::uint32_t kEmpty = ~std::uint32_t{0};
  struct Slot {
    std::size_t hash = 0;
    std::uint32_t id = kEmpty;
  };
  static std::size_t hash(std::string_view text) noexcept { return std::hash<std::string_view>{}(text); }
  // `id` is not in the table yet; grows it to keep the load at most one half.
  void insert_new(std::size_t h, std::uint32_t id) {
    if (2 * (m_used + 1) > m_slots.size()) {
      std::vector<Slot> old = std::move(m_slots);
      m_slots.assign(std::max<std::size_t>(64, 2 * old.size()), Slot{});
      m_mask = m_slots.size() - 1;
      for (const Slot& slot : old) {
        if (slot.id != kEmpty) {
          place(slot);
        }
      }
    }
    place(Slot{h, id});
    ++m_used;
  }
  void place(const Slot& slot) {
    std::size_t i = slot.hash & m_mask;
    while (m_slots[i].id != kEmpty) {
      i = (i + 1) & m_mask;
    }
    m_slots[i] = slot;
  }
  std::vector<std::string>& m_strings;
  std::vector<Slot> m_slots;  // a power of two
  std::size_t m_mask = 0;
  std::size_t m_used = 0;
};

}  // namespace

std::int64_t AllocationSchedule::live_bytes_before(std::size_t event_index) const {
  if (event_index == 0 || live_bytes_after.empty()) {
    return 0;
  }
  return live_bytes_after.at(std::min(event_index, live_bytes_after.size()) - 1);
}

std::optional<PhaseMarker> AllocationSchedule::phase_begin(int step, Phase phase,
                                                           std::optional<int> micro_batch) const {
  for (const PhaseMarker& m : phases) {
    if (m.step == step && m.phase == phase && (!micro_batch || *micro_batch == m.micro_batch)) {
      return m;
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> AllocationSchedule::live_bytes_at(int step, Phase phase) const {
  const std::optional<PhaseMarker> m = phase_begin(step, phase);
  if (!m) {
    return std::nullopt;
  }
  return live_bytes_before(m->event_index);
}

AllocationSchedule build_allocation_schedule(const OpGraph& graph) {
  AllocationSchedule out;
  StringTable strings(out.strings);
  const std::size_t n_ops = graph.op_count();
  // Per op, the tensors it allocates and those it frees, in tensor order: two flat lists indexed by op
  // (a counting sort) rather than a vector per op, which cost an allocation each.
  std::vector<std::size_t> alloc_begin(n_ops + 1, 0);
  std::vector<std::size_t> free_begin(n_ops + 1, 0);
  for (const Tensor& t : graph.tensors()) {
    if (t.size_bytes == 0) {
      continue;
    }
    ++alloc_begin[t.producer + 1];
    if (!t.persistent) {
      ++free_begin[t.last_consumer() + 1];
    }
  }
  for (std::size_t op = 0; op < n_ops; ++op) {
    alloc_begin[op + 1] += alloc_begin[op];
    free_begin[op + 1] += free_begin[op];
  }
  std::vector<TensorId> alloc_list(alloc_begin[n_ops]);
  std::vector<TensorId> free_list(free_begin[n_ops]);
  {
    std::vector<std::size_t> alloc_next(alloc_begin.begin(), alloc_begin.end() - 1);
    std::vector<std::size_t> free_next(free_begin.begin(), free_begin.end() - 1);
    for (const Tensor& t : graph.tensors()) {
      if (t.size_bytes == 0) {
        continue;
      }
      alloc_list[alloc_next[t.producer]++] = t.id;
      if (!t.persistent) {
        free_list[free_next[t.last_consumer()]++] = t.id;
      }
    }
  }
  const std::size_t n_events = alloc_list.size() + 2 * free_list.size();
  out.events.reserve(n_events);
  out.event_tensor.reserve(n_events);
  out.live_bytes_after.reserve(n_events);
  constexpr int kCategories = static_cast<int>(TensorCategory::kKvCache) + 1;
  std::uint32_t category_tags[kCategories];
  for (int c = 0; c < kCategories; ++c) {
    category_tags[c] = strings.intern(category_name(static_cast<TensorCategory>(c)));
  }
  constexpr int kPhases = static_cast<int>(Phase::kZeroGrad) + 1;
  std::uint32_t phase_tags[kPhases];
  for (int p = 0; p < kPhases; ++p) {
    phase_tags[p] = strings.intern(phase_name(static_cast<Phase>(p)));
  }
  std::int64_t live = 0;
  const auto emit = [&](TraceAction action, const Tensor& t, std::uint32_t op_tag, std::uint32_t phase_tag,
                        std::int32_t layer) {
    TraceEvent e;
    e.action = action;
    e.addr = synthetic_address(t.id);
    e.size_bytes = t.size_bytes;
    e.op_tag = op_tag;
    e.category_tag = category_tags[static_cast<int>(t.category)];
    e.phase_tag = phase_tag;
    e.layer = layer;
    out.events.push_back(e);
    out.event_tensor.push_back(t.id);
    if (action == TraceAction::kAlloc) {
      // Each tensor is <= kMaxTensorBytes (2^50), so checking against 2^60 per step cannot wrap.
      live += static_cast<std::int64_t>(t.size_bytes);
      if (live > kMaxLiveBytes) {
        throw InputError(
            fmt::format("the step would hold more than {} bytes (1 EiB) of tensors at once, the "
                        "most vramsim models: lower --batch, --seq or the model's dimensions",
                        kMaxLiveBytes));
      }
    } else if (action == TraceAction::kFreeCompleted) {
      live -= static_cast<std::int64_t>(t.size_bytes);
    }
    out.live_bytes_after.push_back(live);
    if (live > out.peak_live_bytes) {
      out.peak_live_bytes = live;
      out.peak_event_index = out.events.size() - 1;
    }
  };
  for (OpId id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (out.phases.empty() || out.phases.back().step != op.step || out.phases.back().phase != op.phase ||
        out.phases.back().micro_batch != op.micro_batch) {
      out.phases.push_back(PhaseMarker{op.step, op.micro_batch, op.phase, out.events.size()});
    }
    if (alloc_begin[id] == alloc_begin[id + 1] && free_begin[id] == free_begin[id + 1]) {
      continue;
    }
    const std::uint32_t op_tag = strings.intern(op.name);
    const std::uint32_t phase_tag = phase_tags[static_cast<int>(op.phase)];
    const std::int32_t layer = op.layer >= 0 ? static_cast<std::int32_t>(op.layer) : kNoLayer;
    for (std::size_t k = alloc_begin[id]; k < alloc_begin[id + 1]; ++k) {
      emit(TraceAction::kAlloc, graph.tensor(alloc_list[k]), op_tag, phase_tag, layer);
    }
    for (std::size_t k = free_begin[id]; k < free_begin[id + 1]; ++k) {
      emit(TraceAction::kFreeRequested, graph.tensor(free_list[k]), op_tag, phase_tag, layer);
      emit(TraceAction::kFreeCompleted, graph.tensor(free_list[k]), op_tag, phase_tag, layer);
    }
  }
  return out;
}

namespace {

// workload_from_schedule's body: everything but the string table, which the caller copies or moves into `w`.
Workload schedule_requests(const AllocationSchedule& schedule, std::vector<TensorId>* request_tensor,
                           Workload w) {
  // Tensor ids are dense (indices into the graph's tensors): a flat table, not a hash map, per tensor.
  constexpr std::size_t kNoRequest = ~std::size_t{0};
  TensorId max_tensor = 0;
  for (const TensorId t : schedule.event_tensor) {
    max_tensor = std::max(max_tensor, t);
  }
  std::vector<std::size_t> alloc_of(schedule.event_tensor.empty() ? 0 : std::size_t{max_tensor} + 1,
                                    kNoRequest);
  const auto alloc_id = [&](TensorId t) {
    if (alloc_of[t] == kNoRequest) {  // as std::unordered_map::at did: a free before its tensor's alloc
      throw std::out_of_range("workload_from_schedule: a free of a tensor that was not allocated");
    }
    return alloc_of[t];
  };
  std::vector<std::size_t> requests_before(schedule.events.size() + 1, 0);  // per event index
  w.labels.reserve(schedule.events.size() / 2 + 1);
  for (std::size_t i = 0; i < schedule.events.size(); ++i) {
    requests_before[i] = w.requests.ops().size();
    const TraceEvent& e = schedule.events[i];
    const TensorId t = schedule.event_tensor[i];
    if (e.action == TraceAction::kAlloc) {
      alloc_of[t] = w.requests.add_alloc(e.size_bytes, e.stream, e.time_ns);
    } else if (e.action == TraceAction::kFreeRequested) {
      w.requests.add_free(alloc_id(t), e.time_ns);
    } else {
      // kFreeCompleted: right after its free_requested, the same request; later (a tensor other streams
      // used: record_stream), the block stays the allocator's until the next request
      const std::size_t free_index = w.requests.free_op_index(alloc_id(t));
      if (w.requests.ops().size() > free_index + 1) {
        w.requests.set_streams_done_before(alloc_id(t), w.requests.ops().size());
      }
      continue;
    }
    w.labels.push_back(RequestLabel{e.op_tag, e.category_tag, e.phase_tag, e.layer});
    if (request_tensor != nullptr) {
      request_tensor->push_back(t);
    }
  }
  requests_before[schedule.events.size()] = w.requests.ops().size();
  for (const PhaseMarker& m : schedule.phases) {
    w.markers.push_back(RunMarker{requests_before[std::min(m.event_index, schedule.events.size())], m.step,
                                  std::string(phase_name(m.phase))});
  }
  return w;
}

}  // namespace

Workload workload_from_schedule(const AllocationSchedule& schedule, std::string source,
                                std::vector<TensorId>* request_tensor) {
  Workload w;
  w.source = std::move(source);
  w.strings = schedule.strings;
  return schedule_requests(schedule, request_tensor, std::move(w));
}

Workload workload_from_schedule(AllocationSchedule&& schedule, std::string source,
                                std::vector<TensorId>* request_tensor) {
  Workload w;
  w.source = std::move(source);
  w.strings = std::move(schedule.strings);
  return schedule_requests(schedule, request_tensor, std::move(w));
}

Snapshot schedule_to_snapshot(const AllocationSchedule& schedule, std::string source) {
  Snapshot s;
  s.source = std::move(source);
  s.has_final_state = false;
  s.device_traces.resize(1);
  s.device_traces[0].events = schedule.events;
  s.strings = schedule.strings;
  return s;
}

}  // namespace vramsim
