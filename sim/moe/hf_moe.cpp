// Hugging Face transformers' sparse mixture-of-experts blocks, statement by statement:
// MixtralSparseMoeBlock.forward (modeling_mixtral.py) and Qwen2MoeSparseMoeBlock.forward
// (modeling_qwen2_moe.py), which differ in the top-k normalisation (Mixtral always, Qwen2-MoE with
// norm_topk_prob) and Qwen2-MoE's sigmoid-gated shared expert; and DeepseekV3MoE (deepseek_v3_moe below:
// an fp32 router and accumulator, fp32 weighted expert outputs).
//
//   hidden_states = hidden_states.view(-1, hidden_dim)
//   router_logits = self.gate(hidden_states)
//   routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
//   routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
//   routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
//   routing_weights = routing_weights.to(hidden_states.dtype)
//   final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), ...)
//   expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
//   for expert_idx in ...:
//       idx, top_x = torch.where(expert_mask[expert_idx])
//       current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
//       current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
//       final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
//
// How many rows each expert receives depends on the data; the simulation follows the routing model of
// expert_parallel.h (--moe-imbalance: expert 0 the busiest, the others even; 1: an even router). The loop
// variables (idx, top_x, current_state, current_hidden_states) hold the previous expert's tensors until the
// next iteration rebinds them, and the last expert's until the block returns.
#include <fmt/format.h>

#include "sim/models/transformer_parts.h"
#include "sim/parallel/expert_parallel.h"

