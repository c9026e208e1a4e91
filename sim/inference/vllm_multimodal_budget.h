// vLLM V1's multimodal profile run: the encoder budget (vllm/multimodal/encoder_budget.py MultiModalBudget,
// vllm/v1/core/encoder_cache_manager.py compute_mm_encoder_budget) and what GPUModelRunner.profile_run holds
// when a model takes images (vllm/v1/worker/gpu_model_runner.py at 000fc94b, the same in 0.11 to 0.19):
//
//   encoder_compute_budget = max(max_num_encoder_input_tokens, max_tokens_per_item)
//   encoder_cache_size     = max(encoder_cache_size, max_tokens_per_item)      both scheduler fields are
//                                                                             max_num_batched_tokens
//   encoder budget         = min(compute budget, cache size)                   get_encoder_budget
//   items per prompt       = max(1, min(limit_mm_per_prompt, max_model_len // max_tokens_per_item))
//   items per batch        = max(1, min(budget // max_tokens_per_item,
//                                       max_num_seqs x items per prompt))      _get_max_items (chunked
//                                                                             prefill: no token cap)
//
// profile_run logs "Encoder cache will be initialized with a budget of B tokens, and profiled with N image
// items of the maximum feature size", builds the dummy batch (_get_mm_dummy_batch: N copies of the one
// dummy item, pixel_values cast to the model dtype by InputProcessingContext.call_hf_processor), runs the
// vision tower and projector over all N at once (embed_multimodal), keeps every item's output in
// encoder_cache, and only then runs the language model's _dummy_run(max_num_batched_tokens) and the sampler;
// the dummy batch is a local of profile_run, alive to its end. So its peak over the weights is the larger of
//
//   the encoder pass     pixel_values + the tower's widest layer over N x tokens_per_item rows
//   the language model   pixel_values + the kept encoder outputs + max(dummy forward, sampler)
//
// The tower's layer is vLLM's CLIPEncoderLayer / SiglipEncoderLayer / Qwen2VisionBlock (clip.py, siglip.py,
// qwen2_vl.py): residual and normed input beside qkv_proj's fused output and the attention's (7 h), or the
// MLP's fc1 output and its activation (out of place: get_act_fn) beside both (2 h + 2 I); a gated MLP
// (Qwen2.5-VL's gate_up_proj, SiluAndMul) holds 2 h + 2 I + I. Attention runs in a fused kernel (FLASH_ATTN /
// xformers / SDPA's flash path): no tokens x tokens scores. All sizes bytes of one GPU.
//
// Under tensor parallelism (mm_encoder_tp_mode "weights": vllm_vision_tensor_parallel.h) every rank runs all
// N items through its slice of the tower: qkv_proj's output and the attention's are 3 h / tp and h / tp
// (heads / tp), fc1's, the activation's and gate_up_proj's I / tp, 2 I / tp; the row-parallel out_proj and
// fc2 produce full-width partial sums that tensor_model_parallel_all_reduce reduces out of place
// (PyNcclCommunicator.all_reduce's torch.empty_like output; the custom all-reduce's too), so the partial
// sum and the reduced output, h each, are both alive when it returns. The widest point is then the largest
// of attention 2 h + 4 h / tp + 2 h, the MLP's up half 2 h + 2 I / tp (gated 3 I / tp) and its down half
// 2 h + I / tp + 2 h (at TP 1 one h each: 7 h, and 3 h + I, never above 2 h + 2 I for a tower with I >= h).
// pixel_values and the kept encoder outputs are whole on every rank: the projector's linear_2 / the merger's
// mlp.2 are row-parallel and all-reduced, so each rank's encoder_cache holds text_hidden columns.
//
// Under mm_encoder_tp_mode "data" (Qwen2.5-VL: vllm/model_executor/models/vision.py
// run_dp_sharded_mrope_vision_model) the tower is whole on every rank (disable_tp) and the items are split:
// get_load_balance_assignment gives each item to the least-loaded rank, so N equal items leave ceil(N / tp)
// on the busiest rank, which sets the KV cache (the engine takes the smallest). That rank copies its items'
// pixel_values (torch.cat), runs them through the whole tower (TP 1's columns), and all-gathers the
// outputs, each rank's padded to the busiest rank's length: the kept outputs are tp x ceil(N / tp) items'
// (the returned embeddings are views of the gathered tensor).
#pragma once

#include <cstdint>

#include "sim/core/types.h"

namespace vramsim {

// vLLM's default limit_mm_per_prompt for a modality not named (MultiModalConfig.get_limit_per_prompt).
inline constexpr std::int64_t kVllmDefaultMmLimit = 999;

struct VllmMmBudgetInputs {
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_model_len = 0;
  std::int64_t max_num_seqs = 0;
  std::int64_t max_tokens_per_item = 0;  // get_mm_max_tokens_per_item of the modality profiled (image)
  std::int64_t mm_limit = kVllmDefaultMmLimit;
};
struct VllmMmBudget {
  std::int64_t encoder_compute_budget = 0;
  std::int64_t encoder_cache_size = 0;
  std::int64_t encoder_budget = 0;  // "a budget of B tokens"
  std::int64_t max_items_per_prompt = 0;
  std::int64_t max_items_per_batch = 0;  // "profiled with N image items"
};
VllmMmBudget vllm_mm_budget(const VllmMmBudgetInputs& in);

// The encoder pass over the dummy batch, one item repeated `items` times.
struct VllmEncoderShapes {
  std::int64_t items = 0;
  std::int64_t tower_tokens_per_item = 0;  // rows one item is in the tower (patches, + CLS for CLIP)
  std::int64_t tower_hidden = 0;
  std::int64_t tower_intermediate = 0;
  bool gated_mlp = false;                    // gate_up_proj + SiluAndMul (Qwen2.5-VL)
  std::int64_t pixel_elements_per_item = 0;  // pixel_values of one item
  std::int64_t embeds_per_item = 0;          // rows of one item's encoder output (the kept embeddings)
  std::int64_t text_hidden = 0;              // the language model's hidden size (the output's columns)
  Bytes dtype_bytes = 2;                     // the model dtype
  int tp = 1;  // tensor-parallel ranks sharing the tower's layers (it divides the heads and intermediate)
  bool tower_data_parallel = false;  // mm_encoder_tp_mode "data": the tower whole, the items split by tp
};
struct VllmEncoderProfile {
  std::int64_t items_on_rank = 0;      // items this rank runs through the tower (all, or its data share)
  Bytes pixel_values_bytes = 0;        // the dummy batch, alive through profile_run
  Bytes local_pixel_values_bytes = 0;  // data: the rank's items' pixel_values, copied
  Bytes tower_layer_bytes = 0;         // the tower's widest layer over all items
  Bytes encoder_outputs_bytes = 0;     // encoder_cache's entries, kept through the language model's run
  Bytes encoder_pass_bytes = 0;        // pixel_values + local_pixel_values_bytes + tower_layer_bytes
  Bytes kept_bytes = 0;                // pixel_values + encoder_outputs_bytes, under the language model's run
};
// Throws InputError when a size overflows 64 bits. SIM_ASSERTs that tp divides tower_hidden and
// tower_intermediate (the caller refuses the degrees vLLM refuses).
VllmEncoderProfile vllm_encoder_profile(const VllmEncoderShapes& s);

}  // namespace vramsim
