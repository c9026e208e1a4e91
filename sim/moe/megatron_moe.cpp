// Megatron-Core's MoELayer.forward (megatron/core/transformer/moe/moe_layer.py, NVIDIA/Megatron-LM at
// 0014f13713bf), dropless or with a capacity factor, with the AlltoAll token dispatcher
// (token_dispatcher.py MoEAlltoAllTokenDispatcher) and grouped experts (experts.py TEGroupedMLP with
// Megatron's default bias_swiglu_fusion), statement by statement, unfused permutation (moe_permute_fusion
// False, moe_utils.py permute / unpermute / sort_chunks_by_idxs):
//
//   probs, routing_map = self.router(hidden_states)         # TopKRouter: gating = F.linear(x, weight);
//       scores, top_indices = torch.topk(logits, k, dim=1)   #   topk_softmax_with_capacity, pre-softmax off
//       probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(logits)
//       topk_masked_gates = torch.zeros_like(logits).scatter(1, top_indices, probs)      # [T, E]
//       topk_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()     # [T, E]
//   token_permutation:                                       # permute 1 (num_out_tokens = A)
//       routing_map = routing_map.bool().T.contiguous()      # [E, T]
//       sorted_indices = token_indices.masked_select(routing_map)            # int64 [A]
//       permuted_probs = probs.T.contiguous().masked_select(routing_map)     # [A]
//       permuted_input = tokens.index_select(0, sorted_indices)             # [A, H]
//       global_input_tokens = all_to_all(ep_group, permuted_input, ...)     # new_empty [R, H]
//       global_probs = all_to_all(ep_group, permuted_probs, ...)            # [R]
//       tp_size > 1 (expert tensor parallelism): gather_from_sequence_parallel_region(tokens and probs,
//           expt_tp_group, output_split_sizes)                               # [R x etp, H], [R x etp]
//       sort_chunks_by_idxs (num_local_experts > 1): torch.cat of the splits  # [R, H], [R]
//   experts: fc1 = grouped GEMM [R, 2 ff] (saves its input); weighted_bias_swiglu_impl(fc1, probs) [R, ff]
//            (WeightedSwiGLUFunction saves fc1 and probs); fc2 = grouped GEMM [R, H] (saves its input)
//   token_unpermutation: sort_chunks_by_idxs back [R, H]; tp_size > 1: reduce_scatter_to_sequence_parallel_
//       region(expt_tp_group) [R / etp, H]; all_to_all [A, H];
//       output = torch.zeros(restore_shape); output.scatter_add_(0, sorted_indices..., permuted_tokens)
//   output = output + self.shared_experts(hidden_states)     # SharedExpertMLP (deepseek, qwen2_moe)
//
// A: the rows this rank sends (tokens x top_k, after drops; tokens: its slice of the sequence under
// sequence parallelism); R: the rows its experts run on, from the expert-parallel and expert-tensor-parallel
// ranks, the busiest rank's under the routing model (expert_parallel.h busiest_rank_load). Under expert
// tensor parallelism the experts' fc1 / fc2 are the rank's column / row slices (expert_d_ff / etp). Left out:
// the router's auxiliary load-balancing loss (moe_aux_loss_coeff, default 0) and the dispatcher's small
// per-expert count tensors; the shared expert is the model's transformers MLP (same linears and activation).
#include "sim/moe/megatron_moe.h"

#include <fmt/format.h>

#include "sim/models/transformer_parts.h"
#include "sim/moe/moe_tape_ops.h"
#include "sim/parallel/expert_parallel.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// sort_chunks_by_idxs: torch.cat of torch.split's chunks in another order (a copy; backward: a copy).
VarId sort_chunks(EagerTape& t, const std::string& name, VarId x) {
  return moe_op(t, name, "cat", {x}, t.shape(x), t.dtype(x), {});
}

struct Routed {
  VarId probs = kNoVar;  // routing probabilities [T, E] (zeros but the top-k)
  VarId map = kNoVar;    // routing map [T, E] bool
};

