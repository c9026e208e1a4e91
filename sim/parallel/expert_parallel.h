// Expert parallelism and the routing model, as Megatron-Core runs mixture-of-experts layers
// (megatron/core/transformer/moe/: moe_layer.py MoELayer, router.py TopKRouter, token_dispatcher.py
// MoEAlltoAllTokenDispatcher, experts.py GroupedMLP / TEGroupedMLP, moe_utils.py permute / unpermute /
// sort_chunks_by_idxs / get_capacity; NVIDIA/Megatron-LM at 0014f13713bf).
//
// Partitioning. --ep N is Megatron's expert_model_parallel_size: the N ranks of an expert-parallel group
// each hold n_experts / N of the experts (num_local_experts), with their gradients and optimizer states;
// everything else (attention, norms, embeddings, the router, shared experts) is laid out as in a dense
// model (replicated, or split by tensor parallelism). --expert-tensor-parallel E is Megatron's
// expert_tensor_parallel_size (arguments.py: unset, it is tensor_model_parallel_size): each local expert's
// fc1 split by columns and fc2 by rows over E ranks (TEGroupedMLP), the dispatcher all-gathering the E
// ranks' tokens after the all-to-all and reduce-scattering the experts' partial outputs before the one back
// (token_dispatcher.py MoEAlltoAllTokenDispatcher). parallel_state.initialize_model_parallel regroups the
// tp x dp ranks of a pipeline stage as E x N x expert-data-parallel ranks, so E x N must divide tp x dp; the
// experts' gradients are all-reduced over the expert-data-parallel group (its size changes the group, not
// DDP's bytes). Megatron needs sequence parallelism with tensor parallelism when N > 1
// (model_parallel_config.py) or E > 1 (MoELayer.forward, while training); under it the router runs on the
// rank's slice of the sequence, b x s / tp tokens.
//
// The routing model. A rank routes tokens x top_k assignments. With --moe-imbalance F the busiest expert
// receives ceil(F x assignments / n_experts) of them (never more than `tokens`: top-k picks distinct
// experts), the other experts share the rest evenly (the remainder to the lowest indices). Every rank of
// the group routes alike, so the rank holding the busiest expert (EP rank 0 here, expert 0 hot) receives
// N x the rows its local experts get from one rank (N x E after the expert-tensor gather): the largest
// all-to-all output and grouped-GEMM activations of the group. F = 1 is the even router. With Megatron's
// capacity factor C each expert keeps at most get_capacity = ceil(assignments / n_experts x C) of a rank's
// rows (drop), or exactly that many
// (--moe-pad-to-capacity: drop and pad).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/models/model_config.h"
#include "sim/training/training_options.h"

namespace vramsim {

// The rows one rank's router assigns to each of the n_experts experts (tokens x top_k in all, before
// capacity). pre: validate_moe_options passed.
std::vector<std::int64_t> routed_rows_per_expert(std::int64_t tokens, std::int64_t top_k,
                                                 std::int64_t n_experts, double imbalance);

// moe_utils.get_capacity(num_tokens = tokens x top_k, num_experts, capacity_factor):
// ceil(tokens x top_k / n_experts x factor).
std::int64_t expert_capacity(std::int64_t tokens, std::int64_t top_k, std::int64_t n_experts, double factor);

// What the busiest rank of an expert-parallel group of `ep` ranks sends and receives in one MoE layer.
struct ExpertLoad {
  std::int64_t sent_rows = 0;  // num_out_tokens: the rows it permutes and sends (after drops)
  std::vector<std::int64_t> rows_per_local_expert;  // what each of its local experts gets from all ranks
  std::int64_t rows_per_etp_rank = 0;  // the all-to-all output's rows (what one expert-tensor rank receives)
  std::int64_t received_rows() const;  // what its experts run on: the expert-tensor group's gather's rows
};
// `tokens`: what one rank routes. Megatron's expert-tensor ranks route different tokens and gather them after
// the all-to-all (x expert_tensor_parallel senders); torchtitan's route the same gathered tokens (no gather).
ExpertLoad busiest_rank_load(std::int64_t tokens, const MoeConfig& moe, const MoeOptions& options);

// Megatron's expert tensor parallelism on the rank's model `rank` (tensor_parallel_rank of `full`): each
// expert's hidden units full.moe.expert_d_ff / etp (MoeConfig::expert_tensor_parallel). Throws
// InputError("--expert-tensor-parallel ...") when etp does not divide them. A model without experts is
// returned as it is.
ModelConfig expert_tensor_parallel_rank(const ModelConfig& full, const ModelConfig& rank, int etp);

// torchtitan's expert tensor parallelism on the rank's model `rank` (tensor_parallel_rank of `full`, whose
// experts' hidden units are already ceil(ff / tp), DTensor's Shard(1) of w1/w3 and Shard(2) of w2 on rank 0),
// as torchtitan's apply_moe_ep_tp places GroupedExperts (torchtitan/models/llama4/infra/parallelize.py at
// pytorch/torchtitan 1e8f9acd1):
//   ep = 1           : TensorParallel on the tp mesh: every expert split over tp (etp has no effect);
//   ep > 1, etp = tp : ExpertTensorParallel on the [ep, etp] mesh: Shard(0) over ep, Shard(1)/(2) over tp;
//   ep > 1, etp = 1  : ExpertParallel on an ep mesh that borrows the tp ranks: whole experts.
// MoeConfig::expert_tensor_parallel records the split (tp or 1). Throws InputError when ep > 1 and etp is
// neither (ParallelDims._validate: "Currently we only support ETP=TP or ETP=1"). Returns `rank` for a model
// without experts or without tensor parallelism.
ModelConfig torchtitan_expert_tensor_parallel_rank(const ModelConfig& full, const ModelConfig& rank, int tp,
                                                   int ep, int etp);

// The rank's model: n_experts / ep experts per MoE layer (MoeConfig::expert_parallel). Throws
// InputError("--ep: ...") when ep does not divide the experts.
ModelConfig expert_parallel_rank(const ModelConfig& model, int ep);

// Throws InputError naming the flag for what Megatron refuses and what vramsim does not model with
// --moe-impl megatron / --ep / the routing model. `data_parallel_ranks`: the size of the data-parallel group.
void validate_moe_options(const ModelConfig& model, const TrainingOptions& options);

MoeImpl parse_moe_impl(const std::string& text);
const char* moe_impl_name(MoeImpl impl);

}  // namespace vramsim
