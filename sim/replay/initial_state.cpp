#include "sim/replay/initial_state.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/alloc/size_classes.h"
#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

struct SegmentInfo {
  Bytes size_bytes = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  bool expandable = false;  // a mapped run of an expandable reservation
  MempoolId pool_id;        // segment_pool_id of a final-state segment
};

// "<file>: device_traces[d][k]", built only when an error is thrown.
struct EventWhere {
  const std::string& source;
  int device = 0;
  std::size_t k = 0;
  std::string str() const { return fmt::format("{}: device_traces[{}][{}]", source, device, k); }
};

// The mapped ranges of expandable reservations, as maximal runs [begin, end) keyed by begin (spec E9).
struct MappedRange {
  Bytes end = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
};
using MappedRanges = std::map<Bytes, MappedRange>;

// Undoes a segment_map: its pages must be mapped afterwards; they become unmapped again (spec E3).
void undo_segment_map(MappedRanges& mapped, const TraceEvent& e, const EventWhere& where) {
  auto it = mapped.upper_bound(e.addr);
  const Bytes end = e.addr + e.size_bytes;
  if (it == mapped.begin() || std::prev(it)->second.end < end) {
    throw InputError(
        fmt::format("{}: segment_map of 0x{:x} ({} bytes), but those pages are not mapped "
                    "afterwards without a later segment_unmap",
                    where.str(), e.addr, e.size_bytes));
  }
  --it;
  const Bytes begin = it->first;
  const MappedRange range = it->second;
  mapped.erase(it);
  if (begin < e.addr) {
    mapped[begin] = MappedRange{e.addr, range.pool, range.stream};
  }
  if (end < range.end) {
    mapped[end] = MappedRange{range.end, range.pool, range.stream};
  }
}

// Undoes a segment_unmap: its pages must be unmapped afterwards; they become mapped again, merged with
// mapped neighbours of the same stream (E8). The pool is the neighbours', else large iff the size is a whole
// number of 20 MiB pages (E1).
void undo_segment_unmap(MappedRanges& mapped, const TraceEvent& e, const EventWhere& where) {
  Bytes begin = e.addr;
  Bytes end = e.addr + e.size_bytes;
  auto next = mapped.lower_bound(begin);
  const bool overlaps_next = next != mapped.end() && next->first < end;
  const bool overlaps_prev = next != mapped.begin() && std::prev(next)->second.end > begin;
  if (overlaps_next || overlaps_prev) {
    throw InputError(
        fmt::format("{}: segment_unmap of 0x{:x} ({} bytes), but those pages are mapped "
                    "afterwards without a new segment_map",
                    where.str(), e.addr, e.size_bytes));
  }
  PoolKind pool = e.size_bytes % kLargeBuffer == 0 ? PoolKind::kLarge : PoolKind::kSmall;
  if (next != mapped.end() && next->first == end && next->second.stream == e.stream) {
    pool = next->second.pool;
    end = next->second.end;
    next = mapped.erase(next);
  }
  if (next != mapped.begin()) {
    auto prev = std::prev(next);
    if (prev->second.end == begin && prev->second.stream == e.stream) {
      pool = prev->second.pool;
      begin = prev->first;
      mapped.erase(prev);
    }
  }
  mapped[begin] = MappedRange{end, pool, e.stream};
}

// The rebuild's working state: segments and live blocks as of the event being undone.
struct Rebuild {
  std::map<Bytes, SegmentInfo> segments;  // cudaMalloc segments, by base
  std::map<Bytes, InitialBlock> blocks;   // live (allocated or pending-free) blocks, by address
  MappedRanges mapped;                    // expandable segments' mapped pages
};

// The final snapshot's segments and live blocks of `device`.
void read_final_state(const Snapshot& snapshot, int device, Rebuild& st) {
  auto& segments = st.segments;
  auto& blocks = st.blocks;
  auto& mapped = st.mapped;
  for (const SnapshotSegment& seg : snapshot.segments) {
    if (seg.device != device) {
      continue;
    }
    const PoolKind pool = seg.is_small_pool ? PoolKind::kSmall : PoolKind::kLarge;
    if (seg.is_expandable) {
      mapped[seg.address] = MappedRange{seg.address + seg.total_size_bytes, pool, seg.stream};
    } else {
      segments[seg.address] = SegmentInfo{seg.total_size_bytes, pool, seg.stream, false,
                                          MempoolId{seg.pool_id_first, seg.pool_id_second}};
    }
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state == BlockState::kInactive) {
        continue;
      }
      blocks[b.address] = InitialBlock{
          b.address, b.size_bytes, b.requested_bytes, true, b.state == BlockState::kActivePendingFree, false};
    }
  }
}