// TopKRouter.forward -> routing -> topk_softmax_with_capacity (moe_utils.py).
Routed router(EmitContext& c, const std::string& n, VarId flat, VarId weight, std::int64_t tokens) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const MoeConfig& moe = c.model.moe;
  const MoeOptions& o = c.options.moe;
  const std::int64_t E = moe.n_experts;
  const VarId logits = ops.linear(n + ".router.gating", flat, weight);
  auto [scores, top_indices] = ops.topk_last(n + ".router.topk", logits, moe.top_k);
  const VarId probs32 = ops.softmax_last(n + ".router.softmax", scores, DType::kFloat32);
  t.drop(scores);
  const VarId probs = ops.to(n + ".router.type_as", probs32, t.dtype(logits));
  t.drop(probs32);
  // torch.zeros_like(logits).scatter(1, top_indices, probs): the gradient reaches probs by a gather
  const VarId zeros = t.constant(n + ".router.zeros_like", "zeros_like", {tokens, E}, t.dtype(logits));
  Routed r;
  r.probs = moe_op(t, n + ".router.topk_masked_gates", "scatter", {zeros, top_indices, probs}, {tokens, E},
                   t.dtype(logits), {1}, {0, 1});
  t.drop({zeros, probs});
  // .int(): int32, 4 bytes an element (graph/dtype.h has no int32; fp32 stands in for its size)
  const VarId map_int = t.constant(n + ".router.topk_map_int", "scatter", {tokens, E}, DType::kFloat32);
  r.map = t.constant(n + ".router.topk_map", "to", {tokens, E}, DType::kBool);
  t.drop(map_int);
  if (o.capacity_factor > 0) {
    // torch.topk(topk_masked_gates, k=expert_capacity, dim=0): capacity_indices; capacity_mask a bool
    // scatter; final_map (drop: logical_and) and final_probs = topk_masked_gates * final_map.
    const std::int64_t cap = std::min(expert_capacity(tokens, moe.top_k, E, o.capacity_factor), tokens);
    const VarId cap_idx = t.constant(n + ".router.capacity_indices", "topk", {cap, E}, DType::kInt64);
    const VarId cap_mask = t.constant(n + ".router.capacity_mask", "scatter", {tokens, E}, DType::kBool);
    t.drop(cap_idx);
    VarId final_map = cap_mask;
    if (!o.pad_to_capacity) {
      final_map = t.constant(n + ".router.final_map", "logical_and", {tokens, E}, DType::kBool);
      t.drop(cap_mask);
    }
    const VarId final_probs = moe_op(t, n + ".router.final_probs", "mul", {r.probs, final_map}, {tokens, E},
                                     t.dtype(r.probs), {1}, {1});
    t.drop({r.probs, r.map});
    r.probs = final_probs;
    r.map = final_map;
  }
  t.drop({logits, top_indices});
  return r;
}

// moe_utils.permute (unfused): the tokens and probabilities sorted by expert; returns permuted_input [A, H],
// permuted_probs [A], sorted_indices [A].
struct Permuted {
  VarId input = kNoVar, probs = kNoVar, sorted_indices = kNoVar;
};
Permuted permute(EagerTape& t, TorchOps& ops, const std::string& n, VarId flat, const Routed& r,
                 std::int64_t tokens, std::int64_t experts, std::int64_t rows) {
  const VarId map_t = t.constant(n + ".permute.routing_map_T", "contiguous", {experts, tokens}, DType::kBool);
  const VarId arange = t.constant(n + ".permute.token_indices", "arange", {tokens}, DType::kInt64);
  Permuted p;
  p.sorted_indices = t.constant(n + ".permute.sorted_indices", "masked_select", {rows}, DType::kInt64);
  t.drop(arange);
  const VarId probs_view = t.view(r.probs, {experts, tokens}, n + ".permute.probs_T");
  const VarId probs_t = ops.contiguous(n + ".permute.probs_T_contiguous", probs_view);
  t.drop(probs_view);
  p.probs = moe_op(t, n + ".permute.permuted_probs", "masked_select", {probs_t, map_t}, {rows},
                   t.dtype(probs_t), {1}, {1});
  t.drop({probs_t, map_t});
  // index_select saves the index; its backward is zeros + index_add_ (index_select_backward)
  p.input = moe_op(t, n + ".permute.permuted_input", "index_select", {flat, p.sorted_indices},
                   {rows, t.shape(flat)[1]}, t.dtype(flat), {1}, {1});
  return p;
}

// TEGroupedMLP.forward on the received rows: fc1, the weighted SwiGLU, fc2.
VarId grouped_experts(EmitContext& c, const std::string& n, int layer, VarId tokens_in, VarId probs) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::int64_t ff = c.model.moe.expert_d_ff, rows = t.shape(tokens_in)[0];
  std::vector<VarId> w1, w2;
  for (const LayerParams::Expert& e : p.experts) {  // the local experts' gate and up rows are linear_fc1's
    w1.push_back(e.gate_w);
    w1.push_back(e.up_w);
    w2.push_back(e.down_w);
  }
  const VarId fc1 = grouped_gemm(t, n + ".experts.linear_fc1", tokens_in, w1, 2 * ff);
  const VarId probs_col = t.view(probs, {rows, 1}, n + ".experts.probs_unsqueeze");
  const VarId act = moe_op(t, n + ".experts.weighted_bias_swiglu", "weighted_swiglu", {fc1, probs_col},
                           {rows, ff}, t.dtype(fc1), {0, 1});
  t.drop({fc1, probs_col});
  const VarId fc2 = grouped_gemm(t, n + ".experts.linear_fc2", act, w2, c.model.d_model);
  t.drop(act);
  return fc2;
}

