// The pieces of a decoder-only Transformer's forward, written the way each supported code base writes them
// (ModelConfig::code, a layer_code.h name), so that the tape sees the same tensors, views, copies and Python
// variable lifetimes:
//   torch_modules_layers.cpp : Hugging Face transformers' modeling code per model_type (GPT-2 and the Llama
//                              family, + Megatron accounting)
//   hf_moe.cpp               : transformers' sparse mixture-of-experts blocks (Mixtral, Qwen2-MoE)
//   cs336_basics_layers.cpp  : the CS336 staff model
// Contract of every emit_*: inputs are not dropped (the caller owns them); the returned var carries one
// Python reference; every intermediate is dropped where the Python code lets go of it.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "sim/finetune/bnb_quant.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"
#include "sim/training/training_options.h"

namespace vramsim {

class LayerCode;         // layer_code.h
class KvCache;           // hf_kv_cache.h
struct InductorProcess;  // torch_compile.h
class LayerStamp;        // layer_stamp.h

// A decoder layer's parameters by role; kNoVar where the architecture has none.
struct LayerParams {
  VarId norm1_w = kNoVar, norm1_b = kNoVar, norm2_w = kNoVar, norm2_b = kNoVar;
  VarId qkv_w = kNoVar, qkv_b = kNoVar;  // GPT-2's fused c_attn
  VarId q_w = kNoVar, q_b = kNoVar, k_w = kNoVar, k_b = kNoVar, v_w = kNoVar, v_b = kNoVar;
  VarId o_w = kNoVar, o_b = kNoVar;
  VarId fc1_w = kNoVar, fc1_b = kNoVar, fc2_w = kNoVar, fc2_b = kNoVar;  // GELU MLP
  VarId gate_w = kNoVar, up_w = kNoVar, down_w = kNoVar;                 // gated MLP (CS336: w1, w3, w2)
  VarId gate_up_w = kNoVar;                                              // Phi-3's fused gate_up_proj
  VarId norm3_w = kNoVar, norm4_w = kNoVar;  // Gemma-2's pre_/post_feedforward_layernorm
  // A mixture-of-experts block: the router, each expert's gated MLP, Qwen2-MoE's shared expert and its gate.
  struct Expert {
    VarId gate_w = kNoVar, up_w = kNoVar, down_w = kNoVar;
  };
  VarId router_w = kNoVar, router_b = kNoVar;
  std::vector<Expert> experts;
  Expert shared_expert;
  VarId shared_expert_gate_w = kNoVar;
  // Experts as three-dimensional parameters (MoeConfig::fused_experts).
  VarId experts_gate_up_w = kNoVar, experts_gate_up_b = kNoVar, experts_down_w = kNoVar,
        experts_down_b = kNoVar;
  VarId q_norm_w = kNoVar, k_norm_w = kNoVar;  // qwen3 / gemma3 / olmo2
  VarId sinks = kNoVar;                        // gpt_oss
  // deepseek_v3's multi-head latent attention
  VarId q_a_w = kNoVar, q_a_norm_w = kNoVar, q_b_w = kNoVar, kv_a_w = kNoVar, kv_a_norm_w = kNoVar,
        kv_b_w = kNoVar;
};

// A vision-language model's vision part (vision_tower.h): the tower's parameters by role and the
// projector's, in model.parameters() order in `all`. Roles by tower: CLIP and SigLIP as named; qwen2_vl's
// fused qkv is q_w / q_b, its proj o_w / o_b, norm1 / norm2 ln1 / ln2, 2.5-VL's gate_proj gate, up_proj fc1,
// down_proj fc2; the PatchMerger's ln_q is post_ln, its mlp.0 / mlp.2 proj1 / proj2; gemma3's
// mm_input_projection_weight is proj1_w and mm_soft_emb_norm mm_norm_w.
struct VisionParams {
  struct Layer {
    VarId k_w = kNoVar, k_b = kNoVar, v_w = kNoVar, v_b = kNoVar, q_w = kNoVar, q_b = kNoVar, o_w = kNoVar,
          o_b = kNoVar;
    VarId ln1_w = kNoVar, ln1_b = kNoVar, fc1_w = kNoVar, fc1_b = kNoVar, fc2_w = kNoVar, fc2_b = kNoVar,
          ln2_w = kNoVar, ln2_b = kNoVar;
    VarId gate_w = kNoVar, gate_b = kNoVar;
  };
  VarId class_embedding = kNoVar, patch_w = kNoVar, patch_b = kNoVar, position_w = kNoVar, pre_ln_w = kNoVar,
        pre_ln_b = kNoVar;
  std::vector<Layer> layers;
  VarId post_ln_w = kNoVar, post_ln_b = kNoVar;
  VarId proj1_w = kNoVar, proj1_b = kNoVar, proj2_w = kNoVar, proj2_b = kNoVar, mm_norm_w = kNoVar;
  VarId position_ids = kNoVar;   // CLIPVisionEmbeddings' buffer (int64, 1 x positions)
  VarId image_newline = kNoVar;  // llava_next: LlavaNextModel.image_newline (text hidden size)
  std::vector<VarId> all;
  std::vector<VarId> trainable;  // the projector, and the tower unless it is frozen
};

struct ModelParams {
  VarId embed = kNoVar, pos = kNoVar;
  std::vector<LayerParams> layers;
  VarId final_w = kNoVar, final_b = kNoVar, head = kNoVar, head_b = kNoVar;
  std::vector<VarId> all;  // model.parameters() order
  // PEFT LoRA: the adapters by the base weight they wrap; `trainable` is what the optimizer gets
  // (every parameter without LoRA; the adapters, in module order, with it).
  LoraAdapters lora;
  // PEFT's prompt learning (prompt tuning, P-tuning): the prompt encoder's parameters, its embedding first
  // (peft_prompt.h); empty otherwise.
  std::vector<VarId> peft_prompt;
  // PEFT's trainable tokens (peft_trainable_tokens.h): the embedding's TrainableTokensLayer
  // trainable_tokens_delta (trainable) and trainable_tokens_original (a buffer); empty otherwise.
  std::vector<VarId> trainable_tokens;
  std::vector<VarId> trainable;
  BnbWeights bnb;  // bitsandbytes: the quantized weights (the rest of their quantization state is untracked)
  VisionParams vision;  // a vision-language model's tower and projector (empty for a text-only model)
};

// Creates the parameters (in registration order) in the current op; `resident_numel` (optional) says how many
// elements of a parameter of n elements stay on the device (a data-parallel shard). Throws nothing: names
// come from ModelConfig::parameter_shapes().
// `bnb` (format set): the linear layers' weights quantized at load (bnb_quant.h), the other parameters in
// bnb_load_dtype(dtype), cast to fp32 when prepare_model_for_kbit_training runs; every base parameter frozen.
// `lora` (rank > 0): get_peft_model afterwards: every base parameter frozen, adapters created after them.
// `keep` (optional): whether this GPU holds the parameter at all (a pipeline stage holds its own layers).
// `stored_bytes` (optional): the bytes a parameter is stored in where that is not numel x dtype (vLLM's
// quantized weights, vllm_weight_formats.h; nullopt: numel x dtype), allocated as that many bytes rounded up
// to whole elements of `dtype`; the ops still see the parameter's shape and dtype.
enum class ParameterRole : std::uint8_t {
  kLayer,      // of a decoder layer (ParameterShape::layer)
  kEmbedding,  // token embeddings (with tied embeddings also the output layer's weight)
  kPositions,  // learned position embeddings
  kHead,       // final norm and output layer
};
ParameterRole parameter_role(const ParameterShape& parameter);
using KeepParameter = std::function<bool(const ParameterShape&, ParameterRole)>;
using StoredBytes = std::function<std::optional<Bytes>(const ParameterShape&)>;
ModelParams create_parameters(EagerTape& tape, const ModelConfig& model, DType dtype,
                              const std::function<std::int64_t(std::int64_t)>& resident_numel = {},
                              const LoraOptions& lora = {}, const BnbOptions& bnb = {},
                              const KeepParameter& keep = {}, const StoredBytes& stored_bytes = {});

// The dtype non-quantized parameters load in under a BitsAndBytesConfig: transformers' bitsandbytes
// quantizer overrides torch_dtype=None (vramsim's fp32 and amp-* precisions) with float16.
DType bnb_load_dtype(DType dtype);

// Non-trainable device tensors the model creates at construction (registered buffers), kept for the run:
// what the model's code (LayerCode::create_buffers) registers.
struct ModelBuffers {
  VarId causal_mask = kNoVar;  // GPT-2's bool "bias" buffer, (1, 1, S, S)
  VarId rope_cache = kNoVar;   // the staff model's _freq_cis_cache, (2, context, head_dim / 2) fp32
};
ModelBuffers create_buffers(EagerTape& tape, const ModelConfig& model, const TrainingOptions& options);

struct EmitContext {
  TorchOps& ops;
  const ModelConfig& model;
  const TrainingOptions& options;
  const ModelParams& params;
  const ModelBuffers& buffers;
  // Per-forward tensors (created by emit_embeddings, released by end_forward).
  std::vector<VarId> forward_locals;
  VarId rope_cos = kNoVar, rope_sin = kNoVar, additive_mask = kNoVar;
  // The attention kernel (resolve_attention of options.attention): never kSdpa.
  AttentionKind attention = AttentionKind::kEager;
  // The model's code (layer_code(model.code)), looked up once per step rather than at every layer.
  const LayerCode* code = nullptr;
  // model.generate(): the KV cache this forward updates (nullptr: no cache). options.seq is then the new
  // tokens' count, the key length is the cache's, and only the last position's logits are computed
  // (generate passes logits_to_keep=1).
  KvCache* kv_cache = nullptr;
  // --loss chunked-ce: the output projection's per-chunk logits (torchtune's model output, a list), made by
  // the forward and consumed (then deleted) by the loss.
  std::vector<VarId> logit_chunks = {};
  // --compile or --compile-loss: the process's Inductor state (kernels tuned so far); nullptr: all eager.
  // Set also when only the loss is compiled: the model's code checks options.compile as well.
  InductorProcess* inductor = nullptr;
  // A vision-language model's batch of images (b x images_per_sample, channels, side, side), fp32 as the
  // image processor makes them; kNoVar: a text-only forward.
  VarId pixel_values = kNoVar;
  // mllama (mllama_vision.h): the projected image features the cross-attention layers attend to, the
  // additive cross_attention_mask and full_text_row_masked_out_mask; kNoVar: a text-only forward.
  VarId cross_attention_states = kNoVar, cross_attention_mask = kNoVar,
        full_text_row_masked_out_mask = kNoVar;
  // Structure once, sizes many (layer_stamp.h): decoder layers stamped from the first periodic ones;
  // nullptr: every layer emitted directly.
  LayerStamp* stamp = nullptr;
};

VarId emit_embeddings(EmitContext& ctx, VarId ids);
VarId emit_layer(EmitContext& ctx, int layer, VarId x);
// Final norm and lm_head: the logits. Takes over the caller's reference to `x` and drops it when the model's
// code lets go of the variable.
VarId emit_final(EmitContext& ctx, VarId x);
void end_forward(EmitContext& ctx);  // the model's forward() returns: its locals go away
VarId emit_loss(EmitContext& ctx, VarId logits, VarId targets);

// Megatron tensor parallelism inside a layer (tensor_parallel.h): the block's first linears are
// column-parallel, its last row-parallel. With sequence parallelism (TrainingOptions::sequence_parallel) the
// first gather the rank's sequence slice (TorchOps::sequence_parallel_linear) and the last's output is
// reduce-scattered back to it; without, these are the plain linear and the output itself (the all-reduce is
// in place).
VarId column_parallel_linear(EmitContext& ctx, const std::string& name, VarId x, VarId w,
                             VarId bias = kNoVar);
// Takes over the caller's reference to `y`.
VarId row_parallel_output(EmitContext& ctx, const std::string& name, VarId y);
// The row-parallel linear and its output: row_parallel_output(linear(x)), its input cast first under float8
// tensor parallelism.
VarId row_parallel_linear(EmitContext& ctx, const std::string& name, VarId x, VarId w, VarId bias = kNoVar);
// torchtitan's float8 tensor parallelism (--float8 tensorwise with --tp; float8_linear.h
// float8_module_input): the input a module's column-parallel linears share, cast to float8 (and gathered
// under sequence parallelism) once by PrepareFloat8ModuleInput, and a row-parallel linear's input cast by
// Float8RowwiseParallel. Otherwise `x` itself. drop_module_input releases what they made (nothing when they
// returned `x`).
VarId prepare_module_input(EmitContext& ctx, const std::string& module, VarId x);
VarId float8_rowwise_parallel_input(EmitContext& ctx, const std::string& name, VarId x);
void drop_module_input(EmitContext& ctx, VarId prepared, VarId x);

// down_proj(act_fn(gate_proj(x)) * up_proj(x)) as LlamaMLP, MixtralBlockSparseTop2MLP and Qwen2MoeMLP write
// it; `act` is the model's gated activation.
VarId hf_gated_mlp(EmitContext& ctx, const std::string& name, VarId x, const LayerParams::Expert& w);
// A sparse MoE block (MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock) on x [b, s, d] -> [b, s, d].
VarId hf_sparse_moe(EmitContext& ctx, int layer, VarId x);

// "layers.<l>.<what>"
std::string layer_name(int layer, const char* what);

}  // namespace vramsim
