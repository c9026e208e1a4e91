// torch.utils.checkpoint's settings beside the kind of checkpointing (--checkpointing). Part of
// TrainingOptions (sim/training/training_options.h); the CLI parses them in sim/predict/request_args.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// Which torch.utils.checkpoint variant wraps a checkpointed layer (torch/utils/checkpoint.py, `checkpoint`'s
// use_reentrant argument; torch.distributed's checkpoint_wrapper(checkpoint_impl=CheckpointImpl.*)).
//   kNonReentrant : use_reentrant=False, _checkpoint_without_reentrant_generator: the forward saves the
//   inputs
//                   (_NoopSaveInputs) and packs every other saved tensor into a holder; the first unpack in
//                   backward recomputes the layer (recompute_fn, whose output nothing keeps), stopping early
//                   as CheckpointOptions::early_stop says; each recomputed tensor is freed once its node has
//                   used it.
//   kReentrant    : use_reentrant=True, CheckpointFunction: the forward runs under no_grad and saves the
//                   inputs (ctx.save_for_backward); CheckpointFunction.backward reruns the whole layer under
//                   enable_grad (`outputs = ctx.run_function(*detached_inputs)`, no early stop) and calls
//                   torch.autograd.backward(outputs_with_grad, args_with_grad): `outputs` stays alive until
//                   that nested backward returns. Needs an input that requires grad, so the recipes that use
//                   it call model.enable_input_require_grads() (transformers; Answer.AI's fsdp_qlora
//                   train.py).
enum class CheckpointImpl : std::uint8_t { kNonReentrant, kReentrant };

struct CheckpointOptions {
  // torch.utils.checkpoint.set_checkpoint_early_stop (torch/utils/checkpoint.py; default True since
  // "Make early stop the default for checkpoint and expose a way to disable", pytorch/pytorch#96866, March
  // 2023, first released in PyTorch 2.1): the non-reentrant checkpoint's recomputation in backward stops as
  // soon as every tensor the forward saved has been recomputed, so the decoder layer's ops after its last
  // saved tensor (the down projection's matmul, the residual add) never run again. false: the whole layer
  // runs again and its output is dropped when the recomputation returns (PyTorch 1.13's
  // _checkpoint_without_reentrant, which has no early stop; 2.x under set_checkpoint_early_stop(False)).
  // Applies to --checkpointing full and selective-op (EagerTape's CheckpointRecompute) when non-reentrant.
  bool early_stop = true;
  // --checkpoint-impl. Non-reentrant by default: torch.distributed's checkpoint_wrapper
  // (CheckpointImpl.NO_REENTRANT), torchtitan, torchtune, transformers' gradient_checkpointing_enable since
  // huggingface/transformers#43203 (opened January 2026; from #28538, January 2024, until then it passed
  // use_reentrant=True).
  CheckpointImpl impl = CheckpointImpl::kNonReentrant;
  // --checkpoint-impl named explicitly: the vision towers (sim/vision/vision_tower.cpp, qwen2_vl_vision.cpp)
  // follow it; otherwise they keep the reentrant checkpoint of the transformers 4.x releases their
  // measurements ran.
  bool impl_explicit = false;
};

}  // namespace vramsim
