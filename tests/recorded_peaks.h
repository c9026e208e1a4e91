// The peaks a recording shows, read off the file without the allocator model under test: what a test
// compares a prediction with must not come out of `vramsim replay` (which runs that model).
//
// Peak reserved (exact): the final segments' sizes, minus the segments the trace created and plus those it
// released, is what was reserved at trace start (the counting INDEX.json's
// peak_reserved_during_trace_bytes and MemoryViz's segment timeline use); then the running sum of
// segment_alloc/segment_map minus segment_free/segment_unmap sizes. cudaMalloc sizes are in the events, so
// nothing is modelled.
//
// Peak allocated (torch.cuda.max_memory_allocated counts block sizes, spec SS4 and ST3: a block counts from
// its alloc to its free_requested): a trace allocation still live at the end has its block size in the final
// snapshot (exact); one freed inside the trace is counted as its request rounded up to 512 B (spec 3.1,
// round_size, with the default roundup_power2_divisions of these files). That is exact for small-pool blocks
// (a small block is split whenever 512 B or more would remain) and a lower bound for large-pool ones (an
// unsplit remainder of at most 1 MiB stays in the block, spec S3/S5). Blocks live before the trace count
// with their final size, or their rounded request if the trace frees them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "traces/snapshot.h"

namespace vramsim::test {

struct RecordedPeaks {
  std::int64_t peak_reserved = 0;  // exact
  std::int64_t peak_allocated =
      0;  // exact but for unsplit large-pool remainders of blocks freed in the trace
};

inline std::int64_t round_up_512(Bytes requested) {
  return std::max<std::int64_t>(512, (static_cast<std::int64_t>(requested) + 511) / 512 * 512);
}

inline RecordedPeaks recorded_peaks(const Snapshot& s, int device = 0) {
  const std::vector<TraceEvent>& events = s.device_traces.at(static_cast<std::size_t>(device)).events;
  std::int64_t reserved = 0, allocated = 0;
  std::map<Bytes, std::int64_t> final_block;  // address -> size of the final active blocks
  for (const SnapshotSegment& seg : s.segments) {
    if (seg.device != device) {
      continue;
    }
    reserved += static_cast<std::int64_t>(seg.total_size_bytes);
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state == BlockState::kActiveAllocated) {
        final_block[b.address] = static_cast<std::int64_t>(b.size_bytes);
        allocated += static_cast<std::int64_t>(b.size_bytes);
      }
    }
  }
  // Pass 1: which allocations are still live at the end, and the state at trace start.
  std::map<Bytes, std::size_t> open;  // address -> index of its alloc event
  std::set<std::size_t> live_at_end;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    const std::int64_t size = static_cast<std::int64_t>(e.size_bytes);
    if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) {
      reserved -= size;
    } else if (is_segment_release(e.action)) {
      reserved += size;
    } else if (e.action == TraceAction::kAlloc) {
      open[e.addr] = i;
    } else if (e.action == TraceAction::kFreeRequested) {
      if (open.erase(e.addr) == 0) {
        allocated += round_up_512(e.size_bytes);  // live before the trace, freed in it
      }
    }
  }
  for (const auto& [addr, index] : open) {
    live_at_end.insert(index);
    allocated -= final_block.at(addr);
  }
  // Pass 2: the running sums from the start state.
  RecordedPeaks p{reserved, allocated};
  std::map<Bytes, std::int64_t> size_of;  // address -> counted size of the live trace allocation
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    const std::int64_t size = static_cast<std::int64_t>(e.size_bytes);
    if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) {
      reserved += size;
    } else if (is_segment_release(e.action)) {
      reserved -= size;
    } else if (e.action == TraceAction::kAlloc) {
      const std::int64_t block =
          live_at_end.count(i) != 0 ? final_block.at(e.addr) : round_up_512(e.size_bytes);
      size_of[e.addr] = block;
      allocated += block;
    } else if (e.action == TraceAction::kFreeRequested) {
      const auto it = size_of.find(e.addr);
      allocated -= it != size_of.end() ? it->second : round_up_512(e.size_bytes);
      if (it != size_of.end()) {
        size_of.erase(it);
      }
    }
    p.peak_reserved = std::max(p.peak_reserved, reserved);
    p.peak_allocated = std::max(p.peak_allocated, allocated);
  }
  return p;
}

}  // namespace vramsim::test
