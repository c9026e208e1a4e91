// torchtitan's MoE.forward (torchtitan/models/moe/moe.py at pytorch/torchtitan 1e8f9acd1, 2026-01-20) with
// grouped experts (use_grouped_mm, its default) and, with --ep, ExpertParallel's dispatch and combine hooks
// around GroupedExperts (torchtitan/distributed/expert_parallel.py ExpertParallel._token_dispatch /
// _token_combine; torchtitan/models/moe/utils.py _permute / _unpermute), statement by statement:
//
//   scores = self.gate(x)                                            # TokenChoiceTopKRouter: [T, E]
//   scores = F.softmax(scores.to(torch.float32), dim=1)              #   (or sigmoid): fp32 [T, E], saved
//   scores_for_choice = scores + expert_bias                         #   load_balance_coeff (default 1e-3)
//   _, selected_experts_indices = torch.topk(scores_for_choice, k)   #   int64 [T, k]
//   top_scores = scores.gather(dim=1, index=selected_experts_indices) * route_scale   # fp32 [T, k]
//   token_indices_experts_sorted = torch.argsort(selected.view(-1))  # TokenReorderer: int64 [A]
//   top_scores_experts_sorted = top_scores.view(-1)[token_indices_experts_sorted]      # fp32 [A]
//   routed_input = x[token_indices_experts_sorted // top_k]          # [A, H]
//   if score_before_experts:                                         # MoEArgs default True; deepseek_v3
//   False
//       routed_input = (routed_input.to(torch.float32) * top_scores_experts_sorted.reshape(-1,
//       1)).to(x.dtype)
//   routed_output = self.experts(routed_input, num_tokens_per_expert):
//       _token_dispatch: all_to_all_single_autograd(routed_input, ...)              # [R, H]   (EP only)
//       _permute: torch.vstack((x, x.new_zeros(H)))                                  # [R + 1, H]
//                 x[permuted_indices, :]  (int32 [P], P = round_up(R + L x 8, 8))   # [P, H]
//       _run_experts_grouped_mm: h = F.silu(_grouped_mm(x, w1.T)) * _grouped_mm(x, w3.T)   # [P, ff] each
//                 out = _grouped_mm(h, w2.T)                                         # [P, H]
//       _unpermute: out.new_empty([R + 1, H])[permuted_indices, :] = out; [:-1]
//       _token_combine: all_to_all_single_autograd(routed_output, ...)              # [A, H]   (EP only)
//   out = self.shared_experts(x)                                     # FeedForward w2(silu(w1 x) * w3 x)
//   routed_output_unsorted = torch.zeros(A, H); routed_output_unsorted[token_indices_experts_sorted] = ...
//   score_before_experts: out_experts = routed_output_unsorted.reshape(-1, k, H).sum(dim=1)
//   otherwise: torch.bmm(top_scores.reshape(-1, 1, k), routed_output_unsorted.float()).to(x.dtype)
//   return out + out_experts
//
// Under --tp (with --sequence-parallel, as torchtitan always runs TP) apply_moe_ep_tp
// (torchtitan/models/llama4/infra/parallelize.py at 1e8f9acd1) wraps the block:
//   PrepareModuleInputOutput: the [b, s/tp, H] slice all-gathered to [b, s, H] (Replicate) on the way in,
//       the Partial output reduce-scattered back to [b, s/tp, H] (Shard(1)) on the way out;
//   router.gate NoParallel (replicated: every tp rank routes all T tokens); shared_experts w1 / w3 Colwise,
//       w2 Rowwise(output_layouts=Partial()); experts TensorParallel (ep = 1) or ExpertTensorParallel
//       (ep > 1, etp = tp): ff / tp of each expert on all T tokens' rows, partial sums;
//   ep > 1, etp = 1: ReordererSequenceParallel hands each tp rank T / tp of the tokens' top_scores and
//       selected_experts_indices (views), whose argsort gets the rank's offset added (a new int64 tensor);
//       the rank dispatches and runs whole experts on its A / tp rows, and routed_output_unsorted is still
//       zeros(A, H) with only them filled (the other ranks' rows are zero: Partial).
// Left out under TP: DTensor's chunk / cat copies around the sequence-dim collectives (funcol gathers and
// scatters along dim 0), transients of the collective.
// Without --ep the padding wrapper (indices_padding_wrapper) runs the same _permute / _unpermute with one
// rank. T: the rank's tokens (b x s, s / cp under context parallelism); A = T x k; R: the rows the busiest
// expert-parallel rank receives under the routing model (expert_parallel.h busiest_rank_load); L: the local
// experts. Left out: the router's histc counts and the count all-to-all ([E] each), route_norm's [T, k]
// division, argsort's sorted values, and the D2H copy of the splits (host memory).
#include "sim/moe/torchtitan_moe.h"