// The shared expert on the layer's input (SharedExpertMLP: Megatron's dense MLP on the tensor-parallel
// group, sequence-parallel like the others, and moe_shared_expert_gate's sigmoid gate on the rank's tokens).
VarId shared_expert(EmitContext& c, const std::string& n, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  VarId shared = row_parallel_output(c, n + ".shared_experts.down_proj",
                                     hf_gated_mlp(c, n + ".shared_experts", x, p.shared_expert));
  if (c.model.moe.shared_expert_gated) {  // moe_shared_expert_gate (qwen2_moe)
    const VarId gate_logit = ops.linear(n + ".shared_experts.gate", x, p.shared_expert_gate_w);
    const VarId gate = ops.sigmoid(n + ".shared_experts.gate_sigmoid", gate_logit);
    t.drop(gate_logit);
    const VarId gated = ops.mul(n + ".shared_experts.gated", gate, shared);
    t.drop({gate, shared});
    shared = gated;
  }
  return shared;
}

}  // namespace

VarId megatron_moe(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const MoeConfig& moe = c.model.moe;
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "mlp");
  // the rank's tokens: its slice of the sequence under sequence parallelism (hidden_states [s/tp, b, h])
  const Shape in_shape = t.shape(x);
  const std::int64_t d = c.model.d_model, tokens = in_shape[0] * in_shape[1];
  const ExpertLoad load = busiest_rank_load(tokens, moe, c.options.moe);
  const bool sort_by_local_expert = moe.local_experts() > 1;

  const VarId flat = t.view(x, {tokens, d}, n + ".view");
  const Routed routed = router(c, n, flat, p.router_w, tokens);
  Permuted perm = permute(t, ops, n, flat, routed, tokens, moe.n_experts, load.sent_rows);
  // dispatch: all-to-all over the expert-parallel group (_AllToAll.forward returns its input itself on a
  // group of one), the all-gather over the expert-tensor-parallel group (tp_size > 1), and
  // sort_chunks_by_idxs whenever a rank holds more than one expert
  VarId tokens_in = perm.input, probs_in = perm.probs;
  if (moe.expert_parallel > 1) {
    tokens_in = expert_all_to_all(t, n + ".dispatch.all_to_all", perm.input, load.rows_per_etp_rank);
    probs_in = expert_all_to_all(t, n + ".dispatch.all_to_all_probs", perm.probs, load.rows_per_etp_rank);
    t.drop({perm.input, perm.probs});
  }
  if (moe.expert_tensor_parallel > 1) {
    const VarId gathered = expert_tensor_all_gather(t, n + ".dispatch.gather_from_sequence_parallel_region",
                                                    tokens_in, load.received_rows());
    const VarId gathered_probs = expert_tensor_all_gather(
        t, n + ".dispatch.gather_from_sequence_parallel_region_probs", probs_in, load.received_rows());
    t.drop({tokens_in, probs_in});
    tokens_in = gathered;
    probs_in = gathered_probs;
  }
  if (sort_by_local_expert) {
    const VarId sorted = sort_chunks(t, n + ".dispatch.sort_chunks_by_idxs", tokens_in);
    const VarId sorted_probs = sort_chunks(t, n + ".dispatch.sort_chunks_by_idxs_probs", probs_in);
    t.drop({tokens_in, probs_in});
    tokens_in = sorted;
    probs_in = sorted_probs;
  }
  VarId out = grouped_experts(c, n, layer, tokens_in, probs_in);
  t.drop({tokens_in, probs_in});
  if (sort_by_local_expert) {
    const VarId unsorted = sort_chunks(t, n + ".combine.sort_chunks_by_idxs", out);
    t.drop(out);
    out = unsorted;
  }
  if (moe.expert_tensor_parallel > 1) {  // fc2's partial sums, reduced and scattered back to the ranks
    const VarId scattered = expert_tensor_reduce_scatter(
        t, n + ".combine.reduce_scatter_to_sequence_parallel_region", out, load.rows_per_etp_rank);
    t.drop(out);
    out = scattered;
  }
  if (moe.expert_parallel > 1) {
    const VarId back = expert_all_to_all(t, n + ".combine.all_to_all", out, load.sent_rows);
    t.drop(out);
    out = back;
  }
  // unpermute: zeros(restore_shape).scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, H), tokens)
  const VarId zeros = t.constant(n + ".unpermute.zeros", "zeros", {tokens, d}, t.dtype(x));
  BackwardRule rule;
  rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  const VarId output =
      t.inplace(n + ".unpermute.scatter_add_", "scatter_add_", zeros, {perm.sorted_indices, out}, rule);
  t.drop({zeros, out});
  VarId result = t.view(output, in_shape, n + ".reshape");
  t.drop(output);
  if (moe.shared_expert_d_ff > 0) {  // output = output + self.shared_experts(hidden_states)
    const VarId shared = shared_expert(c, n, layer, x);
    const VarId sum = ops.add(n + ".add_shared_experts", result, shared);
    t.drop({result, shared});
    result = sum;
  }
  t.drop({flat, routed.probs, routed.map, perm.sorted_indices});
  return result;
}

}  // namespace vramsim
