// Mixture-of-experts settings: implementation, expert parallelism, routing imbalance, capacity. Part of
// TrainingOptions (sim/training/training_options.h); the CLI parses them in
// sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// Mixture-of-experts layers (expert_parallel.h):
//   transformers : the model's own MoE block (hf_moe.cpp: MixtralSparseMoeBlock's loop over the experts);
//   megatron     : Megatron-Core's MoELayer (megatron/core/transformer/moe/moe_layer.py) with its AlltoAll
//                  token dispatcher (token_dispatcher.py MoEAlltoAllTokenDispatcher) and grouped experts
//                  (experts.py GroupedMLP / TEGroupedMLP): permute, all-to-all over the expert-parallel
//                  group, sort by local expert, grouped GEMMs, and back (megatron_moe.cpp);
//   torchtitan   : torchtitan's MoE (torchtitan/models/moe/moe.py MoE, GroupedExperts) with its
//                  ExpertParallel dispatch and combine (torchtitan/distributed/expert_parallel.py) under
//                  FSDP2: the routed experts sharded over the expert-parallel group and FSDP over the rest
//                  (torchtitan_moe.cpp; fsdp2.cpp's expert parameters).
enum class MoeImpl : std::uint8_t { kTransformers, kMegatron, kTorchtitan };
struct MoeOptions {
  MoeImpl impl = MoeImpl::kTransformers;  // --moe-impl
  // --ep: Megatron's --expert-model-parallel-size, torchtitan's parallelism.expert_parallel_degree (experts
  // split over the ranks)
  int expert_parallel = 1;
  // --moe-imbalance: the routing model. The busiest expert receives `imbalance` times the mean
  // tokens x top_k / experts (1: an even router), the others share the rest evenly; under expert
  // parallelism every rank routes alike, so the rank holding the busiest expert receives the most.
  double imbalance = 1.0;
  // Megatron's --moe-expert-capacity-factor (0: unset, dropless, its default): each expert takes at most
  // ceil(tokens x top_k / experts x factor) of a rank's tokens (moe_utils.get_capacity), the rest dropped;
  // --moe-pad-expert-input-to-capacity: every expert gets exactly that many rows.
  double capacity_factor = 0.0;
  bool pad_to_capacity = false;
};

}  // namespace vramsim