namespace vramsim {
namespace {

// One expert of a fused (three-dimensional) expert parameter, as GptOssExperts.forward writes its training
// path: W[expert_idx] is advanced indexing (a copy of the expert's slice; IndexBackward writes the gradient
// into zeros of the whole parameter), gate_up = x @ W + b, gate / up the even and odd columns,
// glu = gate * sigmoid(gate * alpha), (up + 1) * glu, then @ down_proj[expert_idx] + its bias. The clamps
// are left out (element-wise, no saved tensor of their own in the simulation); Llama 4 (no biases) runs the
// same loop here although its Llama4TextExperts multiplies every expert with every token (README).
VarId fused_expert(EmitContext& c, const std::string& en, VarId x, const LayerParams& p, VarId expert_hit) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const std::int64_t d = c.model.d_model, ff = c.model.moe.expert_d_ff;
  const std::int64_t rows = t.shape(x)[0];
  const VarId idx = t.view(expert_hit, {1}, en + ".expert_idx");
  const auto slice = [&](const char* what, VarId w) {
    return w == kNoVar ? kNoVar : ops.index_rows(en + "." + what + "[expert_idx]", w, idx, 1);
  };
  const VarId w_gate_up = slice("gate_up_proj", p.experts_gate_up_w);
  const VarId b_gate_up = slice("gate_up_proj_bias", p.experts_gate_up_b);
  const VarId gate_up_w2 = t.view(w_gate_up, {d, 2 * ff}, en + ".gate_up_proj_2d");
  const VarId gate_up_b1 =
      b_gate_up == kNoVar ? kNoVar : t.view(b_gate_up, {2 * ff}, en + ".gate_up_bias_1d");
  const VarId gate_up = ops.linear(en + ".gate_up", x, gate_up_w2, gate_up_b1);
  t.drop({gate_up_w2, w_gate_up});
  if (b_gate_up != kNoVar) {
    t.drop({gate_up_b1, b_gate_up});
  }
  const VarId gate = t.view(gate_up, {rows, ff}, en + ".gate", GradRule{GradRule::Kind::kAlloc});
  const VarId up = t.view(gate_up, {rows, ff}, en + ".up", GradRule{GradRule::Kind::kAlloc});
  t.drop(gate_up);
  VarId glu;
  VarId up1;
  if (c.model.moe.expert_bias) {  // gpt-oss: gate * sigmoid(gate * alpha), (up + 1)
    const VarId scaled = ops.scale(en + ".gate_alpha", gate);
    const VarId sig = ops.sigmoid(en + ".sigmoid", scaled);
    t.drop(scaled);
    glu = ops.mul(en + ".glu", gate, sig);
    t.drop(sig);
    up1 = ops.add_scalar(en + ".up_plus_one", up);
  } else {  // Llama 4: act_fn(gate) * up
    glu = ops.silu(en + ".silu", gate);
    up1 = up;
    t.hold(up1);
  }
  t.drop({gate, up});
  const VarId gated = ops.mul(en + ".gated_output", up1, glu);
  t.drop({up1, glu});
  const VarId w_down = slice("down_proj", p.experts_down_w);
  const VarId b_down = slice("down_proj_bias", p.experts_down_b);
  const VarId down_w2 = t.view(w_down, {ff, d}, en + ".down_proj_2d");
  const VarId down_b1 = b_down == kNoVar ? kNoVar : t.view(b_down, {d}, en + ".down_bias_1d");
  const VarId out = ops.linear(en + ".down", gated, down_w2, down_b1);
  t.drop({gated, down_w2, w_down, idx});
  if (b_down != kNoVar) {
    t.drop({down_b1, b_down});
  }
  return out;
}

// A gather of `rows` elements of x [T, k] by an index (topk_weights[token_indices, weight_indices],
// scores.gather(1, topk_indices)): saves the index; the backward scatters into zeros of x.
VarId gather_rows(EagerTape& t, const std::string& name, VarId x, VarId index, const Shape& out) {
  OpCall call;
  call.name = name;
  call.kind = "index";
  call.inputs = {x, index};
  call.outputs = {OutputSpec{"", out, t.dtype(x)}};
  call.saved.inputs = {1};
  call.backward.grads = {GradRule{GradRule::Kind::kAlloc}, GradRule{GradRule::Kind::kNone}};
  return t.op1(call);
}

// DeepseekV3MoE.forward (modeling_deepseek_v3.py): DeepseekV3TopkRouter in fp32, then moe()'s loop with an
// fp32 accumulator, then the shared experts on the layer's input.
//   router_logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
//   scores = router_logits.sigmoid()
//   topk_indices = self.get_topk_indices(scores)         # no_grad: + e_score_correction_bias, group top-k
//   topk_weights = scores.gather(1, topk_indices)
//   if self.norm_topk_prob: topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20
//   topk_weights = topk_weights * self.routed_scaling_factor
//   final_hidden_states = torch.zeros_like(hidden_states, dtype=topk_weights.dtype)     # fp32
//   for expert_idx ...: token_indices, weight_indices = torch.where(mask)
//       expert_weights = topk_weights[token_indices, weight_indices]
//       expert_output = expert(hidden_states[token_indices])
//       weighted_output = expert_output * expert_weights.unsqueeze(-1)                   # fp32
//       final_hidden_states.index_add_(0, token_indices, weighted_output)
//   return final_hidden_states.type(hidden_states.dtype); then + self.shared_experts(residuals)
VarId deepseek_v3_moe(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const MoeConfig& moe = c.model.moe;
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "mlp");
  const std::int64_t d = c.model.d_model, tokens = c.options.batch * c.options.seq, E = moe.n_experts;
  const DType dtype = t.dtype(x);
  const VarId flat = t.view(x, {tokens, d}, n + ".view");
  const VarId x32 = ops.to(n + ".gate.hidden_states_fp32", flat, DType::kFloat32);
  const VarId w32 = ops.to(n + ".gate.weight_fp32", p.router_w, DType::kFloat32);
  const VarId logits = ops.linear(n + ".gate.router_logits", x32, w32);
  t.drop({x32, w32});
  const VarId scores = ops.sigmoid(n + ".gate.sigmoid", logits);
  t.drop(logits);
  // get_topk_indices under no_grad: scores_for_choice [T, E], its group-masked copy, the top-k indices
  const VarId choice = t.constant(n + ".gate.scores_for_choice", "add", {tokens, E}, DType::kFloat32);
  const VarId masked = t.constant(n + ".gate.masked_fill", "masked_fill", {tokens, E}, DType::kFloat32);
  t.drop(choice);
  const VarId topk_indices = t.constant(n + ".gate.topk_indices", "topk", {tokens, moe.top_k}, DType::kInt64);
  t.drop(masked);
  VarId weights = gather_rows(t, n + ".gate.topk_weights", scores, topk_indices, {tokens, moe.top_k});
  t.drop(scores);
  if (moe.normalize_top_k) {
    const VarId sum = ops.sum_last(n + ".gate.topk_sum", weights);
    const VarId denominator = ops.add_scalar(n + ".gate.denominator", sum);
    t.drop(sum);
    const VarId normalised = ops.div_inplace(n + ".gate.topk_normalise", weights, denominator);
    t.drop({denominator, weights});
    weights = normalised;
  }
  const VarId scaled = ops.scale(n + ".gate.routed_scaling_factor", weights);
  t.drop(weights);
  VarId final_states = t.constant(n + ".final_hidden_states", "zeros_like", {tokens, d}, DType::kFloat32);
  const VarId expert_mask =
      t.constant(n + ".expert_mask", "one_hot", {tokens, moe.top_k, E}, DType::kInt64);  // .permute: a view
  const std::vector<std::int64_t> routed =
      routed_rows_per_expert(tokens, moe.top_k, E, c.options.moe.imbalance);
  VarId where = kNoVar, expert_input = kNoVar, weighted = kNoVar;
  const auto rebind = [&t](VarId& var, VarId value) {
    if (var != kNoVar) {
      t.drop(var);
    }
    var = value;
  };
  // The experts this rank holds: all E, or under vLLM's expert parallelism (vllm_expert_parallel.h) its
  // local ones, the first ranks' (expert_map marks the others -1 and the kernel skips their rows).
  for (std::int64_t e = 0; e < moe.local_experts(); ++e) {
    const std::int64_t rows = routed[static_cast<std::size_t>(e)];
    if (rows == 0) {
      continue;
    }
    const std::string en = fmt::format("{}.experts.{}", n, e);
    rebind(where, t.constant(en + ".where", "nonzero", {rows, 2}, DType::kInt64));
    const VarId expert_weights = gather_rows(t, en + ".expert_weights", scaled, where, {rows});
    rebind(expert_input, ops.index_rows(en + ".expert_input", flat, where, rows));
    const VarId expert_output = hf_gated_mlp(c, en, expert_input, p.experts[static_cast<std::size_t>(e)]);
    const VarId weight_col = t.view(expert_weights, {rows, 1}, en + ".expert_weights_unsqueeze");
    t.drop(expert_weights);
    rebind(weighted, ops.mul(en + ".weighted_output", expert_output, weight_col));  // bf16 x fp32: fp32
    t.drop({expert_output, weight_col});
    const VarId added = ops.index_add_rows(en + ".index_add", final_states, where, weighted);
    t.drop(final_states);
    final_states = added;
  }
  const VarId routed_out = ops.to(n + ".moe_to_dtype", final_states, dtype);
  t.drop({final_states, expert_mask, topk_indices, scaled});
  for (VarId v : {where, expert_input, weighted}) {
    if (v != kNoVar) {
      t.drop(v);
    }
  }
  const VarId shared = hf_gated_mlp(c, n + ".shared_experts", x, p.shared_expert);
  const VarId routed_view = t.view(routed_out, {c.options.batch, c.options.seq, d}, n + ".moe_view");
  t.drop(routed_out);
  const VarId out = ops.add(n + ".add_shared_experts", routed_view, shared);
  t.drop({routed_view, shared, flat});
  return out;
}

}  // namespace

