// The allocation requests a recorded trace makes, as a RequestSequence (sim/alloc/request_sequence.h): what
// offline policies plan over, and what every policy can be replayed on from an empty state.
#pragma once

#include <string>
#include <vector>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/request_sequence.h"
#include "sim/alloc/workload.h"
#include "sim/replay/initial_state.h"
#include "traces/snapshot.h"

namespace vramsim {

// One device's trace events, in order: `alloc` -> an allocation (requested size, stream); `free_requested` of
// an address allocated earlier in the trace -> its free. Everything else is left out: frees of blocks
// allocated before recording started (the sequence starts empty), free_completed (a record_stream delay is
// not a request), segment events (the allocator's answers), oom entries (requests that got nothing).
// `device` -1 picks the first device whose trace has events. Throws InputError naming the file and the event
// when the trace allocates an address that is still live, or `device` has no trace.
RequestSequence request_sequence_from_trace(const Snapshot& snapshot, int device = -1);

// A phase marker of a trace: from trace event `event_index` (into the device's events) on, the run is in
// `phase` of step `step` (the tracer's markers file).
struct TraceMarker {
  std::size_t event_index = 0;
  int step = 0;
  std::string phase;
};

// A traced run (a trace that starts from an empty allocator, as `vramsim trace`'s tracer writes them) as the
// workload the allocator model takes: `alloc` -> an allocation of its size (0-byte allocs, which PyTorch
// never records, are left out), `free_requested` -> its free, or, when its `free_completed` does not follow
// at once (record_stream), a free at that `free_completed`, when the memory becomes reusable; the events'
// tags as labels; each marker at the first request at or after its event. Segment events and `oom` entries
// (an allocator's answers, not the program's requests) are left out. Throws InputError naming the file and
// the event on an alloc at a live address or a free of an address that is not live.
Workload workload_from_trace(const Snapshot& trace, const std::vector<TraceMarker>& markers, int device = 0);

// A recording's requests including the state it started from, as `vramsim compare` gives them to every
// policy. The allocations live when the trace began (rebuilt from the final snapshot minus the trace, as
// `vramsim replay` rebuilds them: rebuild_initial_state) come first, one allocation each of its requested
// size on its stream, in an order a real allocator could have handed them out: segments by base address,
// blocks by address within each segment. Then the trace, as request_sequence_from_trace reads it, except that
// the free_requested of a block live at trace start frees its start allocation, and a block freed before
// the trace whose free_completed is in it (record_stream) is freed at that free_completed.
struct TraceRequests {
  RequestSequence sequence;
  std::string source;
  int device = 0;
  InitialState
      initial;  // the rebuilt state at trace start; adopt_initial_state installs it in pytorch policies
  std::size_t start_blocks = 0;     // allocations [0, start_blocks) are the blocks live at trace start
  Bytes start_requested_bytes = 0;  // their requested bytes
  std::vector<Bytes> start_addr;    // per start allocation: its recorded address
  std::vector<bool> start_pending;  // per start allocation: freed before the trace, free_completed in it
  // empty_cache() is called after this many ops, ascending: a burst of segment_free / segment_unmap that
  // feeds no alloc, or that opens the trace, is torch.cuda.empty_cache() (the rule `vramsim replay` follows).
  std::vector<std::size_t> empty_cache_after;
};

// `device` -1 picks the device `vramsim replay` picks (replay_device). `config` sizes the blocks the rebuild
// has to infer (rebuild_initial_state). Throws InputError as rebuild_initial_state and
// request_sequence_from_trace do.
TraceRequests trace_requests(const Snapshot& snapshot, int device, const CachingConfig& config);

}  // namespace vramsim