#include <optional>

#include <fmt/format.h>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/models/transformer_parts.h"
#include "sim/moe/moe_tape_ops.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/training/float8_linear.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

struct Routing {
  VarId scores = kNoVar;          // fp32 [T, E], saved by the gather
  VarId top_scores = kNoVar;      // fp32 [T, k]
  VarId sorted_indices = kNoVar;  // token_indices_experts_sorted, int64 [A]
  VarId sorted_scores = kNoVar;   // top_scores_experts_sorted, fp32 [A]
};

// A = T x top_k routed rows. T <= 2^32 (kMaxTokens, training_options.h) and top_k <= 4096 experts
// (hf_config.cpp) keep it far inside int64; checked all the same, as every size from user input.
std::int64_t routed_rows(std::int64_t tokens, std::int64_t top_k) {
  const std::optional<std::int64_t> rows = checked_mul(tokens, top_k);
  if (!rows) {
    throw InputError(fmt::format("--batch x --seq: {} tokens x top-{} routed rows overflow", tokens, top_k));
  }
  return *rows;
}

// TokenChoiceTopKRouter.forward on `tokens` and TokenReorderer.forward on `reorder_tokens` of them (tokens /
// tp under ReordererSequenceParallel, else tokens).
Routing route(EmitContext& c, const std::string& n, VarId flat, VarId gate_w, std::int64_t tokens,
              std::int64_t reorder_tokens) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const std::int64_t E = c.model.moe.n_experts, k = c.model.moe.top_k, A = routed_rows(reorder_tokens, k);
  const VarId logits = ops.linear(n + ".router.gate", flat, gate_w);
  const VarId logits32 = ops.to(n + ".router.to_float32", logits, DType::kFloat32);
  t.drop(logits);
  Routing r;
  r.scores = ops.softmax_last(n + ".router.softmax", logits32);
  t.drop(logits32);
  // scores + expert_bias (a buffer): only the indices of its top-k are used
  const VarId choice = t.constant(n + ".router.scores_for_choice", "add", {tokens, E}, DType::kFloat32);
  auto [values, selected] = ops.topk_last(n + ".router.topk", choice, k);
  t.drop({values, choice});
  const VarId gathered =
      moe_op(t, n + ".router.gather", "gather", {r.scores, selected}, {tokens, k}, DType::kFloat32, {1}, {1});
  r.top_scores = ops.scale(n + ".router.route_scale", gathered);
  t.drop(gathered);
  // ReordererSequenceParallel._prepare_inputput_fn: x[offset : offset + local_num_tokens] of top_scores and
  // selected_experts_indices (views)
  const bool split = reorder_tokens != tokens;
  const VarId local_scores =
      split ? t.view(r.top_scores, {reorder_tokens, k}, n + ".reorderer.split_along_first_dim")
            : r.top_scores;
  r.sorted_indices = t.constant(n + ".reorderer.argsort", "argsort", {A}, DType::kInt64);
  t.drop(selected);
  const VarId flat_scores = t.view(local_scores, {A}, n + ".reorderer.top_scores_view");
  r.sorted_scores = ops.index(n + ".reorderer.top_scores_experts_sorted", flat_scores, r.sorted_indices);
  t.drop(flat_scores);
  if (split) {  // _prepare_output_fn: token_indices_experts_sorted + top_scores.shape[0] * local_rank
    t.drop(local_scores);
    const VarId global = t.constant(n + ".reorderer.global_token_indices", "add", {A}, DType::kInt64);
    t.drop(r.sorted_indices);
    r.sorted_indices = global;
  }
  return r;
}