VarId hf_sparse_moe(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const MoeConfig& moe = c.model.moe;
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "moe");
  const std::int64_t d = c.model.d_model;
  const std::int64_t tokens = c.options.batch * c.options.seq;
  const DType dtype = t.dtype(x);
  if (c.model.model_type == "deepseek_v3") {
    return deepseek_v3_moe(c, layer, x);
  }

  const VarId flat = t.view(x, {tokens, d}, n + ".view");
  const VarId router_logits = ops.linear(n + ".gate", flat, p.router_w, p.router_b);
  const VarId probs = ops.softmax_last(n + ".routing_softmax", router_logits, DType::kFloat32);
  auto [weights, selected] = ops.topk_last(n + ".topk", probs, moe.top_k);
  t.drop(probs);
  if (moe.normalize_top_k) {
    const VarId sum = ops.sum_last(n + ".topk_sum", weights);
    const VarId normalised = ops.div_inplace(n + ".topk_normalise", weights, sum);
    t.drop({sum, weights});
    weights = normalised;
  }
  const VarId routing = ops.to(n + ".routing_to_dtype", weights, dtype);
  t.drop(weights);
  VarId final_states = t.constant(n + ".final_hidden_states", "zeros", {tokens, d}, dtype);
  const VarId expert_mask = t.constant(n + ".expert_mask", "one_hot", {tokens, moe.top_k, moe.n_experts},
                                       DType::kInt64);  // .permute(2, 1, 0): a view

  // The loop's Python variables: each rebinding frees the previous iteration's tensor (unless saved).
  VarId where = kNoVar, current_state = kNoVar, current_out = kNoVar;
  const auto rebind = [&t](VarId& var, VarId value) {
    const VarId old = var;
    var = value;
    if (old != kNoVar) {
      t.drop(old);
    }
  };
  // Fused experts (GptOssExperts' training path): expert_hit = (...).nonzero(), one int64 row per expert hit.
  const VarId expert_hit = moe.fused_experts
                               ? t.constant(n + ".expert_hit", "nonzero", {moe.n_experts, 1}, DType::kInt64)
                               : kNoVar;
  const std::vector<std::int64_t> routed =
      routed_rows_per_expert(tokens, moe.top_k, moe.n_experts, c.options.moe.imbalance);
  for (std::int64_t e = 0; e < moe.local_experts(); ++e) {  // as in deepseek_v3_moe: this rank's experts
    const std::int64_t rows = routed[static_cast<std::size_t>(e)];
    if (rows == 0) {
      continue;  // no token chose it: torch.where finds nothing and the expert does not run
    }
    const std::string en = fmt::format("{}.experts.{}", n, e);
    // idx, top_x = torch.where(expert_mask[expert_idx]): one (rows, 2) int64 nonzero result, unbound
    rebind(where, t.constant(en + ".where", "nonzero", {rows, 2}, DType::kInt64));
    rebind(current_state, ops.index_rows(en + ".current_state", flat, where, rows));
    const VarId expert_out = moe.fused_experts
                                 ? fused_expert(c, en, current_state, p, expert_hit)
                                 : hf_gated_mlp(c, en, current_state, p.experts[static_cast<std::size_t>(e)]);
    const VarId weight = ops.index_rows(en + ".routing_weight", routing, where, rows);  // [top_x, idx, None]
    const VarId weight_col = t.view(weight, {rows, 1}, en + ".routing_weight_col");
    t.drop(weight);
    rebind(current_out, ops.mul(en + ".weighted", expert_out, weight_col));
    t.drop({expert_out, weight_col});
    const VarId converted = ops.to(en + ".to_dtype", current_out, dtype);
    const VarId added = ops.index_add_rows(en + ".index_add", final_states, where, converted);
    t.drop({converted, final_states});
    final_states = added;
  }
  if (moe.shared_expert_d_ff > 0) {
    // shared_expert_output = self.shared_expert(hidden_states)
    // shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
    // final_hidden_states = final_hidden_states + shared_expert_output
    const VarId shared = hf_gated_mlp(c, n + ".shared_expert", flat, p.shared_expert);
    if (!moe.shared_expert_gated) {  // DeepSeek-V3, Llama 4: added as it is
      const VarId sum = ops.add(n + ".add_shared_expert", final_states, shared);
      t.drop({shared, final_states});
      final_states = sum;
    }
  }
  if (moe.shared_expert_d_ff > 0 && moe.shared_expert_gated) {
    const VarId shared = hf_gated_mlp(c, n + ".shared_expert", flat, p.shared_expert);
    const VarId gate_logit = ops.linear(n + ".shared_expert_gate", flat, p.shared_expert_gate_w);
    const VarId gate = ops.sigmoid(n + ".shared_expert_sigmoid", gate_logit);
    t.drop(gate_logit);
    const VarId gated = ops.mul(n + ".shared_expert_gated", gate, shared);
    t.drop({gate, shared});
    const VarId sum = ops.add(n + ".add_shared_expert", final_states, gated);
    t.drop({gated, final_states});
    final_states = sum;
  }
  const VarId out = t.view(final_states, {c.options.batch, c.options.seq, d}, n + ".reshape");
  // The block returns (final_hidden_states, router_logits): its locals go; the decoder layer drops
  // router_logits (only collected with output_router_logits=True).
  t.drop({final_states, flat, router_logits, selected, routing, expert_mask});
  if (expert_hit != kNoVar) {
    t.drop(expert_hit);
  }
  for (VarId v : {where, current_state, current_out}) {
    if (v != kNoVar) {
      t.drop(v);
    }
  }
  return out;
}

}  // namespace vramsim
