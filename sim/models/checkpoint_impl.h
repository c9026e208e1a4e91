// How the tape replays a layer checkpointed with torch.utils.checkpoint (EagerTape's CheckpointRecompute),
// from the user's choice of variant (CheckpointOptions: --checkpoint-impl, --checkpoint-early-stop).
#pragma once

#include "sim/graph/eager_tape.h"
#include "sim/training/checkpoint_options.h"

namespace vramsim {

// Reentrant (CheckpointFunction.backward): the whole layer again, its outputs kept through the nested
// backward. Non-reentrant: the recomputation stops early or runs whole, its output dropped as it returns.
inline CheckpointRecompute checkpoint_recompute(const CheckpointOptions& c) {
  if (c.impl == CheckpointImpl::kReentrant) {
    return CheckpointRecompute::kKeepOutputs;
  }
  return c.early_stop ? CheckpointRecompute::kEarlyStop : CheckpointRecompute::kWhole;
}

}  // namespace vramsim
