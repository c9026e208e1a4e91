// The allocator state when recording started, rebuilt from the final snapshot by undoing the trace, as
// PyTorch's MemoryViz does (spec §8.7, §10; shared/traces/real/README.md).
//
// Undo rules, walking the trace backwards: segment_alloc removes its segment, segment_free restores it (pool:
// small iff 2 MiB); segment_map unmaps its pages of an expandable segment again, segment_unmap maps them (the
// final snapshot reports each maximal run of mapped pages as one segment, spec E9); alloc removes its block,
// free_requested makes it allocated again, free_completed makes it pending-free again. Free space is then the
// gaps between live blocks, as maximal runs (M3).
//
// Blocks allocated before the trace and freed during it are known only by their requested size: they get
// round_size(requested), widened over a following gap that no free block of that pool could be (<= 1 MiB in
// the large pool, S3; < 512 bytes in the small pool), because such a gap must be an unsplit remainder. A
// larger gap in a cudaMalloc large-pool segment is ambiguous: an unsplit remainder of up to 1 MiB, then a
// free block. There the trace settles it when it can: while the block is live, the free space after it is
// one free block starting where the block ends, and every allocation is carved from the start of a free
// block (S1), so the lowest address allocated in that gap before the block's free_completed is its end.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "traces/snapshot.h"

namespace vramsim {

struct InitialBlock {
  Bytes addr = 0;
  Bytes size_bytes = 0;
  Bytes requested_bytes = 0;
  bool allocated = false;     // live when the trace starts (allocated or pending-free)
  bool pending_free = false;  // freed before the trace, free_completed inside it
  bool size_guessed = false;  // born before the trace and freed in it: size inferred
  std::size_t freed_at = 0;   // size_guessed: index of its free_completed in the trace
};

// A cudaMalloc segment, or one mapped run of an expandable reservation (spec E9) when `expandable`.
struct InitialSegment {
  Bytes base = 0;
  Bytes size_bytes = 0;
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  bool expandable = false;
  std::vector<InitialBlock> blocks;  // address order, tiling the segment; free runs merged
  MempoolId pool_id;                 // segment_pool_id; (0, 0) also for segments rebuilt from a segment_free
};

struct InitialState {
  std::vector<InitialSegment> segments;  // address order
  Bytes reserved_bytes = 0;              // cudaMalloc segments + mapped pages
  std::size_t guessed_blocks = 0;
  std::size_t placed_blocks = 0;  // of guessed_blocks: end found from a later allocation (see below)
  bool starts_empty() const { return segments.empty(); }
};

// A snapshot without a final state (a generated trace) starts empty.
// Throws InputError("<file>: device_traces[d][i]: ...") when the trace contradicts the final snapshot (an
// alloc of a block that is not live at the end and never freed, overlapping blocks, a free of an address
// that was never live, a segment_map of pages not mapped afterwards, ...). Expandable pages mapped before the
// trace began come back as `expandable` segments, one per maximal mapped run; which reservation each run
// belongs to is left to the caller.
InitialState rebuild_initial_state(const Snapshot& snapshot, int device, const CachingConfig& config);

}  // namespace vramsim
