#include "sim/serving/vllm_v1_sizing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/inference/vllm_fused_moe_workspace.h"
#include "sim/inference/vllm_kv_cache_groups.h"
#include "sim/inference/vllm_lora.h"
#include "sim/inference/vllm_multimodal_budget.h"
#include "sim/inference/vllm_pipeline_stages.h"
#include "sim/inference/vllm_v1_startup.h"
#include "sim/inference/vllm_vision_tensor_parallel.h"
#include "sim/inference/vllm_weight_formats.h"
#include "sim/serving/non_torch_memory.h"
#include "sim/vision/llava_next_anyres.h"
#include "sim/vision/qwen2_vl_vision.h"
#include "sim/vision/vision_tower.h"

namespace vramsim {
namespace {

using Paged = Prediction::Generation::Paged;

// CacheConfig.cache_dtype: "auto" is the model's dtype; every fp8 variant is one byte (torch.uint8 storage).
Bytes kv_dtype_bytes(const std::string& kv_cache_dtype, Bytes model_dtype_bytes) {
  return kv_cache_dtype == "auto" ? model_dtype_bytes : 1;
}

// GPUModelRunner.load_model's "Model loading took": the torch memory the rank's model holds after loading.
// Each parameter of the rank in the model dtype, except the decoder layers' linear weights under
// --quantization, which take their format's bytes (vllm_weight_formats.h). vLLM pads the vocabulary to 64
// rows, not Megatron's 128 x tp the rank model has. RoPE models add get_rope's cos_sin_cache, [max_position,
// rotary_dim] in the model dtype, shared by the layers. Which of the parameters outside the decoder layers a
// pipeline stage holds (vllm_pipeline_stages.h): the vocabulary tables (the embedding on the first stage, and
// on the last when the head is tied to it), position embeddings on the first, everything else (final norm,
// lm_head) on the last.
bool is_vocab_table(const std::string& name) {
  return name.find("embed_tokens") != std::string::npos ||
         name.find("word_embeddings") != std::string::npos || name.find("wte") != std::string::npos;
}
bool stage_holds(const ParameterShape& s, const VllmPipelineStage& st, bool tied) {
  if (s.layer >= 0) {
    return s.layer >= st.start_layer && s.layer < st.end_layer;
  }
  if (is_vocab_table(s.name)) {
    return st.first || (tied && st.last);
  }
  if (s.name.find("wpe") != std::string::npos) {
    return st.first;
  }
  return st.last;
}

Bytes weights_per_rank(const PredictRequest& r, Bytes dtype_bytes, const std::string& quantization,
                       const VllmPipelineStage& stage) {
  const ModelConfig& m = r.model;
  Bytes bytes = 0;
  std::int64_t tables = 0;  // vocabulary tables on this stage (embedding, untied lm_head)
  for (const ParameterShape& s : m.parameter_shapes()) {
    if (!stage_holds(s, stage, m.tied_embeddings)) {
      continue;
    }
    tables += s.layer < 0 && (is_vocab_table(s.name) || s.name == "lm_head.weight") ? 1 : 0;
    const auto n = static_cast<Bytes>(s.numel());
    bytes += vllm_quantizes(s) ? vllm_linear_weight_bytes(s, quantization, dtype_bytes, r.tensor_parallel)
                               : n * dtype_bytes;
  }
  const std::int64_t rows = vllm_vocab_rows_per_rank(r.vllm.vocab_size, r.tensor_parallel);
  const std::int64_t delta_rows = (rows - m.vocab_size) * tables;  // may be negative
  bytes = static_cast<Bytes>(static_cast<std::int64_t>(bytes) +
                             delta_rows * m.d_model * static_cast<std::int64_t>(dtype_bytes));
  if (m.family == ModelFamily::kLlama && m.max_positions > 0) {
    const std::int64_t rotary_dim = m.mla.kv_lora_rank > 0 ? m.mla.qk_rope_head_dim : m.head_dim;
    bytes += static_cast<Bytes>(m.max_positions * rotary_dim) * dtype_bytes;
  }
  return bytes;
}

// The engine arguments with V1's defaults, checked as its configs check them (ModelConfig, SchedulerConfig).
void settle_v1_settings(const PredictRequest& request, const GpuMemory& gpu, Paged& g) {
  const VllmServing& v = request.vllm;
  const TrainingOptions& o = request.options;
  const VllmSchedulerDefaults d =
      vllm_v1_scheduler_defaults(gpu.total_bytes, gpu.name.find("A100") != std::string::npos);
  g.block_size = o.block_size;
  g.gpu_memory_utilization = v.gpu_memory_utilization;
  const std::int64_t derived = request.model.max_positions;
  if (v.max_model_len > 0 && derived > 0 && v.max_model_len > derived) {
    // ModelConfig.get_and_verify_max_len without VLLM_ALLOW_LONG_MAX_MODEL_LEN
    throw InputError(fmt::format(
        "--max-model-len: {} is greater than the derived max_model_len (max_position_embeddings={}) of {}",
        v.max_model_len, derived, request.model.name));
  }
  const std::int64_t longest = o.seq + o.generate_tokens;
  g.max_model_len = v.max_model_len > 0 ? v.max_model_len : derived > 0 ? derived : longest;
  if (longest > g.max_model_len) {
    throw InputError(fmt::format("--max-model-len: prompt + new tokens ({}) exceed max_model_len {}", longest,
                                 g.max_model_len));
  }
  // Chunked prefill (always on in V1): max_num_batched_tokens may be below max_model_len.
  g.max_num_batched_tokens =
      v.max_num_batched_tokens > 0 ? v.max_num_batched_tokens : d.max_num_batched_tokens;
  g.max_num_seqs = v.max_num_seqs > 0 ? v.max_num_seqs : d.max_num_seqs;
  if (g.max_num_batched_tokens < g.max_num_seqs) {  // SchedulerConfig._verify_args
    throw InputError(
        fmt::format("--max-num-batched-tokens: max_num_batched_tokens ({}) must be greater than or "
                    "equal to max_num_seqs ({})",
                    g.max_num_batched_tokens, g.max_num_seqs));
  }
}

// The fused-MoE workspace a stage holding a sparse MoE layer keeps from the profile run on (0 for a dense
// model or a stage without one): the experts of every MoE family vramsim reads are gated (SiLU-and-mul;
// gpt_oss's SwiGLU is also act-and-mul), sliced over the tensor-parallel ranks (FusedMoE's
// intermediate_size_per_partition; the request's model is already the rank's), or whole under
// --enable-expert-parallel (the MoE layer's tp_size is 1: vllm_expert_parallel.h). M is the batch's tokens
// either way: without vLLM data parallelism every EP rank runs all of them, its expert_map masking the
// experts it does not hold.
std::int64_t fused_moe_workspace_bytes(const PredictRequest& request, Bytes dtype_bytes,
                                       const VllmPipelineStage& stage, const Paged& g) {
  const ModelConfig& m = request.model;
  if (m.moe.n_experts == 0) {
    return 0;
  }
  bool sparse_layer = false;
  for (std::int64_t l = stage.start_layer; l < stage.end_layer && !sparse_layer; ++l) {
    sparse_layer = m.moe.sparse(l);
  }
  if (!sparse_layer) {
    return 0;
  }
  VllmFusedMoeShapes s;
  s.tokens = g.max_num_batched_tokens;
  s.hidden = m.d_model;
  s.intermediate = m.moe.expert_d_ff;  // the rank model's: this rank's slice, or whole under EP
  s.top_k = m.moe.top_k;
  s.activation_bytes = dtype_bytes;
  return static_cast<std::int64_t>(vllm_fused_moe_workspace(s).total_bytes);
}

// ---- A vision-language model's multimodal profile run (vllm_multimodal_budget.h) ----

using Clip = ModelConfig::VisionPart::Clip;
using Tower = ModelConfig::VisionPart::Tower;

// The max_pixels of Qwen2-VL's and Qwen2.5-VL's checkpoints (preprocessor_config.json of
// Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct: 12845056 = 16384 tokens of 28 x 28 pixels),
// which vLLM's processor loads; transformers' class default (1003520) is what training recipes pass.
constexpr std::int64_t kQwenCheckpointMaxPixels = 12845056;

// One dummy image item as vLLM's model file builds it for the profile run (get_dummy_mm_inputs with the
// image of get_image_size_with_most_features): its tokens in the language model's sequence
// (get_mm_max_tokens_per_item), its rows in the tower, its pixel_values, and its encoder output's rows.
struct VisionItem {
  std::int64_t max_tokens = 0;
  std::int64_t tower_tokens = 0;
  std::int64_t pixel_elements = 0;
  std::int64_t embeds = 0;
  bool gated_mlp = false;
};
VisionItem vllm_vision_item(const ModelConfig& m, const VisionInputs& vision) {
  const Clip& c = m.vision.clip;
  const std::int64_t side_patches = c.patches_per_side() * c.patches_per_side();
  const std::int64_t pixels = c.channels * c.image_size * c.image_size;
  switch (c.tower) {
    case Tower::kSiglip:
      // gemma3_mm.py Gemma3ProcessingInfo.get_max_image_tokens: pan-and-scan off (Gemma3Processor's default,
      // get_num_crops 0), the replacement's features "<start_of_image>" + mm_tokens_per_image x
      // "<image_soft_token>" + "<end_of_image>"; the encoder output is the pooled tokens only.
      return {c.pooled_tokens + 2, side_patches, pixels, c.pooled_tokens, false};
    case Tower::kClip:
      if (!c.grid_pinpoints.empty()) {
        // llava_next.py LlavaNextProcessingInfo.get_image_size_with_most_features: of the pinpoints, in
        // image_grid_pinpoints' order, the (height, width) with the most features (get_num_image_tokens; the
        // first of equals). An image of a pinpoint's size is tiled without padding, so vLLM's integer
        // _get_num_unpadded_features and transformers' unpad_image (llava_next_anyres.h) agree on it: the
        // base image's side^2 + rows x (columns + 1). The processor's pixel_values hold its tiles and the
        // base image (image_size_to_num_patches), which _process_image_pixels runs through the tower as one
        // batch.
        AnyresGrid best;
        for (const auto& [height, width] : c.grid_pinpoints) {
          const AnyresGrid g = llava_next_anyres_grid(c, height, width);
          if (g.tokens() > best.tokens()) {
            best = g;
          }
        }
        return {best.tokens(), best.patches() * (side_patches + 1), best.patches() * pixels, best.tokens(),
                false};
      }
      // llava.py LlavaProcessingInfo.get_num_image_tokens: the patches (vision_feature_select_strategy
      // "default"; "full" keeps CLS), each one embedding; the tower runs CLS and the patches.
      return {c.tokens_per_image(), side_patches + 1, pixels, c.tokens_per_image(), false};
    case Tower::kQwen2Vl:
    case Tower::kQwen25Vl: {
      // qwen2_vl.py Qwen2VLProcessingInfo.get_image_size_with_most_features: smart_resize of a 9999999 x
      // 9999999 image within the processor's max_pixels; pixel_values are patches x (channels x
      // temporal_patch_size x patch_size^2); the merger's output one row per token.
      const std::int64_t max_pixels = vision.max_pixels > 0 ? vision.max_pixels : kQwenCheckpointMaxPixels;
      const std::int64_t min_pixels = vision.min_pixels > 0 ? vision.min_pixels : kQwenMinPixels;
      const QwenImageGrid grid = qwen2_vl_image_grid(c, 9999999, 9999999, min_pixels, max_pixels);
      const std::int64_t tokens = grid.tokens(c.spatial_merge_size);
      return {tokens, grid.patches(),
              grid.patches() * c.channels * c.temporal_patch_size * c.patch_size * c.patch_size, tokens,
              c.tower == Tower::kQwen25Vl};
    }
  }
  return {};
}

// The tower and projector one rank loads, in the model dtype. llava.py's init_vision_tower_for_llava builds
// CLIPVisionModel with num_hidden_layers_override = the feature layer's depth: the layers after
// vision_feature_layer are not built and post_layernorm only when every layer is (require_post_norm).
// Under tensor parallelism each parameter is the rank's slice (vllm_vision_tensor_parallel.h).
Bytes vision_weights_bytes(const ModelConfig& m, Bytes dtype_bytes, int tp) {
  std::vector<ParameterShape> shapes;
  llava_vision_parameter_shapes(m, shapes);
  const Clip& c = m.vision.clip;
  const std::int64_t built = c.tower == Tower::kClip ? c.feature_layers_run() : c.layers;
  Bytes bytes = 0;
  for (const ParameterShape& s : shapes) {
    if (built < c.layers) {
      if (s.name.find("post_layernorm") != std::string::npos) {
        continue;
      }
      const std::size_t at = s.name.find("encoder.layers.");
      if (at != std::string::npos && std::stoll(s.name.substr(at + 15)) >= built) {
        continue;
      }
    }
    bytes += static_cast<Bytes>(vllm_vision_rank_numel(s, tp)) * dtype_bytes;
  }
  return bytes;
}

// mm_encoder_tp_mode "data": the tower whole on every rank, the images split among the TP ranks.
bool tower_data_parallel(const PredictRequest& request) { return request.vllm.mm_encoder_tp_mode == "data"; }

// The techniques vLLM applies to the tower too, which its sizing here does not follow: refused by name.
void check_multimodal_request(const PredictRequest& request) {
  const std::string& wrapper = request.model.vision.wrapper_model_type;
  const auto not_modelled = [&wrapper](const std::string& what) {
    throw InputError(fmt::format(
        "{} with a vision-language model ({}) under --kv-cache paged: the tower's share is not modelled "
        "(vramsim)",
        what, wrapper));
  };
  // --tp: the tower's layers are split as vLLM splits them (mm_encoder_tp_mode "weights", its default:
  // vllm_vision_tensor_parallel.h); vLLM's divide(num_heads, tp) and the linears' divide(features, tp)
  // refuse a degree that does not divide them.
  const Clip& c = request.model.vision.clip;
  const int tp = request.tensor_parallel;
  if (tower_data_parallel(request) && c.tower != Tower::kQwen25Vl) {
    // vLLM runs the tower data-parallel for a model class declaring supports_encoder_tp_data
    // (Qwen2_5_VLForConditionalGeneration does, qwen2_5_vl.py at fb33ec8c); the others are not read here.
    not_modelled("--mm-encoder-tp-mode data");
  }
  if (tp > 1 && !tower_data_parallel(request) && (c.heads % tp != 0 || c.intermediate % tp != 0)) {
    throw InputError(fmt::format(
        "--tp: {} does not divide the vision tower's {} attention heads and {} MLP features of {} (vLLM "
        "splits the tower's layers across the tensor-parallel ranks: ensure_divisibility refuses it)",
        tp, c.heads, c.intermediate, wrapper));
  }
  if (request.vllm.pipeline_parallel > 1) {
    not_modelled("--pp");
  }
  if (!request.vllm.quantization.empty()) {
    not_modelled("--quantization");  // quant_config reaches the tower's linears
  }
}

// profile_run's encoder pass and the encoder outputs it keeps under the language model's run.
Paged::V1::Encoder multimodal_profile(const PredictRequest& request, Bytes dtype_bytes, const Paged& g,
                                      Bytes language_peak) {
  const ModelConfig& m = request.model;
  const Clip& c = m.vision.clip;
  const VisionItem item = vllm_vision_item(m, request.options.vision);
  const VllmMmBudget b = vllm_mm_budget(
      {g.max_num_batched_tokens, g.max_model_len, g.max_num_seqs, item.max_tokens, kVllmDefaultMmLimit});
  VllmEncoderShapes s;
  s.items = b.max_items_per_batch;
  s.tower_tokens_per_item = item.tower_tokens;
  s.tower_hidden = c.hidden;
  s.tower_intermediate = c.intermediate;
  s.gated_mlp = item.gated_mlp;
  s.pixel_elements_per_item = item.pixel_elements;
  s.embeds_per_item = item.embeds;
  s.text_hidden = m.d_model;
  s.dtype_bytes = dtype_bytes;
  s.tp = request.tensor_parallel;
  s.tower_data_parallel = tower_data_parallel(request);
  const VllmEncoderProfile p = vllm_encoder_profile(s);
  Paged::V1::Encoder e;
  e.max_tokens_per_item = item.max_tokens;
  e.encoder_budget = b.encoder_budget;
  e.items = b.max_items_per_batch;
  e.tower_tokens_per_item = item.tower_tokens;
  // "data": the whole tower on every rank (disable_tp in every linear)
  e.tower_weights_bytes = static_cast<std::int64_t>(
      vision_weights_bytes(m, dtype_bytes, s.tower_data_parallel ? 1 : request.tensor_parallel));
  e.tp_mode = request.vllm.mm_encoder_tp_mode;
  e.items_on_rank = p.items_on_rank;
  e.pixel_values_bytes = static_cast<std::int64_t>(p.pixel_values_bytes);
  e.local_pixel_values_bytes = static_cast<std::int64_t>(p.local_pixel_values_bytes);
  e.tower_layer_bytes = static_cast<std::int64_t>(p.tower_layer_bytes);
  e.encoder_outputs_bytes = static_cast<std::int64_t>(p.encoder_outputs_bytes);
  e.encoder_pass_bytes = static_cast<std::int64_t>(p.encoder_pass_bytes);
  e.language_pass_bytes = static_cast<std::int64_t>(p.kept_bytes + language_peak);
  return e;
}

// The profile run's peak over the weights: the widest of the dummy forward and the sampler, plus the cuBLAS
// workspace the first matmul of the process allocates through the caching allocator and, for MoE models, the
// fused-MoE workspace, both kept for the rest of the run.
void profile(const PredictRequest& request, Bytes dtype_bytes, const VllmPipelineStage& stage, Paged::V1& out,
             const Paged& g) {
  const ModelConfig& m = request.model;
  VllmProfileShapes s;
  s.tokens = g.max_num_batched_tokens;
  s.requests = std::min(g.max_num_seqs, g.max_num_batched_tokens);
  s.hidden = m.d_model;
  s.q_heads = m.n_heads;
  s.kv_heads = m.n_kv_heads;
  s.head_dim = m.head_dim;
  s.intermediate = m.d_ff;
  s.vocab_rows = vllm_vocab_rows_per_rank(request.vllm.vocab_size, request.tensor_parallel);
  s.vocab = request.vllm.vocab_size;
  s.tp = request.tensor_parallel;
  s.activation_bytes = dtype_bytes;
  s.first_stage = stage.first;
  s.last_stage = stage.last;
  const VllmProfilePeak p = vllm_v1_profile_peak(s);
  out.intermediate_bytes = static_cast<std::int64_t>(p.intermediate_bytes);
  out.forward_peak_bytes = static_cast<std::int64_t>(p.forward_bytes);
  out.sampler_peak_bytes = static_cast<std::int64_t>(p.sampler_bytes);
  out.cublas_workspace_bytes = static_cast<std::int64_t>(request.options.cublas_workspace_bytes);
  out.fused_moe_workspace_bytes = fused_moe_workspace_bytes(request, dtype_bytes, stage, g);
  std::int64_t peak = static_cast<std::int64_t>(p.peak_bytes);
  if (m.vision.simulated()) {
    out.encoder = multimodal_profile(request, dtype_bytes, g, p.peak_bytes);
    peak = std::max(out.encoder->encoder_pass_bytes, out.encoder->language_pass_bytes);
  }
  out.torch_peak_increase_bytes = peak + out.cublas_workspace_bytes + out.fused_moe_workspace_bytes;
}

// The model's KV-cache groups (vllm_kv_cache_groups.h): each decoder layer's sliding window or attention
// chunk, neither for full attention (and for MLA, whose layers are all MLAAttentionSpec).
VllmKvCacheGroups model_kv_cache_groups(const ModelConfig& m) {
  std::vector<VllmLayerKvSpec> specs(static_cast<std::size_t>(m.n_layers));
  for (const std::int64_t l : m.sliding_window_layers) {
    if (l < m.n_layers) {
      specs[static_cast<std::size_t>(l)].sliding_window = m.sliding_window;
    }
  }
  for (const std::int64_t l : m.chunked_attention_layers) {
    if (l < m.n_layers) {
      specs[static_cast<std::size_t>(l)].attention_chunk_size = m.attention_chunk_size;
    }
  }
  return vllm_kv_cache_groups(specs);
}

void describe_groups(const VllmKvCacheGroups& groups, Paged::V1& out) {
  out.kv_cache_groups = static_cast<std::int64_t>(groups.groups.size());
  out.layers_per_group = groups.group_size;
  out.padding_layers = groups.padding_layers;
  out.full_attention_groups = 0;
  out.sliding_window = 0;
  out.sliding_window_layers = 0;
  out.attention_chunk_size = 0;
  out.chunked_attention_layers = 0;
  for (const VllmKvCacheGroup& g : groups.groups) {
    out.full_attention_groups += g.full_attention() ? 1 : 0;
    if (g.sliding_window > 0) {
      out.sliding_window = g.sliding_window;
      out.sliding_window_layers += static_cast<std::int64_t>(g.layers.size());
    }
    if (g.attention_chunk_size > 0) {
      out.attention_chunk_size = g.attention_chunk_size;
      out.chunked_attention_layers += static_cast<std::int64_t>(g.layers.size());
    }
  }
}

// The stage's KV cache from its available memory (g.available_bytes): the page of its attention (MLA or not),
// its layers' KV-cache groups, the blocks, what one max_model_len request needs, vLLM's refusal when that
// does not fit (unless g.refusal is already set), and the longest length served.
void size_kv_cache(const ModelConfig& m, Bytes kv_bytes, const VllmPipelineStage& stage, Paged& g,
                   Paged::V1& out) {
  out.mla = m.mla.kv_lora_rank > 0;
  out.page_size_bytes = static_cast<std::int64_t>(
      out.mla
          ? vllm_v1_mla_page_size_bytes(g.block_size, m.mla.kv_lora_rank + m.mla.qk_rope_head_dim, kv_bytes)
          : vllm_v1_page_size_bytes(g.block_size, m.n_kv_heads, m.head_dim, kv_bytes));
  const VllmKvCacheGroups groups =
      vllm_project_kv_cache_groups(model_kv_cache_groups(m), stage.start_layer, stage.end_layer);
  describe_groups(groups, out);
  const VllmKvCacheLimits limits{g.block_size, g.max_model_len, g.max_num_batched_tokens,
                                 static_cast<Bytes>(out.page_size_bytes)};
  g.block_bytes = out.page_size_bytes * groups.group_size;
  g.num_gpu_blocks =
      vllm_kv_cache_num_blocks(groups, g.available_bytes, static_cast<Bytes>(out.page_size_bytes));
  const auto needed = static_cast<std::int64_t>(vllm_kv_cache_request_bytes(groups, limits, g.max_model_len));
  out.kv_cache_needed_bytes = needed;
  out.blocks_per_request = needed / (out.page_size_bytes * groups.group_size);
  if (g.refusal.empty()) {
    const std::int64_t estimated =
        needed > g.available_bytes ? vllm_kv_cache_estimate_max_model_len(groups, limits, g.available_bytes)
                                   : 0;
    const VllmCacheCheck c = vllm_v1_kv_cache_refusal(g.available_bytes, needed, g.max_model_len, estimated);
    g.refusal = c.refusal;
    out.estimated_max_model_len = c.estimated_max_model_len;
  }
  // The serving questions, with estimate_max_model_len's search up to the model's max_position_embeddings.
  const std::int64_t derived = m.max_positions > 0 ? m.max_positions : g.max_model_len;
  VllmKvCacheLimits longest = limits;
  longest.max_model_len = derived;
  out.largest_max_model_len = vllm_kv_cache_estimate_max_model_len(groups, longest, g.available_bytes);
}

// Worker.init_device's request_memory: the engine asks for total x utilization and refuses when less is free.
std::string check_requested(const GpuMemory& gpu, std::int64_t before_snapshot, const Paged& g,
                            std::int64_t requested) {
  const std::int64_t free = gpu.total_bytes - gpu.context_bytes - before_snapshot;
  if (free >= requested) {
    return {};
  }
  return fmt::format(
      "Free memory on device ({}/{} GiB) on startup is less than desired GPU memory utilization ({}, {} "
      "GiB). "
      "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
      vllm_gib(free), vllm_gib(gpu.total_bytes), g.gpu_memory_utilization, vllm_gib(requested));
}

// One stage's start-up (one rank of it), as if it were the engine's only worker: Worker.init_device,
// determine_available_memory, and get_kv_cache_configs' per-worker steps (_check_enough_kv_cache_memory
// on this worker's layers, get_kv_cache_config_from_groups: available // page // the worker's layers).
Paged size_stage(const PredictRequest& request, const GpuMemory& gpu, const Paged& settings,
                 const VllmPipelineStage& stage) {
  const ModelConfig& m = request.model;
  const VllmServing& v = request.vllm;
  Paged g = settings;
  Paged::V1 out;
  out.tensor_parallel = request.tensor_parallel;
  out.expert_parallel = v.expert_parallel;
  out.local_experts = v.local_experts;
  out.global_experts = v.global_experts;
  out.pipeline_parallel = v.pipeline_parallel;
  out.data_parallel = v.data_parallel;
  out.stage = stage.stage;
  out.stage_layers = stage.layers();
  out.kv_cache_dtype = v.kv_cache_dtype;
  out.quantization = v.quantization;
  out.dtype = v.dtype;
  const Bytes dtype_bytes = dtype_size_bytes(parameter_dtype(request.options.precision));
  out.weights_bytes =
      static_cast<std::int64_t>(weights_per_rank(request, dtype_bytes, v.quantization, stage));
  profile(request, dtype_bytes, stage, out, g);
  if (out.encoder) {  // the tower and projector load with the language model (GPUModelRunner.load_model)
    out.weights_bytes += out.encoder->tower_weights_bytes;
  }
  // --enable-lora: load_model wraps the model in its LoRAModelManager inside the same memory profiler
  const Bytes lora_dtype_bytes = v.lora.lora_dtype == "auto" ? dtype_bytes : Bytes{2};
  const VllmLoraSlots lora =
      vllm_lora_slots(m, v.lora, request.tensor_parallel, v.vocab_size, lora_dtype_bytes, stage);
  out.lora_slot_bytes = static_cast<std::int64_t>(lora.total());
  out.lora_layers = lora.wrapped_layers;
  out.lora_max_loras = v.lora.enabled ? v.lora.max_loras : 0;
  out.lora_max_rank = v.lora.enabled ? v.lora.max_lora_rank : 0;
  out.weights_bytes += out.lora_slot_bytes;
  out.non_torch_lines = vllm_non_torch_lines(
      VllmParallelGroups{request.tensor_parallel, v.pipeline_parallel, v.data_parallel, stage.last},
      request.gpu);
  out.non_torch_measured = v.non_torch_increase_bytes.has_value();
  out.non_torch_increase_bytes = v.non_torch_increase_bytes.value_or(
      static_cast<std::int64_t>(non_torch_increase_bytes(out.non_torch_lines)));
  std::int64_t before_snapshot = 0;
  for (const NonTorchLine& l : out.non_torch_lines) {
    before_snapshot += l.after_snapshot ? 0 : static_cast<std::int64_t>(l.size_bytes);
  }
  out.non_kv_cache_bytes = out.weights_bytes + out.torch_peak_increase_bytes + out.non_torch_increase_bytes;
  out.requested_bytes =
      static_cast<std::int64_t>(std::floor(static_cast<double>(gpu.total_bytes) * g.gpu_memory_utilization));
  // vLLM 0.21+ (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, Worker.determine_available_memory): the
  // estimated CUDA-graph pool comes out of the KV cache's memory, and the log states the utilization this
  // is equivalent to without the estimate (util - graphs / total) and the one that keeps the cache's size
  // (util + graphs / total), to four decimals.
  out.cudagraph_memory_bytes = v.cudagraph_memory_bytes.value_or(0);
  const double graphs_fraction =
      static_cast<double>(out.cudagraph_memory_bytes) / static_cast<double>(gpu.total_bytes);
  out.utilization_without_graphs = g.gpu_memory_utilization - graphs_fraction;
  out.utilization_to_keep_cache = g.gpu_memory_utilization + graphs_fraction;
  g.available_bytes = out.requested_bytes - out.non_kv_cache_bytes - out.cudagraph_memory_bytes;
  g.profile_peak_allocated_bytes = out.weights_bytes + out.torch_peak_increase_bytes;
  g.non_torch_bytes = out.non_torch_increase_bytes;
  g.refusal = check_requested(gpu, before_snapshot, g, out.requested_bytes);
  size_kv_cache(m, kv_dtype_bytes(v.kv_cache_dtype, dtype_bytes), stage, g, out);
  const std::int64_t needed = out.kv_cache_needed_bytes;
  out.min_gpu_memory_utilization =
      std::ceil(static_cast<double>(out.non_kv_cache_bytes + out.cudagraph_memory_bytes + needed) /
                static_cast<double>(gpu.total_bytes) * 1e4) /
      1e4;
  out.before_snapshot_bytes = before_snapshot;
  out.context_bytes = gpu.context_bytes;
  out.total_bytes = gpu.total_bytes;
  g.v1 = std::move(out);
  return g;
}

// What the engine does with the workers' configs (get_kv_cache_configs): every worker's num_blocks becomes
// the smallest among them and the tensors shrink to it; _report_kv_cache_config then logs "GPU KV cache
// size" and "Maximum concurrency" from that count. A refusal is the first worker's in stage order.
void finish(const ModelConfig& m, Paged& g, std::int64_t num_blocks) {
  Paged::V1& out = *g.v1;
  g.num_gpu_blocks = num_blocks;
  const VllmKvCacheGroups groups = model_kv_cache_groups(m);
  const VllmKvCacheLimits limits{g.block_size, g.max_model_len, g.max_num_batched_tokens,
                                 static_cast<Bytes>(out.page_size_bytes)};
  out.kv_cache_tokens = vllm_kv_cache_tokens(groups, num_blocks, g.block_size);
  out.max_concurrency = vllm_kv_cache_max_concurrency(groups, num_blocks, limits);
  out.process_total_bytes = out.context_bytes + out.before_snapshot_bytes + out.non_torch_increase_bytes +
                            out.weights_bytes + num_blocks * g.block_bytes;
}

}  // namespace

Paged size_vllm_v1_cache(const PredictRequest& request) {
  const ModelConfig& m = request.model;
  const VllmServing& v = request.vllm;
  const GpuMemory gpu = device_memory(request.gpu, request.capacity_bytes, request.context);
  Paged settings;
  settle_v1_settings(request, gpu, settings);
  if (m.vision.simulated()) {
    check_multimodal_request(request);
  }
  const std::vector<VllmPipelineStage> stages =
      vllm_pipeline_stages(m.n_layers, v.pipeline_parallel, v.pp_layer_partition);
  std::vector<Paged> sized;
  for (const VllmPipelineStage& st : stages) {
    sized.push_back(size_stage(request, gpu, settings, st));
  }
  // The stage reported: the fewest blocks (the first of equals).
  std::size_t limiting = 0;
  for (std::size_t i = 1; i < sized.size(); ++i) {
    limiting = sized[i].num_gpu_blocks < sized[limiting].num_gpu_blocks ? i : limiting;
  }
  Paged g = sized[limiting];
  Paged::V1& out = *g.v1;
  for (std::size_t i = 0; i < sized.size(); ++i) {
    const Paged& s = sized[i];
    if (stages.size() > 1) {
      out.stages.push_back({stages[i].stage, stages[i].start_layer, stages[i].end_layer, s.v1->weights_bytes,
                            s.v1->torch_peak_increase_bytes, s.v1->non_torch_increase_bytes,
                            s.available_bytes, s.num_gpu_blocks});
    }
    out.largest_max_model_len = std::min(out.largest_max_model_len, s.v1->largest_max_model_len);
    out.min_gpu_memory_utilization =
        std::max(out.min_gpu_memory_utilization, s.v1->min_gpu_memory_utilization);
  }
  for (const Paged& s : sized) {
    if (!s.refusal.empty()) {
      g.refusal = s.refusal;
      out.estimated_max_model_len = s.v1->estimated_max_model_len;
      break;
    }
  }
  finish(m, g, sized[limiting].num_gpu_blocks);
  return g;
}

}  // namespace vramsim
