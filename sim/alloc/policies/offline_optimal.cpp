// offline-optimal: a static memory planner. Knowing the whole request sequence in advance (plan()), it gives
// every tensor a fixed offset in one arena: the "greedy by size" offset calculation of Pisarchyk & Lee 2020
// ("Efficient Memory Management for Deep Neural Net Inference"), which TensorFlow Lite Micro's
// GreedyMemoryPlanner also implements.
//
// Plan (greedy by size, best-fit-decreasing over lifetimes): sizes are rounded up to 512 bytes; tensors are
// taken largest first (ties: longer lifetime first, then earlier allocation), and each is placed at the
// lowest offset where it overlaps no already placed tensor whose lifetime [alloc op, free op) intersects its
// own. The arena is the planned peak (max offset + size) rounded up to 2 MiB, one cudaMalloc at the first
// allocate(). When the device gives less, the arena is as large as it gives (whole 2 MiB) and every tensor
// planned past its end is an OOM. Despite the name, greedy by size is a heuristic (optimal placement is
// NP-hard): the planned peak is >= the best single-arena placement, which is >= peak_live_bytes(). It is the
// offline reference the online policies are compared with, not a proven lower bound of them.
//
// Contract: plan() first (PolicyEntry::needs_plan); allocate() before it throws InputError. The calls must
// follow the planned sequence: the i-th allocate() is the plan's i-th allocation (same size); a free may come
// earlier than planned (or be skipped with its failed allocation) but not later than a planned reuse of its
// memory. Calls that break this throw InputError. The planner assumes sequence order is execution order on
// every stream (no cross-stream reuse hazard).
//
// Note [Ties go to the longer lifetime]: real traces hold many tensors of one size (a layer's weights, LoRA
// adapters). Placing the longest-lived of them first keeps the short-lived ones stacked in the gaps they
// leave; taking them in allocation order instead scatters long-lived tensors above short-lived ones. On the
// bundled cranberrii trace (3,505 allocations) the planned peak is 4.571 GiB with allocation-order ties and
// 4.452 GiB (the peak live bytes exactly) with lifetime ties; the other three samples reach their floor with
// both.
//
// Complexity (n = allocations): plan O(n * tensors sharing its time buckets * log) (Note [Time buckets]),
// O(n^2 log n) at worst; allocate O(live blocks) (address walk of the arena);
// free O(log n). Both the plan and the allocations cost about one step per pair of allocations whose
// lifetimes overlap (P = the sum over allocations of those live when it is made; n^2 / 2 when all stay live),
// so plan() first counts P in O(n log n) and refuses a sequence with more than kMaxOverlappingPairs
// (WorkBoundError). Measured: 200-400 ns per pair (32 M pairs of 8,000 allocations all live at once: 13 s;
// a 200-step gpt2 sweep's 105 M pairs: 20 s), so the bound of 2^26 (67 M) keeps a plan under ~30 s; 25,000
// allocations all live at once (3 * 10^8 pairs) would take minutes.
#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/request_sequence.h"
#include "sim/core/error.h"

namespace vramsim {

namespace {

constexpr Bytes kAlignBytes = 512;
constexpr Bytes kArenaGranuleBytes = 2 * kMiB;
constexpr PoolKind kPool = PoolKind::kLarge;
constexpr StreamId kArenaStream = 0;  // free runs of the arena all carry this key
constexpr std::uint64_t kMaxOverlappingPairs = std::uint64_t{1} << 26;

// P of the complexity note: for every allocation, the allocations live when it is made.
std::uint64_t overlapping_pairs(const RequestSequence& sequence, std::size_t& most_live) {
  std::vector<std::pair<std::size_t, int>> events;  // (op index, +1 alloc / -1 free); frees sort first
  events.reserve(2 * sequence.alloc_count());
  for (std::size_t i = 0; i < sequence.alloc_count(); ++i) {
    events.emplace_back(sequence.alloc_op_index(i), 1);
    events.emplace_back(sequence.free_op_index(i), -1);
  }
  std::sort(events.begin(), events.end());
  std::uint64_t pairs = 0;
  std::size_t live = 0;
  most_live = 0;
  for (const auto& [at, delta] : events) {
    if (delta > 0) {
      pairs += live;
      ++live;
      most_live = std::max(most_live, live);
    } else {
      --live;
    }
  }
  return pairs;
}

struct Placement {
  Bytes offset_bytes = 0;
  Bytes size_bytes = 0;       // rounded
  Bytes requested_bytes = 0;  // as in the sequence
};

class OfflineOptimalPolicy final : public DeferredFreePolicy {
 public:
  OfflineOptimalPolicy(IDeviceMemory& device, IAllocObserver& events) : DeferredFreePolicy(device, events) {}

