// torch.utils.checkpoint's settings beside the kind of checkpointing (--checkpointing). Part of
// TrainingOptions (sim/training/training_options.h); the CLI parses them in sim/predict/request_args.cpp.
#pragma once

namespace vramsim {

struct CheckpointOptions {
  // torch.utils.checkpoint.set_checkpoint_early_stop (torch/utils/checkpoint.py; default True since
  // "Make early stop the default for checkpoint and expose a way to disable", pytorch/pytorch#96866, March
  // 2023, first released in PyTorch 2.1): the non-reentrant checkpoint's recomputation in backward stops as
  // soon as every tensor the forward saved has been recomputed, so the decoder layer's ops after its last
  // saved tensor (the down projection's matmul, the residual add) never run again. false: the whole layer
  // runs again and its output is dropped when the recomputation returns (PyTorch 1.13's
  // _checkpoint_without_reentrant, which has no early stop; 2.x under set_checkpoint_early_stop(False)).
  // Applies to --checkpointing full and selective-op (EagerTape's CheckpointRecompute).
  bool early_stop = true;
};

}  // namespace vramsim
