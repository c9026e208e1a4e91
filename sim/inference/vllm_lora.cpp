#include "sim/inference/vllm_lora.h"

#include <array>
#include <string_view>

#include <fmt/format.h>

#include "sim/core/checked_size.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_pipeline_stages.h"
#include "sim/inference/vllm_v1_startup.h"
#include "sim/models/model_config.h"

namespace vramsim {
namespace {

// LoRAConfig's MaxLoRARanks (vllm/config/lora.py).
constexpr std::array<std::int64_t, 9> kMaxLoraRanks = {1, 8, 16, 32, 64, 128, 256, 320, 512};

// How vLLM's model code holds a Hugging Face linear of a decoder layer: the slices of its packed
// column-parallel layers (packed_modules_mapping: qkv_proj = q, k, v; gate_up_proj = gate, up) and its
// row-parallel layers. A slice starts a new LoRA layer when it is the packed layer's first.
// A MoE block's router (Mixtral's block_sparse_moe.gate, Qwen2/3-MoE's mlp.gate) and Qwen2-MoE's
// shared_expert_gate are ReplicatedLinear: whole on every rank. The routed experts' weights are not
// linears of their own: their FusedMoE layer gets its slots from fused_moe_slots.
enum class LoraSlice { kColumnFirst, kColumnMore, kRow, kReplicated, kOther };
LoraSlice slice_of(std::string_view name) {
  const auto ends = [&name](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (name.find(".experts.") != std::string_view::npos) {
    return LoraSlice::kOther;
  }
  if (ends(".gate.weight") || ends(".shared_expert_gate.weight")) {
    return LoraSlice::kReplicated;
  }
  if (ends("q_proj.weight") || ends("gate_proj.weight")) {
    return LoraSlice::kColumnFirst;
  }
  if (ends("k_proj.weight") || ends("v_proj.weight") || ends("up_proj.weight")) {
    return LoraSlice::kColumnMore;
  }
  if (ends("o_proj.weight") || ends("down_proj.weight")) {
    return LoraSlice::kRow;
  }
  return LoraSlice::kOther;
}

// The model classes whose LoRA modules were read: LlamaForCausalLM (embedding_modules embed_tokens and
// lm_head; MistralForCausalLM inherits them), Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM and
// Gemma2ForCausalLM (none: "Gemma does not apply LoRA to the embedding layer"; its logits use embed_tokens,
// no lm_head module); of the mixture-of-experts classes MixtralForCausalLM (embed_tokens and lm_head),
// Qwen2MoeForCausalLM and Qwen3MoeForCausalLM (none).
bool has_embedding_modules(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "mixtral";
}
bool lora_modelled(const std::string& model_type) {
  return has_embedding_modules(model_type) || model_type == "qwen2" || model_type == "qwen3" ||
         model_type == "gemma" || model_type == "gemma2" || model_type == "qwen2_moe" ||
         model_type == "qwen3_moe";
}

constexpr std::string_view kWhat = "--enable-lora";

Bytes elements(std::int64_t a, std::int64_t b, std::int64_t c) {
  return size_mul(size_mul(static_cast<Bytes>(a), static_cast<Bytes>(b), kWhat), static_cast<Bytes>(c),
                  kWhat);
}
Bytes add(Bytes a, Bytes b) { return size_add(a, b, kWhat); }
Bytes mul(Bytes a, Bytes b) { return size_mul(a, b, kWhat); }

// vllm/distributed/utils.py divide (ensure_divisibility): "{numerator} is not divisible by {denominator}".
std::int64_t divide(std::int64_t numerator, std::int64_t denominator, std::string_view what) {
  if (numerator % denominator != 0) {
    throw InputError(
        fmt::format("--fully-sharded-loras: {} {} is not divisible by {} (vLLM's divide in "
                    "FusedMoEWithLoRA)",
                    what, numerator, denominator));
  }
  return numerator / denominator;
}

// One FusedMoEWithLoRA's slots in elements (vllm/lora/layers/fused_moe.py _create_lora_a_weights and
// _create_lora_b_weights), for E = local_num_experts, I = intermediate_size_per_partition, d = hidden_size:
//   w13_lora_a_stacked: two slices (gate w1, up w3: is_act_and_mul) of (max_loras, E, r_a, d), r_a =
//     max_lora_rank, or max_lora_rank / tp with fully_sharded_loras
//   w13_lora_b_stacked: two slices of (max_loras, E, I, max_lora_rank)
//   w2_lora_a_stacked:  (max_loras, E, max_lora_rank, I)
//   w2_lora_b_stacked:  (max_loras, E, d, max_lora_rank), or d / tp with fully_sharded_loras
// tp is the MoE layer's: the tensor-parallel size, or 1 under expert parallelism (FusedMoEParallelConfig:
// each expert whole; the experts split over the ranks instead).
Bytes fused_moe_slots(const ModelConfig& m, const VllmLoraOptions& o, int tp) {
  const std::int64_t moe_tp = m.moe.expert_parallel > 1 ? 1 : tp;
  const std::int64_t r = o.max_lora_rank;
  const std::int64_t experts = m.moe.local_experts();
  const std::int64_t d = m.d_model;
  const std::int64_t inter = m.moe.expert_d_ff;
  const std::int64_t r_a = o.fully_sharded ? divide(r, moe_tp, "max_lora_rank") : r;
  const std::int64_t d_b = o.fully_sharded ? divide(d, moe_tp, "hidden_size") : d;
  const std::int64_t per_expert = 2 * (r_a * d + inter * r) + r * inter + d_b * r;
  return elements(o.max_loras, experts, per_expert);
}

// What vramsim does not size: vLLM wraps these too, but their layers were not read here.
void check_lora_modelled(const ModelConfig& m) {
  if (m.mla.kv_lora_rank > 0) {
    throw InputError(
        "--enable-lora: vLLM's LoRA on multi-head latent attention (DeepseekV2ForCausalLM's "
        "fused_qkv_a_proj, q_b_proj, kv_b_proj) is not modelled (vramsim)");
  }
  if (m.moe.fused_experts) {
    throw InputError(
        "--enable-lora: vLLM's FusedMoE3DWithLoRA (experts stored as 3-D tensors: gpt-oss, Llama 4) is not "
        "modelled (vramsim)");
  }
  if (!lora_modelled(m.model_type)) {
    throw InputError(
        fmt::format("--enable-lora: vLLM's LoRA layers for model_type '{}' are not modelled (vramsim models "
                    "llama, mistral, qwen2, qwen3, gemma, gemma2, mixtral, qwen2_moe and qwen3_moe)",
                    m.model_type));
  }
}

}  // namespace

void validate_vllm_lora(const VllmLoraOptions& o) {
  if (o.max_loras < 1 || o.max_loras > 1'000'000) {
    // LoRAConfig: max_loras: int = Field(default=1, ge=1)
    throw InputError(fmt::format("--max-loras: must be 1 or more (LoRAConfig ge=1), got {}", o.max_loras));
  }
  bool rank_known = false;
  for (std::int64_t r : kMaxLoraRanks) {
    rank_known = rank_known || r == o.max_lora_rank;
  }
  if (!rank_known) {
    throw InputError(fmt::format(
        "--max-lora-rank: {} is not one of vLLM's MaxLoRARanks (1, 8, 16, 32, 64, 128, 256, 320, 512)",
        o.max_lora_rank));
  }
  if (o.lora_dtype != "auto" && o.lora_dtype != "float16" && o.lora_dtype != "bfloat16") {
    throw InputError(fmt::format(
        "--lora-dtype: '{}' is not auto, float16 or bfloat16 (LoRAConfig's LoRADType)", o.lora_dtype));
  }
}

VllmLoraSlots vllm_lora_slots(const ModelConfig& m, const VllmLoraOptions& o, int tp, std::int64_t vocab_size,
                              Bytes dtype_bytes, const VllmPipelineStage& stage) {
  VllmLoraSlots out;
  if (!o.enabled) {
    return out;
  }
  check_lora_modelled(m);
  const std::int64_t r = o.max_lora_rank;
  const std::int64_t slots = o.max_loras;
  const std::int64_t r_a_column = o.fully_sharded ? r / tp : r;  // ColumnParallelLinearWithShardedLoRA
  for (const ParameterShape& s : m.parameter_shapes()) {
    if (s.layer < 0 || s.layer < stage.start_layer || s.layer >= stage.end_layer || s.shape.size() != 2) {
      continue;
    }
    const LoraSlice kind = slice_of(s.name);
    if (kind == LoraSlice::kOther) {
      continue;  // norms; a weight of another shape would be no linear vLLM wraps here
    }
    const std::int64_t out_rank = s.shape[0];  // this rank's rows of the (out, in) weight
    const std::int64_t in_rank = s.shape[1];
    Bytes n = 0;
    if (kind == LoraSlice::kReplicated) {
      // ReplicatedLinearWithLoRA: (slots, 1, r, in) and (slots, 1, out, r), whole on every rank (never
      // sharded, fully_sharded_loras or not)
      n = add(elements(slots, r, in_rank), elements(slots, out_rank, r));
      ++out.wrapped_layers;
    } else if (kind == LoraSlice::kRow) {
      // lora_a over the rank's input slice; lora_b the whole output (its share with fully_sharded_loras)
      n = add(elements(slots, r, in_rank), elements(slots, o.fully_sharded ? out_rank / tp : out_rank, r));
      ++out.wrapped_layers;
    } else {
      n = add(elements(slots, r_a_column, in_rank), elements(slots, out_rank, r));
      out.wrapped_layers += kind == LoraSlice::kColumnFirst ? 1 : 0;
    }
    out.decoder_bytes = add(out.decoder_bytes, mul(n, dtype_bytes));
  }
  // the stage's FusedMoE layers (Qwen's mlp_only_layers keep a dense MLP), every one with the same slots
  std::int64_t moe_layers = 0;
  for (int l = stage.start_layer; l < stage.end_layer; ++l) {
    moe_layers += m.moe.sparse(l) ? 1 : 0;
  }
  if (moe_layers > 0) {
    out.moe_bytes = mul(static_cast<Bytes>(moe_layers), mul(fused_moe_slots(m, o, tp), dtype_bytes));
    out.wrapped_layers += moe_layers;
  }
  if (has_embedding_modules(m.model_type)) {
    // VocabParallelEmbeddingWithLoRA: (slots, org_vocab_size, r) and (slots, 1, embedding_dim, r). A tied
    // lm_head is the same VocabParallelEmbedding, which _create_lora_modules wraps again under "lm_head"
    // (the "lm_head" name is exempt from its already-wrapped check).
    const Bytes one = mul(add(elements(slots, vocab_size, r), elements(slots, m.d_model, r)), dtype_bytes);
    if (stage.first) {
      out.embedding_bytes = add(out.embedding_bytes, one);
      ++out.wrapped_layers;
    }
    if (stage.last) {
      if (m.tied_embeddings) {
        out.embedding_bytes = add(out.embedding_bytes, one);
        ++out.wrapped_layers;
      }
      // LogitsProcessorWithLoRA: (slots, 1, r, hidden) and (slots, 1, vocab_size, r); with tp >= 2 the
      // sharded-to-full index of the padded vocabulary (VocabParallelEmbedding.get_sharded_to_full_mapping)
      out.logits_bytes = mul(add(elements(slots, r, m.d_model), elements(slots, vocab_size, r)), dtype_bytes);
      if (tp > 1) {
        out.logits_bytes = add(out.logits_bytes, elements(vllm_vocab_rows_per_rank(vocab_size, tp), tp, 8));
      }
      ++out.wrapped_layers;
    }
  }
  return out;
}

}  // namespace vramsim