  std::string_view name() const override { return "offline-optimal"; }

  void plan(const RequestSequence& sequence) override {
    const std::size_t n = sequence.alloc_count();
    std::size_t most_live = 0;
    if (const std::uint64_t pairs = overlapping_pairs(sequence, most_live); pairs > kMaxOverlappingPairs) {
      throw WorkBoundError(fmt::format(
          "offline-optimal: {} allocations, up to {} live at once, make {} pairs of overlapping lifetimes: "
          "more "
          "than the {} the planner takes (its work grows with them; leave it out with --policies)",
          n, most_live, pairs, kMaxOverlappingPairs));
    }
    m_plan.assign(n, Placement{});
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = 0; i < n; ++i) {
      m_plan[i].requested_bytes = sequence.alloc_op(i).size_bytes;
      m_plan[i].size_bytes = round_up_bytes(m_plan[i].requested_bytes, kAlignBytes);
    }
    auto lifetime = [&sequence](std::size_t i) {
      return sequence.free_op_index(i) - sequence.alloc_op_index(i);
    };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (m_plan[a].size_bytes != m_plan[b].size_bytes) {
        return m_plan[a].size_bytes > m_plan[b].size_bytes;
      }
      return lifetime(a) > lifetime(b);  // Note [Ties go to the longer lifetime]
    });
    // Note [Time buckets]: the tensors placed so far are indexed by the time buckets their lifetimes cover,
    // so finding the ones alive together with a new tensor scans only its buckets, not every placed tensor
    // (O(n^2) made the 144k-allocation sweeps of issue 4 take a minute).
    const std::size_t horizon = std::max<std::size_t>(sequence.ops().size(), 1);
    const std::size_t width = std::max<std::size_t>(64, horizon / 4096 + 1);
    std::vector<std::vector<std::uint32_t>> buckets(horizon / width + 1);
    std::vector<std::size_t> seen(n, std::numeric_limits<std::size_t>::max());
    std::vector<std::pair<Bytes, Bytes>> conflicts;  // (offset, end) of placed tensors live at the same time
    m_planned_peak_bytes = 0;
    for (std::size_t i : order) {
      const std::size_t begin = sequence.alloc_op_index(i);
      const std::size_t end = sequence.free_op_index(i);
      const std::size_t first_bucket = begin / width;
      const std::size_t last_bucket = (std::max(end, begin + 1) - 1) / width;
      conflicts.clear();
      for (std::size_t b = first_bucket; b <= last_bucket; ++b) {
        for (std::uint32_t j : buckets[b]) {
          if (seen[j] == i) {
            continue;
          }
          seen[j] = i;
          if (sequence.alloc_op_index(j) < end && begin < sequence.free_op_index(j)) {
            conflicts.emplace_back(m_plan[j].offset_bytes, m_plan[j].offset_bytes + m_plan[j].size_bytes);
          }
        }
      }
      std::sort(conflicts.begin(), conflicts.end());
      Bytes offset = 0;
      for (const auto& [lo, hi] : conflicts) {
        if (lo >= offset + m_plan[i].size_bytes) {
          break;  // the gap below `lo` holds it
        }
        offset = std::max(offset, hi);
      }
      m_plan[i].offset_bytes = offset;
      m_planned_peak_bytes = std::max(m_planned_peak_bytes, offset + m_plan[i].size_bytes);
      for (std::size_t b = first_bucket; b <= last_bucket; ++b) {
        buckets[b].push_back(static_cast<std::uint32_t>(i));
      }
    }
    m_planned = true;
    m_next_alloc = 0;
  }

  AllocResult allocate(const AllocRequest& request) override {
    SIM_ASSERT(request.size_bytes > 0);
    if (!m_planned) {
      throw InputError(
          "offline-optimal: allocate() before plan(): this policy needs the whole request sequence in "
          "advance "
          "(give it one, e.g. from a trace, or use an online policy)");
    }
    if (m_next_alloc >= m_plan.size()) {
      throw InputError(fmt::format("offline-optimal: allocation #{} of {} bytes, but the plan has only {}",
                                   m_next_alloc, request.size_bytes, m_plan.size()));
    }
    const std::size_t i = m_next_alloc++;
    const Placement& p = m_plan[i];
    if (p.requested_bytes != request.size_bytes) {
      throw InputError(fmt::format("offline-optimal: allocation #{} asks for {} bytes, the plan has {}", i,
                                   request.size_bytes, p.requested_bytes));
    }
    if (m_arena == kNoSegment) {
      obtain_arena(request);
    }
    if (m_arena == kNoSegment || p.offset_bytes + p.size_bytes > m_pool.segment(m_arena).size_bytes) {
      m_events.on_oom(OomInfo{p.size_bytes, m_arena == kNoSegment ? arena_bytes() : p.size_bytes,
                              m_device.free_bytes(), 0, request.stream, request.time_ns});
      return {};
    }
    return place(i, request);
  }

  // The arena goes back to the device when nothing lives in it; the next allocate() takes a new one.
  void empty_cache() override {
    release_deferred_frees();
    m_events.on_sync_all_streams();
    if (m_arena == kNoSegment) {
      return;
    }
    const Segment& seg = m_pool.segment(m_arena);
    const BlockId only = seg.first;
    if (m_pool.block(only).is_split() || !m_pool.in_free_set(only)) {
      return;
    }
    const Bytes base = seg.base;
    const Bytes bytes = seg.size_bytes;
    m_events.on_segment_free(segment_event(base, bytes, kPool, kArenaStream, 0));
    m_pool.erase_free(only);
    m_pool.remove_segment(m_arena);
    m_device.free(base, bytes);
    m_arena = kNoSegment;
  }

  void release_block(BlockId block, TimeNs time_ns, bool /*after_sync*/) override {
    free_block(block, time_ns);
  }

 private:
  Bytes arena_bytes() const {
    return std::max(kArenaGranuleBytes, round_up_bytes(m_planned_peak_bytes, kArenaGranuleBytes));
  }

  // One cudaMalloc of the planned arena, or of the largest whole 2 MiB multiple the device has left.
  void obtain_arena(const AllocRequest& request) {
    Bytes bytes = arena_bytes();
    std::optional<Bytes> base = m_device.malloc(bytes, kPool, kArenaStream);
    if (!base) {
      bytes = std::min(bytes, m_device.free_bytes() / kArenaGranuleBytes * kArenaGranuleBytes);
      base = bytes == 0 ? std::nullopt : m_device.malloc(bytes, kPool, kArenaStream);
    }
    if (!base) {
      return;
    }
    m_arena = m_pool.add_segment(*base, bytes, kPool, kArenaStream, false, 0);
    m_pool.insert_free(m_pool.segment(m_arena).first);
    m_events.on_segment_alloc(segment_event(*base, bytes, kPool, kArenaStream, request.time_ns));
  }

  // Carves allocation i out of the free run holding its planned range.
  AllocResult place(std::size_t i, const AllocRequest& request) {
    const Placement& p = m_plan[i];
    const Segment& seg = m_pool.segment(m_arena);
    const Bytes addr = seg.base + p.offset_bytes;
    BlockId run = seg.first;
    while (run != kNoBlock && m_pool.block(run).addr + m_pool.block(run).size_bytes <= addr) {
      run = m_pool.block(run).next;
    }
    SIM_ASSERT(run != kNoBlock);
    const Block& r = m_pool.block(run);
    if (!m_pool.in_free_set(run) || r.addr + r.size_bytes < addr + p.size_bytes) {
      throw InputError(fmt::format(
          "offline-optimal: allocation #{} ({} bytes at planned offset {}) overlaps memory still in use: the "
          "calls do not follow the planned sequence (a free came later than planned)",
          i, p.size_bytes, p.offset_bytes));
    }
    m_pool.erase_free(run);
    if (addr > m_pool.block(run).addr) {
      m_pool.insert_free(m_pool.split_front(run, addr - m_pool.block(run).addr));
    }
    return hand_out(trim_front(run, p.size_bytes), request);
  }

  void free_block(BlockId block, TimeNs time_ns) {
    const BlockEventInfo freed = block_event(m_pool.block(block), time_ns);
    m_pool.block(block).stream = kArenaStream;
    for (BlockId n : {m_pool.block(block).prev, m_pool.block(block).next}) {
      if (n != kNoBlock && m_pool.in_free_set(n)) {
        m_pool.erase_free(n);
        m_pool.merge(block, n);
      }
    }
    m_pool.insert_free(block);
    m_events.on_free_completed(freed);
  }

  std::vector<Placement> m_plan;  // by allocation id
  Bytes m_planned_peak_bytes = 0;
  bool m_planned = false;
  std::size_t m_next_alloc = 0;
  SegmentId m_arena = kNoSegment;
};

}  // namespace

std::unique_ptr<IAllocatorPolicy> make_offline_optimal_policy(IDeviceMemory& device, IAllocObserver& events) {
  return std::make_unique<OfflineOptimalPolicy>(device, events);
}

}  // namespace vramsim
