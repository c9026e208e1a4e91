// The host-side schedule of a hardware replay: which allocations and frees a trace asks for, in order, with
// every free matched to the allocation it releases. Built from any file load_snapshot reads (.pickle, .json,
// .vtrace); needs no GPU, so CI tests it.
//
// What becomes an operation (one device's trace, oldest first):
//   alloc            -> kAlloc of the requested size on the recorded stream (no free yet: `free_op` says
//   when) free_requested   -> kFree of the matching allocation, at once when free_completed follows directly
//   (the
//                       usual case); otherwise at the matching free_completed (the block was record_stream'ed
//                       and its memory came back later)
//   segment_free / segment_unmap bursts that no alloc follows -> kEmptyCache (torch.cuda.empty_cache(); a
//                       burst at the very start of a trace counts too: the usual "empty_cache, record"
//                       recipe)
//   other segment events, oom, snapshot -> not replayed (they are the recorded allocator's answers; the
//                       backends under test give their own) but counted
//
// Note [Frees of blocks from before the trace]: a recording with a final state (a real snapshot) may start
// mid-run: PyTorch keeps only the last max_entries trace entries, so some frees release blocks allocated
// before the first entry. Those are skipped and counted. A trace without a final state (vramsim predict
// --trace-out, hand-written vtrace) starts from an empty allocator, so there a free of an address that is
// not live is an error. A second alloc at a live address is always an error. Zero-byte allocations are
// planned as 1 byte, as `vramsim replay` models them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sim/alloc/request_sequence.h"
#include "sim/core/types.h"
#include "traces/snapshot.h"

namespace vramsim::hw {

inline constexpr std::size_t kNoOp = static_cast<std::size_t>(-1);

enum class ReplayOpKind : unsigned char { kAlloc, kFree, kEmptyCache };

struct ReplayOp {
  ReplayOpKind kind = ReplayOpKind::kAlloc;
  Bytes size_bytes = 0;          // kAlloc / kFree: the requested (unrounded) bytes; 0 for kEmptyCache
  StreamId stream = 0;           // recorded stream handle of the allocation (a free uses its alloc's stream)
  std::size_t trace_index = 0;   // the trace event this op comes from (device_traces[device][trace_index])
  std::size_t alloc_op = kNoOp;  // kFree: index of its kAlloc in ReplayPlan::ops
  std::size_t free_op = kNoOp;   // kAlloc: index of its kFree, kNoOp when the block is live at the end
};

struct ReplayPlan {
  std::string source;  // file name, for messages
  int device = 0;
  bool starts_empty = true;  // false for recordings with a final state (see the Note above)
  std::size_t trace_events = 0;
  std::vector<ReplayOp> ops;
  std::vector<StreamId> streams;  // distinct streams of the allocations, in order of first use

  // Counts, one per kind of trace event (trace_events = their sum).
  std::size_t allocs = 0;               // alloc events = kAlloc ops
  std::size_t frees = 0;                // free_requested events that became kFree ops
  std::size_t frees_before_trace = 0;   // free_requested of blocks allocated before the trace: skipped
  std::size_t free_completed = 0;       // free_completed events (each consumed by a free, or skipped)
  std::size_t empty_caches = 0;         // kEmptyCache ops
  std::size_t segment_events = 0;       // segment_alloc / free / map / unmap events, not replayed
  std::size_t ooms = 0;                 // oom events, not replayed
  std::size_t other_events = 0;         // snapshot events
  std::size_t live_at_end = 0;          // allocations the trace never frees
  Bytes peak_live_requested_bytes = 0;  // max over the ops of the requested bytes live (trace's own view)
  Bytes total_allocated_bytes = 0;      // sum of all allocation sizes (what the touch kernels write)
};

// The plan for `device` of `snapshot` (-1: the first device whose trace has events, else 0). Throws
// InputError("<file>: device_traces[d][i]: <problem>") for a trace that contradicts itself: a free of an
// address that is not live (in a trace that starts empty), an alloc at a live address, a free_completed with
// no pending free in a trace that starts empty; and for a device with no trace.
ReplayPlan build_replay_plan(const Snapshot& snapshot, int device = -1);

// load_snapshot(path) + build_replay_plan.
ReplayPlan load_replay_plan(const std::string& path, int device = -1);

// The plan's allocations and frees as the request sequence offline policies plan over (empty_cache ops are
// not requests and are left out; IAllocatorPolicy::plan).
RequestSequence request_sequence(const ReplayPlan& plan);

}  // namespace vramsim::hw
