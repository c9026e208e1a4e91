// vLLM's multi-LoRA serving (`vllm serve --enable-lora`): the adapter slots each wrapped layer allocates
// when the model loads, so inside "Model loading took" and out of the KV cache's budget.
//
// GPUModelRunner.load_model wraps the model in LoRAModelManager (vllm/lora/model_manager.py) inside its
// DeviceMemoryProfiler. _create_lora_modules replaces every module whose name suffix is a supported LoRA
// module (vllm/lora/utils.py get_supported_lora_modules: every LinearBase, and the model class's
// embedding_modules) by its LoRA layer, and create_lora_weights(max_loras, lora_config) gives it
// torch.zeros slots in lora_dtype (LoRAConfig: "auto" = the model's dtype), one per adapter that may be
// active in a batch (lora_slots = max_loras), for max_lora_rank whatever rank an adapter has:
//
//   column-parallel slices (vllm/lora/layers/column_parallel_linear.py: MergedQKVParallelLinearWithLoRA
//   for qkv_proj's three, MergedColumnParallelLinearWithLoRA for gate_up_proj's two; base_linear.py):
//     lora_a_stacked (max_loras, 1, r_a, input_size), input_size whole; r_a = max_lora_rank, or
//       max_lora_rank / tp with fully_sharded_loras
//     lora_b_stacked (max_loras, 1, slice output on this rank, max_lora_rank)
//   row-parallel layers (row_parallel_linear.py: o_proj, down_proj):
//     lora_a_stacked (max_loras, 1, max_lora_rank, input_size_per_partition)
//     lora_b_stacked (max_loras, 1, output_size, max_lora_rank), output whole, or output / tp with
//       fully_sharded_loras
//   embed_tokens (vocal_parallel_embedding.py VocabParallelEmbeddingWithLoRA): lora_a_stacked
//     (max_loras, org_vocab_size, max_lora_rank), lora_b_stacked (max_loras, 1, embedding_dim, max_lora_rank)
//   lm_head, through the logits processor (logits_processor.py LogitsProcessorWithLoRA): lora_a_stacked
//     (max_loras, 1, max_lora_rank, hidden_size), lora_b_stacked (max_loras, 1, vocab_size, max_lora_rank),
//     and with tp >= 2 sharded_to_full_mapping_gpu, one int64 per padded vocabulary row
//   a MoE block's router (gate) and Qwen2-MoE's shared_expert_gate (replicated_linear.py
//     ReplicatedLinearWithLoRA): (max_loras, 1, r, input) and (max_loras, 1, output, r), whole on every rank
//   a MoE block's routed experts, one FusedMoEWithLoRA a layer (fused_moe.py): per local expert, two w13
//     slices (gate, up) of lora_a (r, hidden) and lora_b (intermediate_size_per_partition, r), and w2's
//     lora_a (r, intermediate_size_per_partition) and lora_b (hidden, r); fully_sharded_loras shards w13's
//     lora_a rank and w2's lora_b hidden over the MoE layer's tensor-parallel ranks. With
//     --enable-expert-parallel the MoE layer's tp_size is 1: a rank holds its local experts whole
//     (vllm/lora/model_manager.py slices an adapter to them, _slice_moe_lora_ep; vLLM releases before that
//     refused it: "EP support for Fused MoE LoRA is not implemented yet.")
//
// One rank's model is given (a tensor-parallel rank's shapes: a column-parallel weight holds its output
// slice and the whole input, a row-parallel one its input slice and the whole output; its MoE layers the
// rank's experts, vllm_expert_parallel.h), so every decoder slice takes r x (in + out) elements of that
// shape. Qwen's shared expert (shared_expert.gate_up_proj, down_proj) is an ordinary MLP of linears.
//
// The embedding modules are the model class's: LlamaForCausalLM (and MistralForCausalLM, its subclass) and
// MixtralForCausalLM declare embed_tokens and lm_head; Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM,
// Gemma2ForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM declare none. Other model types are
// refused (their classes were not read here), as are experts stored as 3-D tensors (FusedMoE3DWithLoRA:
// gpt-oss, Llama 4) and multi-head latent attention (DeepSeek's fused_qkv_a_proj, q_b_proj and kv_b_proj,
// which vLLM does wrap).
//
// Not counted (each under 1 MiB at the defaults but the last): the punica
// wrapper's index tensors (punica_wrapper/punica_base.py, punica_gpu.py LoRAKernelMeta: a few int32/int64
// vectors of max_num_batched_tokens), each FusedMoEWithLoRA's adapter_enabled (max_loras + 1 int32), and
// the profile run's LoRA temporaries (add_lora_linear's float32 shrink buffer of n_slices x tokens x
// max_lora_rank per layer, freed before the MLP's widest point; in a MoE layer fused_moe_lora's
// a_intermediate_cache1 of n_slices x tokens x top_k x max_lora_rank in the model dtype, 4 MiB at 8,192
// tokens, top-8, rank 16, freed when the layer returns: the base experts' own caches are larger). The
// dummy adapters the profile run activates are made on the host (create_dummy_lora_weights(..., "cpu")) and
// copied into the slots.
#pragma once

#include <cstdint>
#include <string>

#include "sim/core/types.h"

namespace vramsim {

struct ModelConfig;
struct VllmPipelineStage;

// LoRAConfig's fields (vllm/config/lora.py), as `vllm serve` takes them.
struct VllmLoraOptions {
  bool enabled = false;             // --enable-lora
  std::int64_t max_loras = 1;       // --max-loras (>= 1)
  std::int64_t max_lora_rank = 16;  // --max-lora-rank: one of MaxLoRARanks
  bool fully_sharded = false;       // --fully-sharded-loras
  std::string lora_dtype = "auto";  // --lora-dtype auto|float16|bfloat16
};

// Throws InputError with vLLM's (pydantic's) reasons for values LoRAConfig refuses.
void validate_vllm_lora(const VllmLoraOptions& o);

// The slots one rank allocates, by kind.
struct VllmLoraSlots {
  Bytes decoder_bytes = 0;          // the decoder layers' linear slices (routers included)
  Bytes moe_bytes = 0;              // the FusedMoE layers' expert slots
  Bytes embedding_bytes = 0;        // embed_tokens (first stage)
  Bytes logits_bytes = 0;           // the logits processor's lm_head slots and mapping (last stage)
  std::int64_t wrapped_layers = 0;  // LoRA layers made (a packed qkv_proj is one)
  Bytes total() const { return decoder_bytes + moe_bytes + embedding_bytes + logits_bytes; }
};

// `rank_model` is one tensor-parallel rank's model; `vocab_size` the unpadded vocabulary; `dtype_bytes` the
// model dtype's (lora_dtype "auto"). Throws InputError("--enable-lora: ...") for layers not modelled.
VllmLoraSlots vllm_lora_slots(const ModelConfig& rank_model, const VllmLoraOptions& o, int tp,
                              std::int64_t vocab_size, Bytes dtype_bytes, const VllmPipelineStage& stage);

}  // namespace vramsim
