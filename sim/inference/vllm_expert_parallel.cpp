#include "sim/inference/vllm_expert_parallel.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/assert.h"

namespace vramsim {

VllmExpertPlacement vllm_expert_placement(std::int64_t global_experts, std::int64_t ep_size,
                                          std::int64_t ep_rank) {
  SIM_ASSERT(global_experts >= 1 && ep_size >= 1 && ep_rank >= 0 && ep_rank < ep_size);
  const std::int64_t base = global_experts / ep_size;
  const std::int64_t remainder = global_experts % ep_size;
  VllmExpertPlacement p;
  p.local_experts = ep_rank < remainder ? base + 1 : base;
  p.first_expert = ep_rank * base + std::min(ep_rank, remainder);
  return p;
}

ModelConfig vllm_expert_parallel_rank(const ModelConfig& full, const ModelConfig& tp_rank_model, int tp) {
  if (tp <= 1 || full.moe.n_experts == 0) {
    return tp_rank_model;
  }
  ModelConfig m = tp_rank_model;
  m.moe.expert_d_ff = full.moe.expert_d_ff;  // the MoE layer's tp_size is 1: whole experts
  m.moe.expert_tensor_parallel = 1;
  m.moe.expert_parallel = tp;
  SIM_ASSERT(m.moe.local_experts() == vllm_expert_placement(m.moe.n_experts, tp, 0).local_experts);
  m.name = fmt::format("{} (vLLM expert-parallel rank 0 of {})", tp_rank_model.name, tp);
  return m;
}

}  // namespace vramsim