// GroupedExperts.forward with ExpertParallel's hooks (or indices_padding_wrapper without EP) on the
// routed rows [A, H]: returns the rows back in this rank's order [A, H].
VarId grouped_experts(EmitContext& c, const std::string& n, int layer, VarId routed, const ExpertLoad& load) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::int64_t H = c.model.d_model, ff = c.model.moe.expert_d_ff, A = load.sent_rows;
  const std::int64_t R = load.received_rows(), L = c.model.moe.local_experts();
  const bool ep = c.model.moe.expert_parallel > 1;
  VarId received = routed;
  if (ep) {  // _token_dispatch
    received = expert_all_to_all(t, n + ".experts.dispatch.all_to_all", routed, R);
  } else {
    t.hold(routed);
  }
  // _permute: vstack with one zero row (cat's backward narrows the gradient: views), then the gather
  const VarId zero_row = t.constant(n + ".experts.permute.new_zeros", "zeros", {1, H}, t.dtype(received));
  OpCall vstack;
  vstack.name = n + ".experts.permute.vstack";
  vstack.kind = "cat";
  vstack.inputs = {received, zero_row};
  vstack.outputs = {OutputSpec{"", {R + 1, H}, t.dtype(received)}};
  vstack.backward.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}};
  const VarId stacked = t.op1(vstack);
  t.drop({received, zero_row});
  const std::int64_t P = torchtitan_padded_rows(R, L);
  // generate_permute_indices: torch.full((max_len,), -1, dtype=torch.int32); graph/dtype.h has no int32,
  // fp32 stands in for its 4 bytes an element
  const VarId permuted_indices =
      t.constant(n + ".experts.permute.permuted_indices", "full", {P}, DType::kFloat32);
  const VarId x = ops.index_rows(n + ".experts.permute.index", stacked, permuted_indices, P);
  t.drop(stacked);
  std::vector<VarId> w1, w2, w3;
  for (const LayerParams::Expert& e : p.experts) {
    w1.push_back(e.gate_w);
    w3.push_back(e.up_w);
    w2.push_back(e.down_w);
  }
  const VarId h1 = grouped_gemm(t, n + ".experts.grouped_mm_w1", x, w1, ff);
  const VarId act = ops.silu(n + ".experts.silu", h1);
  t.drop(h1);
  const VarId h3 = grouped_gemm(t, n + ".experts.grouped_mm_w3", x, w3, ff);
  const VarId h = ops.mul(n + ".experts.mul", act, h3);
  t.drop({act, h3, x});
  const VarId out = grouped_gemm(t, n + ".experts.grouped_mm_w2", h, w2, H);
  t.drop(h);
  // _unpermute: out_unpermuted = out.new_empty(input_shape); out_unpermuted[permuted_indices, :] = out
  const VarId empty = t.constant(n + ".experts.unpermute.new_empty", "empty", {R + 1, H}, t.dtype(out));
  BackwardRule rule;
  rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  const VarId unpermuted =
      t.inplace(n + ".experts.unpermute.index_put_", "index_put_", empty, {permuted_indices, out}, rule);
  t.drop({empty, out, permuted_indices});
  const VarId sliced = t.view(unpermuted, {R, H}, n + ".experts.unpermute.slice");
  t.drop(unpermuted);
  if (!ep) {
    return sliced;
  }
  const VarId back = expert_all_to_all(t, n + ".experts.combine.all_to_all", sliced, A);
  t.drop(sliced);
  return back;
}

// FeedForward.forward (torchtitan/models/moe/moe.py): w2(F.silu(w1(x)) * w3(x)) on the MoE's whole input
// [T, H]. Under TP apply_moe_ep_tp makes w1 / w3 ColwiseParallel and w2 RowwiseParallel(output_layouts=
// Partial()): the rank's ff / tp columns (the weights of tensor_parallel_rank) and a partial [T, H] sum,
// reduced by the MoE's output reduce-scatter.
VarId shared_feed_forward(EmitContext& c, const std::string& n, VarId x, const LayerParams::Expert& w) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const VarId h1 = ops.linear(n + ".w1", x, w.gate_w);
  const VarId act = ops.silu(n + ".silu", h1);
  t.drop(h1);
  const VarId h3 = ops.linear(n + ".w3", x, w.up_w);
  const VarId h = ops.mul(n + ".mul", act, h3);
  t.drop({act, h3});
  const VarId y = ops.linear(n + ".w2", h, w.down_w);
  t.drop(h);
  return y;
}

// torchtitan's deepseek_v3 flavors set score_before_experts=False
// (torchtitan/models/deepseek_v3/__init__.py); MoEArgs' default is True.
bool score_before_experts(const ModelConfig& model) { return model.model_type != "deepseek_v3"; }

}  // namespace

std::int64_t torchtitan_padded_rows(std::int64_t received_rows, std::int64_t local_experts) {
  const std::int64_t a = kTorchtitanTokenGroupAlign;
  return (received_rows + local_experts * a + a - 1) / a * a;  // _round_up(x_padded_per_expert, align)
}

