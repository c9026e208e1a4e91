// Selective activation checkpointing (SAC): torch.utils.checkpoint with
// context_fn=partial(create_selective_checkpoint_contexts, policy_fn). Inside a checkpointed region the
// policy decides per aten op whether its outputs are cached in the forward (CheckpointPolicy.MUST_SAVE) or
// the op is run again in the backward's recompute (PREFER_RECOMPUTE). During the recompute a cached op does
// not run: it returns what the forward cached (torch/utils/checkpoint.py, _CachingTorchDispatchMode and
// _CachedTorchDispatchMode: `storage[func].append(out)` and `storage[func].pop(0)`).
//
// The policy sees the ops in the order the region runs them, once in the forward and once in the recompute,
// each pass counted from zero (the `ctx.is_recompute` half of its state); its decisions must agree between
// the two passes, as PyTorch requires.
#pragma once

#include <string_view>

#include "sim/training/training_options.h"

namespace vramsim {

class SelectiveCheckpointPolicy {
 public:
  virtual ~SelectiveCheckpointPolicy() = default;
  // Whether the op `aten_op` (the tape's op kind: "mm", "_scaled_dot_product_flash_attention", ...), the
  // `occurrence`-th op of that kind in this pass of the region (1 for the first), has its outputs saved.
  virtual bool must_save(std::string_view aten_op, int occurrence) const = 0;
};

// torchtitan's op-level SAC (`activation_checkpoint.mode = "selective"`, `selective_ac_option = "op"`,
// torchtitan/parallelisms/parallelize_llama.py since March 2024): outputs of mm, the flash and
// memory-efficient SDPA kernels and reduce_scatter_tensor are saved, "except every second mm" (the even
// occurrences are recomputed).
const SelectiveCheckpointPolicy& torchtitan_op_sac_policy();

// The aten op a TorchDispatchMode (the SAC policy's) sees for a tape op of kind `kind`: torchao's float8
// linears call torch.mm on Float8TrainingTensor subclasses (float8_linear.py matmul_with_hp_or_float8_args),
// and modes run before the subclass's __torch_dispatch__ turns aten.mm into _scaled_mm (float8_ops.py
// float8_mm), so the policy sees, counts and saves them as aten.mm. Every other kind is itself.
std::string_view dispatch_mode_op(std::string_view kind);

// The policy of --checkpointing `c`; nullptr where `c` is not a selective-op mode.
const SelectiveCheckpointPolicy* selective_checkpoint_policy(Checkpointing c);

}  // namespace vramsim
