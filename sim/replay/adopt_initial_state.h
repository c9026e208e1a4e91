// The rebuilt start state of a recording (sim/replay/initial_state.h) installed in the native policy, as it
// was when recording began: what `vramsim replay` starts from, and what the pytorch rows of `vramsim compare`
// start from on a recording.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/replay/initial_state.h"

namespace vramsim {

// A stream handle no recorded block uses: record_stream onto it makes a free wait for complete_stream_events
// (a block freed before the trace whose free_completed comes inside it).
inline constexpr StreamId kDeferredFreeStream = ~StreamId{0} - 1;

// The rebuilt start state, installed in the model.
struct AdoptedState {
  std::unordered_map<Bytes, BlockId> live;  // live blocks by recorded address
  std::vector<Bytes> pending_at_start;      // freed before the trace, free_completed in it
  std::int64_t requested_bytes = 0;         // sum of the live blocks' requested sizes
};

// Installs `initial` in `policy` (which must hold no segment yet): cudaMalloc segments as they are, the
// expandable runs as one reservation per (pool, stream). Emits no events: seed observers from
// policy.blocks() afterwards. Throws InputError (naming `source`) when expandable runs cannot be one
// reservation.
AdoptedState adopt_initial_state(PyTorchCachingPolicy& policy, const InitialState& initial,
                                 Bytes device_total, const std::string& source);

}  // namespace vramsim