VarId torchtitan_moe(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const MoeConfig& moe = c.model.moe;
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "moe");
  const int tp = c.options.tensor_parallel;
  // PrepareModuleInputOutput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)): the
  // sequence-parallel slice [b, s/tp, H] all-gathered to [b, s, H]
  const VarId in = tp > 1 ? sequence_all_gather(t, n + ".prepare_input", x, tp) : x;
  const Shape in_shape = t.shape(in);
  const std::int64_t H = c.model.d_model, T = in_shape[0] * in_shape[1], k = moe.top_k;
  // ReordererSequenceParallel when the ep mesh borrows the tp ranks (ep > 1, etp = 1): each tp rank
  // reorders, dispatches and runs the experts on its T / tp of the tokens
  const bool borrowed = tp > 1 && moe.expert_parallel > 1 && moe.expert_tensor_parallel == 1;
  const std::int64_t routed_tokens = borrowed ? T / tp : T;
  const std::int64_t A = routed_rows(T, k), A_local = routed_rows(routed_tokens, k);
  const ExpertLoad load = busiest_rank_load(routed_tokens, moe, c.options.moe);
  const bool before = score_before_experts(c.model);

  const VarId flat = t.view(in, {T, H}, n + ".view");
  if (in != x) {
    t.drop(in);
  }
  const Routing r = route(c, n, flat, p.router_w, T, routed_tokens);
  const VarId token_indices =
      t.constant(n + ".token_indices_experts_sorted_floordiv", "floor_divide", {A_local}, DType::kInt64);
  VarId routed = ops.index(n + ".routed_input", flat, token_indices);
  t.drop(token_indices);
  if (before) {  // (routed_input.to(float32) * top_scores_experts_sorted.reshape(-1, 1)).to(x.dtype)
    const VarId routed32 = ops.to(n + ".routed_input.to_float32", routed, DType::kFloat32);
    t.drop(routed);
    const VarId col = t.view(r.sorted_scores, {A_local, 1}, n + ".top_scores_experts_sorted.reshape");
    const VarId scaled = ops.mul(n + ".routed_input.mul_scores", routed32, col);
    t.drop({routed32, col});
    routed = ops.to(n + ".routed_input.to_dtype", scaled, t.dtype(x));
    t.drop(scaled);
  }
  const VarId routed_output = grouped_experts(c, n, layer, routed, load);
  t.drop(routed);
  VarId shared = kNoVar;
  if (moe.shared_expert_d_ff > 0) {  // FeedForward(dim, hidden_dim x num_shared_experts)
    shared = shared_feed_forward(c, n + ".shared_experts", flat, p.shared_expert);
  }
  const VarId zeros = t.constant(n + ".routed_output_unsorted", "zeros", {A, H}, t.dtype(routed_output));
  BackwardRule rule;
  rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  const VarId unsorted = t.inplace(n + ".routed_output_unsorted.index_put_", "index_put_", zeros,
                                   {r.sorted_indices, routed_output}, rule);
  t.drop({zeros, routed_output});
  const VarId per_token = t.view(unsorted, {T, k, H}, n + ".routed_output_unsorted.reshape");
  t.drop(unsorted);
  VarId out_experts = kNoVar;
  if (before) {  // .sum(dim=1): its backward expands the gradient (a view)
    OpCall sum;
    sum.name = n + ".out_experts.sum";
    sum.kind = "sum";
    sum.inputs = {per_token};
    sum.outputs = {OutputSpec{"", {T, H}, t.dtype(per_token)}};
    sum.backward.grads = {GradRule{Kind::kPassThrough}};
    out_experts = t.op1(sum);
  } else {  // torch.bmm(top_scores.reshape(-1, 1, k), routed_output_unsorted.float()).to(x.dtype)
    const VarId per_token32 = ops.to(n + ".routed_output_unsorted.float", per_token, DType::kFloat32);
    const VarId scores3 = t.view(r.top_scores, {T, 1, k}, n + ".top_scores.reshape");
    const VarId bmm = ops.matmul(n + ".out_experts.bmm", scores3, per_token32, {T, 1, H});
    t.drop({per_token32, scores3});
    const VarId bmm2 = t.view(bmm, {T, H}, n + ".out_experts.squeeze");
    t.drop(bmm);
    out_experts = ops.to(n + ".out_experts.to_dtype", bmm2, t.dtype(x));
    t.drop(bmm2);
  }
  t.drop(per_token);
  VarId output = out_experts;
  if (shared != kNoVar) {
    output = ops.add(n + ".add_shared_experts", shared, out_experts);
    t.drop({shared, out_experts});
  }
  VarId result = t.view(output, in_shape, n + ".reshape");
  t.drop({output, flat, r.scores, r.top_scores, r.sorted_indices, r.sorted_scores});
  if (tp > 1) {  // output_layouts=(Partial(),) -> desired_output_layouts=(Shard(1),): reduce-scatter
    const VarId shard = ops.reduce_scatter_sequence(n + ".prepare_output.reduce_scatter", result, tp);
    t.drop(result);
    result = shard;
  }
  return result;
}

}  // namespace vramsim
