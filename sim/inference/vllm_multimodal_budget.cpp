#include "sim/inference/vllm_multimodal_budget.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/core/checked_size.h"

namespace vramsim {
namespace {

// Sizes from user-typed shapes: a product or sum that would wrap is an input error, never a wrong number.
Bytes mul(Bytes a, Bytes b) { return size_mul(a, b, "vLLM multimodal profile"); }
Bytes add(Bytes a, Bytes b) { return size_add(a, b, "vLLM multimodal profile"); }
Bytes u(std::int64_t v) { return static_cast<Bytes>(v); }

}  // namespace

VllmMmBudget vllm_mm_budget(const VllmMmBudgetInputs& in) {
  SIM_ASSERT(in.max_tokens_per_item > 0 && in.max_num_batched_tokens > 0 && in.max_model_len > 0);
  VllmMmBudget b;
  // compute_mm_encoder_budget: SchedulerConfig sets max_num_encoder_input_tokens and encoder_cache_size to
  // max_num_batched_tokens; one item larger than that still gets its own budget.
  b.encoder_compute_budget = std::max(in.max_num_batched_tokens, in.max_tokens_per_item);
  b.encoder_cache_size = std::max(in.max_num_batched_tokens, in.max_tokens_per_item);
  b.encoder_budget = std::min(b.encoder_compute_budget, b.encoder_cache_size);
  // MultiModalBudget._get_max_items (V1 always chunks prefills: max_num_reqs is not capped by tokens)
  const std::int64_t encoder_items = b.encoder_budget / in.max_tokens_per_item;
  b.max_items_per_prompt =
      std::max<std::int64_t>(1, std::min(in.mm_limit, in.max_model_len / in.max_tokens_per_item));
  const std::int64_t decoder_items = in.max_num_seqs * b.max_items_per_prompt;
  b.max_items_per_batch = std::max<std::int64_t>(1, std::min(encoder_items, decoder_items));
  return b;
}

VllmEncoderProfile vllm_encoder_profile(const VllmEncoderShapes& s) {
  SIM_ASSERT(s.tp >= 1);
  SIM_ASSERT(s.tower_data_parallel || (s.tower_hidden % s.tp == 0 && s.tower_intermediate % s.tp == 0));
  const Bytes a = s.dtype_bytes;
  const Bytes n = u(s.items);
  // "data": the busiest rank's ceil(N / tp) items through the whole tower; "weights": all N through a slice
  const Bytes local = s.tower_data_parallel ? (n + u(s.tp) - 1) / u(s.tp) : n;
  const Bytes rows = mul(local, u(s.tower_tokens_per_item));
  const Bytes h = u(s.tower_hidden);
  const Bytes i = u(s.tower_intermediate);
  const Bytes tp = s.tower_data_parallel ? 1 : u(s.tp);
  // The encoder layer's widest point (rows x columns of the model dtype): attention holds the residual, the
  // normed input, qkv_proj's [rows, 3 h / tp] (q, k, v are views of it), the attention output (h / tp) and
  // out_proj's; the MLP the residual, the normed input, fc1's output and the activation's (the caller's
  // normed input is alive until mlp() returns); the gated MLP gate_up_proj's 2 I / tp beside SiluAndMul's
  // I / tp; fc2 its full-width output beside the activation. At tp > 1 a row-parallel output is there twice:
  // the partial sum and the all-reduce's out-of-place result.
  const Bytes row_output = tp > 1 ? 2 * h : h;
  const Bytes attention_columns = 2 * h + 4 * h / tp + row_output;
  const Bytes mlp_up_columns = 2 * h + (s.gated_mlp ? 3 : 2) * i / tp;
  const Bytes mlp_down_columns = 2 * h + i / tp + row_output;
  const Bytes mlp_columns = std::max(mlp_up_columns, mlp_down_columns);
  VllmEncoderProfile p;
  p.items_on_rank = static_cast<std::int64_t>(local);
  p.pixel_values_bytes = mul(mul(n, u(s.pixel_elements_per_item)), a);
  p.local_pixel_values_bytes = s.tower_data_parallel ? mul(mul(local, u(s.pixel_elements_per_item)), a) : 0;
  p.tower_layer_bytes = mul(mul(rows, std::max(attention_columns, mlp_columns)), a);
  // data: the all-gather's output, every rank's share padded to the busiest rank's
  const Bytes kept_items = s.tower_data_parallel ? mul(u(s.tp), local) : n;
  p.encoder_outputs_bytes = mul(mul(mul(kept_items, u(s.embeds_per_item)), u(s.text_hidden)), a);
  p.encoder_pass_bytes = add(add(p.pixel_values_bytes, p.local_pixel_values_bytes), p.tower_layer_bytes);
  p.kept_bytes = add(p.pixel_values_bytes, p.encoder_outputs_bytes);
  return p;
}

}  // namespace vramsim