// Undoes trace entry `k` (spec §8.7: the state before it is the state after it, minus its effect).
void undo_event(const TraceEvent& e, const EventWhere& where, const CachingConfig& config, Rebuild& st) {
  auto& segments = st.segments;
  auto& blocks = st.blocks;
  auto& mapped = st.mapped;
  switch (e.action) {
    case TraceAction::kAlloc: {
      auto it = blocks.find(e.addr);
      if (it == blocks.end() || !it->second.allocated || it->second.pending_free) {
        throw InputError(
            fmt::format("{}: alloc of 0x{:x}, but that block is neither live at the end nor freed "
                        "later in the trace",
                        where.str(), e.addr));
      }
      blocks.erase(it);
      break;
    }
    case TraceAction::kFreeRequested: {
      auto it = blocks.find(e.addr);
      if (it == blocks.end() || !it->second.pending_free) {
        throw InputError(
            fmt::format("{}: free_requested of 0x{:x} without its free_completed or a pending-free "
                        "block at the end",
                        where.str(), e.addr));
      }
      it->second.pending_free = false;
      break;
    }
    case TraceAction::kFreeCompleted: {
      if (blocks.count(e.addr) != 0) {
        throw InputError(
            fmt::format("{}: free_completed of 0x{:x}, but a block is live there afterwards "
                        "without a new alloc",
                        where.str(), e.addr));
      }
      blocks[e.addr] = InitialBlock{
          e.addr, round_size(std::max<Bytes>(e.size_bytes, 1), config), e.size_bytes, true, true, true,
          where.k};
      break;
    }
    case TraceAction::kSegmentAlloc: {
      auto it = segments.find(e.addr);
      if (it == segments.end() || it->second.size_bytes != e.size_bytes) {
        throw InputError(
            fmt::format("{}: segment_alloc of 0x{:x} ({} bytes) does not match a segment that exists "
                        "afterwards",
                        where.str(), e.addr, e.size_bytes));
      }
      segments.erase(it);
      break;
    }
    case TraceAction::kSegmentFree: {
      if (segments.count(e.addr) != 0) {
        throw InputError(
            fmt::format("{}: segment_free of 0x{:x}, but a segment starts there afterwards without a "
                        "new segment_alloc",
                        where.str(), e.addr));
      }
      segments[e.addr] = SegmentInfo{e.size_bytes,
                                     e.size_bytes == kSmallBuffer ? PoolKind::kSmall : PoolKind::kLarge,
                                     e.stream,
                                     false,
                                     {}};
      break;
    }
    case TraceAction::kSegmentMap:
      undo_segment_map(mapped, e, where);
      break;
    case TraceAction::kSegmentUnmap:
      undo_segment_unmap(mapped, e, where);
      break;
    case TraceAction::kOom:
    case TraceAction::kSnapshot:
      break;
    default:  // pool and empty_cache events change no block: their segment entries are undone one by one
      SIM_ASSERT(is_pool_event(e.action));
      break;
  }
}

// Adds the expandable runs mapped at trace start to the segments, flagged expandable.
void add_mapped_runs(const std::string& source, Rebuild& st) {
  auto& segments = st.segments;
  for (const auto& [begin, range] : st.mapped) {
    auto next = segments.lower_bound(begin);
    const bool overlaps =
        (next != segments.end() && next->first < range.end) ||
        (next != segments.begin() && std::prev(next)->first + std::prev(next)->second.size_bytes > begin);
    if (overlaps) {
      throw InputError(fmt::format(
          "{}: expandable pages at 0x{:x} overlap a cudaMalloc segment at trace start", source, begin));
    }
    segments[begin] = SegmentInfo{range.end - begin, range.pool, range.stream, true, {}};
  }
}

// The allocations of the trace by address, for settling the end of ambiguous pre-trace blocks.
class PlacementIndex {
 public:
  explicit PlacementIndex(std::span<const TraceEvent> events) : events_(events) {}

  // The lowest address in [begin, end) allocated by an event before `before`, if any. Sorted on first use:
  // most snapshots have no ambiguous block.
  std::optional<Bytes> lowest(Bytes begin, Bytes end, std::size_t before) {
    if (allocs_.empty()) {
      for (std::size_t k = 0; k < events_.size(); ++k) {
        if (events_[k].action == TraceAction::kAlloc) {
          allocs_.emplace_back(events_[k].addr, k);
        }
      }
      std::sort(allocs_.begin(), allocs_.end());
    }
    for (auto it = std::lower_bound(allocs_.begin(), allocs_.end(), std::pair<Bytes, std::size_t>{begin, 0});
         it != allocs_.end() && it->first < end; ++it) {
      if (it->second < before) {
        return it->first;
      }
    }
    return std::nullopt;
  }

