// The allocation requests a recorded trace makes, as a RequestSequence (sim/alloc/request_sequence.h): what
// offline policies plan over, and what every policy can be replayed on from an empty state.
#pragma once

#include "sim/alloc/request_sequence.h"
#include "traces/snapshot.h"

namespace vramsim {

// One device's trace events, in order: `alloc` -> an allocation (requested size, stream); `free_requested` of
// an address allocated earlier in the trace -> its free. Everything else is left out: frees of blocks
// allocated before recording started (the sequence starts empty), free_completed (a record_stream delay is
// not a request), segment events (the allocator's answers), oom entries (requests that got nothing).
// `device` -1 picks the first device whose trace has events. Throws InputError naming the file and the event
// when the trace allocates an address that is still live, or `device` has no trace.
RequestSequence request_sequence_from_trace(const Snapshot& snapshot, int device = -1);

}  // namespace vramsim
