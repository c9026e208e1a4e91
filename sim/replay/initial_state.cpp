#include "sim/replay/initial_state.h"

#include <map>

#include <fmt/format.h>

#include "sim/alloc/size_classes.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

struct SegmentInfo {
  Bytes size_bytes = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
};

}  // namespace

InitialState rebuild_initial_state(const Snapshot& snapshot, int device, const CachingConfig& config) {
  std::map<Bytes, SegmentInfo> segments;
  std::map<Bytes, InitialBlock> blocks;  // live (allocated or pending-free) blocks, by address
  const auto where = [&](std::size_t i) {
    return fmt::format("{}: device_traces[{}][{}]", snapshot.source, device, i);
  };

  if (!snapshot.has_final_state) {
    return InitialState{};  // a generated trace starts from an empty allocator by definition
  }
  {
    for (const SnapshotSegment& seg : snapshot.segments) {
      if (seg.device != device) {
        continue;
      }
      if (seg.is_expandable) {
        throw InputError(
            fmt::format("{}: segment 0x{:x} is an expandable segment: rebuilding the state before a "
                        "mid-run trace is only supported for cudaMalloc segments",
                        snapshot.source, seg.address));
      }
      segments[seg.address] = SegmentInfo{
          seg.total_size_bytes, seg.is_small_pool ? PoolKind::kSmall : PoolKind::kLarge, seg.stream};
      for (const SnapshotBlock& b : seg.blocks) {
        if (b.state == BlockState::kInactive) {
          continue;
        }
        blocks[b.address] = InitialBlock{
            b.address, b.size_bytes, b.requested_bytes, true, b.state == BlockState::kActivePendingFree,
            false};
      }
    }
  }

  const std::vector<TraceEvent>& events =
      static_cast<std::size_t>(device) < snapshot.device_traces.size()
          ? snapshot.device_traces[static_cast<std::size_t>(device)].events
          : std::vector<TraceEvent>{};
  for (std::size_t k = events.size(); k-- > 0;) {
    const TraceEvent& e = events[k];
    switch (e.action) {
      case TraceAction::kAlloc: {
        auto it = blocks.find(e.addr);
        if (it == blocks.end() || !it->second.allocated || it->second.pending_free) {
          throw InputError(
              fmt::format("{}: alloc of 0x{:x}, but that block is neither live at the end nor freed "
                          "later in the trace",
                          where(k), e.addr));
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
                          where(k), e.addr));
        }
        it->second.pending_free = false;
        break;
      }
      case TraceAction::kFreeCompleted: {
        if (blocks.count(e.addr) != 0) {
          throw InputError(
              fmt::format("{}: free_completed of 0x{:x}, but a block is live there afterwards "
                          "without a new alloc",
                          where(k), e.addr));
        }
        blocks[e.addr] = InitialBlock{
            e.addr, round_size(std::max<Bytes>(e.size_bytes, 1), config), e.size_bytes, true, true, true};
        break;
      }
      case TraceAction::kSegmentAlloc: {
        auto it = segments.find(e.addr);
        if (it == segments.end() || it->second.size_bytes != e.size_bytes) {
          throw InputError(
              fmt::format("{}: segment_alloc of 0x{:x} ({} bytes) does not match a segment that exists "
                          "afterwards",
                          where(k), e.addr, e.size_bytes));
        }
        segments.erase(it);
        break;
      }
      case TraceAction::kSegmentFree: {
        if (segments.count(e.addr) != 0) {
          throw InputError(
              fmt::format("{}: segment_free of 0x{:x}, but a segment starts there afterwards without a "
                          "new segment_alloc",
                          where(k), e.addr));
        }
        segments[e.addr] = SegmentInfo{
            e.size_bytes, e.size_bytes == kSmallBuffer ? PoolKind::kSmall : PoolKind::kLarge, e.stream};
        break;
      }
      case TraceAction::kSegmentMap:
      case TraceAction::kSegmentUnmap:
        throw InputError(
            fmt::format("{}: {} in a trace recorded mid-run: rebuilding expandable-segment state is not "
                        "supported yet",
                        where(k), trace_action_name(e.action)));
      case TraceAction::kOom:
      case TraceAction::kSnapshot:
        break;
    }
  }

  InitialState state;
  auto block_it = blocks.begin();
  for (const auto& [base, info] : segments) {
    InitialSegment seg{base, info.size_bytes, info.pool, info.stream, {}};
    const Bytes end = base + info.size_bytes;
    if (block_it != blocks.end() && block_it->first < base) {
      throw InputError(fmt::format("{}: block 0x{:x} live at trace start lies in no segment", snapshot.source,
                                   block_it->first));
    }
    Bytes cursor = base;
    for (; block_it != blocks.end() && block_it->first < end; ++block_it) {
      InitialBlock b = block_it->second;
      if (b.addr < cursor) {
        throw InputError(fmt::format("{}: block 0x{:x} overlaps the block before it in segment 0x{:x}",
                                     snapshot.source, b.addr, base));
      }
      if (b.addr > cursor) {
        seg.blocks.push_back(InitialBlock{cursor, b.addr - cursor, 0, false, false, false});
      }
      const auto next = std::next(block_it);
      const Bytes next_start = (next != blocks.end() && next->first < end) ? next->first : end;
      if (b.addr + b.size_bytes > next_start) {
        throw InputError(
            fmt::format("{}: block 0x{:x} ({} bytes) runs past the next block or the segment end",
                        snapshot.source, b.addr, b.size_bytes));
      }
      if (b.size_guessed) {
        ++state.guessed_blocks;
        const Bytes gap = next_start - (b.addr + b.size_bytes);
        const bool unsplit_remainder =
            info.pool == PoolKind::kLarge ? gap <= kSmallSize : gap < kMinBlockSize;
        if (gap > 0 && unsplit_remainder) {
          b.size_bytes += gap;  // no free block that small can exist in this pool: it was part of b
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
    throw InputError(fmt::format("{}: block 0x{:x} live at trace start lies in no segment", snapshot.source,
                                 block_it->first));
  }
  return state;
}

}  // namespace vramsim
