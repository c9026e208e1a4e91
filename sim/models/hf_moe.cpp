// Hugging Face transformers' sparse mixture-of-experts blocks, statement by statement:
// MixtralSparseMoeBlock.forward (modeling_mixtral.py) and Qwen2MoeSparseMoeBlock.forward
// (modeling_qwen2_moe.py), which differ in the top-k normalisation (Mixtral always, Qwen2-MoE with
// norm_topk_prob) and Qwen2-MoE's sigmoid-gated shared expert.
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
// How many rows each expert receives depends on the data; the simulation routes evenly (MoeConfig). The loop
// variables (idx, top_x, current_state, current_hidden_states) hold the previous expert's tensors until the
// next iteration rebinds them, and the last expert's until the block returns.
#include <fmt/format.h>

#include "sim/models/transformer_parts.h"

namespace vramsim {
namespace {

// Rows routed to expert e of n when `assignments` (tokens x top_k) are spread evenly.
std::int64_t expert_rows(std::int64_t assignments, std::int64_t n, std::int64_t e) {
  return assignments / n + (e < assignments % n ? 1 : 0);
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

  const VarId flat = t.view(x, {tokens, d}, n + ".view");
  const VarId router_logits = ops.linear(n + ".gate", flat, p.router_w);
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
  for (std::int64_t e = 0; e < moe.n_experts; ++e) {
    const std::int64_t rows = expert_rows(tokens * moe.top_k, moe.n_experts, e);
    if (rows == 0) {
      continue;  // no token chose it: torch.where finds nothing and the expert does not run
    }
    const std::string en = fmt::format("{}.experts.{}", n, e);
    // idx, top_x = torch.where(expert_mask[expert_idx]): one (rows, 2) int64 nonzero result, unbound
    rebind(where, t.constant(en + ".where", "nonzero", {rows, 2}, DType::kInt64));
    rebind(current_state, ops.index_rows(en + ".current_state", flat, where, rows));
    const VarId expert_out = hf_gated_mlp(c, en, current_state, p.experts[static_cast<std::size_t>(e)]);
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
  for (VarId v : {where, current_state, current_out}) {
    if (v != kNoVar) {
      t.drop(v);
    }
  }
  return out;
}

}  // namespace vramsim
