// vLLM's expert parallelism for serving (--enable-expert-parallel, EngineArgs.enable_expert_parallel): the
// MoE layers place whole experts on the ranks instead of slicing every expert over the tensor-parallel ranks.
//
// FusedMoEParallelConfig.make (vllm/model_executor/layers/fused_moe/config.py): use_ep = dp x tp > 1 and
// enable_expert_parallel; then the MoE layer's tp_size is 1 (each expert whole:
// intermediate_size_per_partition is moe_intermediate_size) and ep_size = dp x tp, ep_rank = dp_rank x tp +
// tp_rank. determine_expert_map (fused_moe/layer.py, the "linear" expert_placement_strategy, its default)
// gives a rank
//   base = global // ep_size experts, one more to each of the first global % ep_size ranks,
// contiguous from ep_rank x base + min(ep_rank, remainder). Everything else is laid out as without it: the
// attention and dense MLPs split by TP, the router (gate: ReplicatedLinear) whole, and the shared experts
// (Qwen2-MoE's shared_expert, DeepSeek's shared_experts: the model's MLP class) split by TP.
// EPLB (--enable-eplb, off by default) adds redundant experts; it is not modelled (vramsim).
#pragma once

#include <cstdint>

#include "sim/models/model_config.h"

namespace vramsim {

// One EP rank's experts (determine_expert_map, linear placement).
struct VllmExpertPlacement {
  std::int64_t local_experts = 0;  // experts this rank holds, whole
  std::int64_t first_expert = 0;   // its first global expert index
};

// pre: global_experts >= 1, ep_size >= 1, 0 <= ep_rank < ep_size.
VllmExpertPlacement vllm_expert_placement(std::int64_t global_experts, std::int64_t ep_size,
                                          std::int64_t ep_rank);

// The rank's model under --enable-expert-parallel with tp tensor-parallel ranks (ep_size = tp; vLLM's data
// parallelism with it is refused by the caller): `tp_rank_model` (tensor_parallel_rank of `full`) with each
// expert whole (full.moe.expert_d_ff) and EP rank 0's experts, the most any rank holds (MoeConfig's
// local_experts() is the ceiling of n_experts / expert_parallel). The router and the shared experts stay as
// tensor_parallel_rank made them. Returns `tp_rank_model` unchanged when use_ep is false (tp == 1) or the
// model has no experts (vLLM builds no FusedMoE layer then, and the flag changes nothing).
ModelConfig vllm_expert_parallel_rank(const ModelConfig& full, const ModelConfig& tp_rank_model, int tp);

}  // namespace vramsim
