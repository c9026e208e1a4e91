// vLLM's fused-MoE workspace: the scratch buffer its modular MoE kernel takes for the experts' two grouped
// GEMMs and the activation between them, as the V1 engine holds it from the profile run on.
//
// FusedMoEKernelModularImpl._allocate_buffers (vllm/model_executor/layers/fused_moe/modular_kernel.py) asks
// the experts for their shapes (TritonExperts.workspace_shapes, experts/triton_moe.py, the kernel of
// unquantized and FP8 MoE layers on CUDA), with M the layer's tokens, N = w13's rows of this rank
// (2 x moe_intermediate / tp for a gated activation), K = hidden size:
//   workspace13  (M, topk, max(N / 2, K))   intermediate_cache2 (the activation's output), and the fused
//   output
//                                           (M, K), which shares it (common = max(workspace13, output))
//   workspace2   (M, topk, max(N, K))       intermediate_cache1 (w13's output) and intermediate_cache3 (w2's)
// in the activation dtype (workspace_dtype), taken together from the worker's WorkspaceManager
// (vllm/v1/worker/workspace.py get_simultaneous: one uint8 buffer, each part rounded up to 256 bytes). The
// manager keeps that buffer for the engine's life (_ensure_workspace_size only grows it), so after the
// profile run's first MoE layer it stays allocated through the later layers and the sampler: it adds to the
// profile run's torch peak whatever phase sets it. vLLM 0.16 and later run the whole batch at once
// (pull request 34086 removed VLLM_FUSED_MOE_CHUNK_SIZE's chunking), so M is max_num_batched_tokens.
// Sizes in bytes of one rank.
#pragma once

#include <cstdint>

#include "sim/core/types.h"

namespace vramsim {

struct VllmFusedMoeShapes {
  std::int64_t tokens = 0;        // M: the profile run's max_num_batched_tokens
  std::int64_t hidden = 0;        // K: the model's hidden size
  std::int64_t intermediate = 0;  // one expert's intermediate size on this rank (moe_intermediate / tp)
  std::int64_t top_k = 0;         // num_experts_per_tok
  bool gated = true;              // SiLU/SwiGLU-and-mul halves w13's output (adjust_N_for_activation)
  Bytes activation_bytes = 2;     // the model dtype
};

struct VllmFusedMoeWorkspace {
  Bytes workspace13_bytes = 0;  // M x topk x max(N / 2, K) elements
  Bytes workspace2_bytes = 0;   // M x topk x max(N, K) elements
  Bytes total_bytes = 0;        // the manager's buffer: both, each rounded up to 256 bytes
};

// The workspace one MoE layer of the profile run leaves in the WorkspaceManager (all MoE layers share it).
// Throws InputError when a size overflows 64 bits.
VllmFusedMoeWorkspace vllm_fused_moe_workspace(const VllmFusedMoeShapes& s);

}  // namespace vramsim