 private:
  std::span<const TraceEvent> events_;
  std::vector<std::pair<Bytes, std::size_t>> allocs_;  // (address, event index), sorted
};

// Tiles each segment with its live blocks and the free runs between them.
InitialState tile_segments(const std::string& source, const Rebuild& st, PlacementIndex placements) {
  const auto& segments = st.segments;
  const auto& blocks = st.blocks;
  InitialState state;
  auto block_it = blocks.begin();
  for (const auto& [base, info] : segments) {
    InitialSegment seg{base, info.size_bytes, info.pool, info.stream, info.expandable, {}, info.pool_id};
    const Bytes end = base + info.size_bytes;
    if (block_it != blocks.end() && block_it->first < base) {
      throw InputError(
          fmt::format("{}: block 0x{:x} live at trace start lies in no segment", source, block_it->first));
    }
    Bytes cursor = base;
    for (; block_it != blocks.end() && block_it->first < end; ++block_it) {
      InitialBlock b = block_it->second;
      if (b.addr < cursor) {
        throw InputError(fmt::format("{}: block 0x{:x} overlaps the block before it in segment 0x{:x}",
                                     source, b.addr, base));
      }
      if (b.addr > cursor) {
        seg.blocks.push_back(InitialBlock{cursor, b.addr - cursor, 0, false, false, false});
      }
      const auto next = std::next(block_it);
      const Bytes next_start = (next != blocks.end() && next->first < end) ? next->first : end;
      if (b.addr + b.size_bytes > next_start) {
        throw InputError(
            fmt::format("{}: block 0x{:x} ({} bytes) runs past the next block or the segment end", source,
                        b.addr, b.size_bytes));
      }
      if (b.size_guessed) {
        ++state.guessed_blocks;
        const Bytes gap = next_start - (b.addr + b.size_bytes);
        const bool unsplit_remainder =  // S3 for cudaMalloc large-pool segments, else S2 (E5)
            info.pool == PoolKind::kLarge && !info.expandable ? gap <= kSmallSize : gap < kMinBlockSize;
        if (gap > 0 && unsplit_remainder) {
          b.size_bytes += gap;  // no free block that small can exist in this pool: it was part of b
        } else if (gap > 0 && info.pool == PoolKind::kLarge && !info.expandable) {
          // Only an end within 1 MiB of the guess agrees with S3, so only that window is searched. The
          // windows of different blocks lie in different gaps, so all searches together visit each
          // allocation of the trace at most once, however hostile the trace.
          const Bytes guessed_end = b.addr + b.size_bytes;
          const Bytes window_end = std::min(next_start, guessed_end + kSmallSize + 1);
          if (const std::optional<Bytes> end_of_b = placements.lowest(guessed_end, window_end, b.freed_at)) {
            b.size_bytes = *end_of_b - b.addr;
            ++state.placed_blocks;
          }
        }
      }
      seg.blocks.push_back(b);
      cursor = b.addr + b.size_bytes;
    }
    if (cursor < end) {
      seg.blocks.push_back(InitialBlock{cursor, end - cursor, 0, false, false, false});
    }
    state.reserved_bytes += info.size_bytes;
    state.segments.push_back(std::move(seg));
  }
  if (block_it != blocks.end()) {
    throw InputError(
        fmt::format("{}: block 0x{:x} live at trace start lies in no segment", source, block_it->first));
  }
  return state;
}

}  // namespace

InitialState rebuild_initial_state(const Snapshot& snapshot, int device, const CachingConfig& config) {
  if (!snapshot.has_final_state) {
    return InitialState{};  // a generated trace starts from an empty allocator by definition
  }
  Rebuild st;
  read_final_state(snapshot, device, st);
  const auto d = static_cast<std::size_t>(device);
  if (d < snapshot.device_traces.size()) {
    const std::vector<TraceEvent>& events = snapshot.device_traces[d].events;
    for (std::size_t k = events.size(); k-- > 0;) {
      undo_event(events[k], EventWhere{snapshot.source, device, k}, config, st);
    }
  }
  add_mapped_runs(snapshot.source, st);
  const std::span<const TraceEvent> events =
      d < snapshot.device_traces.size() ? std::span<const TraceEvent>(snapshot.device_traces[d].events)
                                        : std::span<const TraceEvent>();
  return tile_segments(snapshot.source, st, PlacementIndex(events));
}

}  // namespace vramsim
