// The shape of a decoder-only Transformer: what `--model` names, either a preset or a Hugging Face
// config.json, and the parameter tensors it registers.
//
// Two families cover the models people train, and the fields below say how a Hugging Face model_type
// departs from its family (hf_config.cpp reads them from config.json, one parser per model_type):
//   gpt2  : LayerNorm, learned positions, GELU MLP (d_ff = 4 d_model), biases, tied lm_head
//           (gpt2; gpt_bigcode: nn.Linear instead of Conv1D, one key/value head with multi_query)
//   llama : RMSNorm, RoPE, gated MLP, no biases, untied lm_head, grouped-query attention
//           (llama, mistral; qwen2: q/k/v biases; gemma: (1 + w) RMSNorm in fp32, GeGLU, scaled and tied
//           embeddings; gemma2: + sandwich norms and logit soft-capping; phi3: fused qkv_proj and
//           gate_up_proj; mixtral, qwen2_moe: a sparse mixture of experts instead of the MLP)
// `code` names whose Python the step runs (layer_code.h): "torch-modules" (Hugging Face transformers) or
// "cs336-basics" (the CS336 staff model), or a code base a test registers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramsim {

enum class ModelFamily : std::uint8_t { kGpt2, kLlama };
// kGemmaRmsNorm: GemmaRMSNorm, computed in fp32 with (1 + weight), cast back at the end.
enum class NormKind : std::uint8_t { kLayerNorm, kRmsNorm, kGemmaRmsNorm };
// kGelu: fc -> act -> proj (GPT-2). kGated: down(act(gate(x)) * up(x)) with `gelu` or SiLU as act (Llama's
// SwiGLU; Gemma's GeGLU).
enum class MlpKind : std::uint8_t { kGelu, kGated };
enum class GatedActivation : std::uint8_t { kSilu, kGeluTanh };
// GPT-2's activation as config.json's activation_function names it: "gelu_new" (HF's NewGELUActivation,
// written out in Python: several saved tensors), "gelu_pytorch_tanh" (F.gelu(approximate="tanh"), one saved
// input) or "gelu" (F.gelu, exact).
enum class GeluKind : std::uint8_t { kNew, kPytorchTanh, kExact };

// Dropout probabilities in training, per site, as config.json sets them (GPT-2: embd_pdrop after the
// embeddings, attn_pdrop on the attention probabilities, resid_pdrop after each block's output projections;
// Llama / Mistral / Qwen2: attention_dropout on the probabilities, nothing else). Presets have none.
struct DropoutRates {
  double embeddings = 0.0;
  double attention = 0.0;
  double residual = 0.0;
};
// A sparse mixture-of-experts block in place of the MLP (Hugging Face's MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock): a router Linear (d_model -> n_experts), softmax in fp32, top-k, then each expert
// (a gated MLP of expert_d_ff) runs on the tokens routed to it and index_add_s its weighted output. How
// many rows each expert gets is the routing model's (expert_parallel.h, --moe-imbalance): on one GPU the
// rows saved for backward sum to tokens * top_k whatever the balance and only the largest transient expert
// tensors depend on it; under expert parallelism the busiest rank's saved rows grow with it.
struct MoeConfig {
  std::int64_t n_experts = 0;  // 0: a dense model
  std::int64_t top_k = 0;
  std::int64_t expert_d_ff = 0;
  bool normalize_top_k = true;          // routing_weights /= routing_weights.sum(-1) (Mixtral; qwen2_moe's
                                        // norm_topk_prob)
  std::int64_t shared_expert_d_ff = 0;  // qwen2_moe: a dense expert on every token, sigmoid-gated; 0: none
  std::int64_t sparse_step = 1;  // qwen2_moe decoder_sparse_step: layer l is sparse when (l+1) % step == 0
  std::vector<std::int64_t> dense_layers;  // qwen2_moe mlp_only_layers: dense MLP (d_ff) in these layers
  // The shared expert's output is scaled by sigmoid(shared_expert_gate(x)) (qwen2_moe); false: added as it is
  // (deepseek_v3's shared_experts, llama4's shared_expert).
  bool shared_expert_gated = true;
  // The experts are three-dimensional parameters (gpt_oss: gate_up_proj [E, d, 2 ff] with biases, down_proj
  // [E, ff, d]; llama4: the same without biases), not one module per expert; each expert's slice is taken
  // with advanced indexing (a copy; IndexBackward writes into zeros of the whole parameter).
  bool fused_experts = false;
  bool expert_bias = false;  // gpt_oss: gate_up_proj_bias, down_proj_bias
  bool router_bias = false;  // gpt_oss: the router's bias
  // Expert parallelism (expert_parallel.h): this rank holds experts [0, n_experts / expert_parallel) of the
  // n_experts the router scores (Megatron's num_local_experts). Megatron and torchtitan need expert_parallel
  // to divide n_experts; vLLM's determine_expert_map gives the remainder to the first ranks
  // (vllm_expert_parallel.h), so this is the ceiling: the first rank's count, the most any rank holds.
  std::int64_t expert_parallel = 1;
  std::int64_t local_experts() const { return (n_experts + expert_parallel - 1) / expert_parallel; }
  // Megatron's expert tensor parallelism (expert_parallel.h, --expert-tensor-parallel): each local expert's
  // fc1 split by columns and fc2 by rows over this many ranks (expert_d_ff is the rank's share), and the
  // dispatcher gathering their tokens; 1: whole experts.
  std::int64_t expert_tensor_parallel = 1;

  bool sparse(std::int64_t layer) const;
};

inline constexpr std::string_view kTorchModulesCode = "torch-modules";
inline constexpr std::string_view kCs336BasicsCode = "cs336-basics";

// One registered parameter, in module registration order (the order model.parameters() yields).
struct ParameterShape {
  std::string name;                 // PyTorch state_dict name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;  // elements per dimension
  int layer = -1;                   // decoder layer, -1 for embeddings / final norm / head

  std::int64_t numel() const;
};

struct ModelConfig {
  std::string name;
  ModelFamily family = ModelFamily::kLlama;
  std::string code{kTorchModulesCode};  // a layer_code() name
  std::int64_t vocab_size = 0;
  std::int64_t d_model = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;  // == n_heads without grouped-query attention
  std::int64_t head_dim = 0;    // d_model / n_heads unless the config says otherwise
  std::int64_t d_ff = 0;
  std::int64_t max_positions = 0;  // learned position table rows (gpt2); RoPE context (llama)
  bool tied_embeddings = false;
  bool bias = false;      // every Linear has a bias (gpt2)
  bool qkv_bias = false;  // only q/k/v projections have one (Qwen2)
  NormKind norm = NormKind::kRmsNorm;
  MlpKind mlp = MlpKind::kGated;
  GeluKind gelu = GeluKind::kNew;  // with MlpKind::kGelu: GPT2Config's default activation_function
  GatedActivation gated_activation = GatedActivation::kSilu;  // with MlpKind::kGated
  DropoutRates dropout;

  // How a model_type departs from its family (all off for gpt2 and llama).
  std::string model_type;         // config.json's model_type ("gemma2", ...); the family's name for presets
  bool linear_weights = false;    // gpt2 family with nn.Linear (gpt_bigcode) rather than Conv1D
  bool fused_qkv = false;         // llama family: one qkv_proj (phi3)
  bool fused_gate_up = false;     // llama family: one gate_up_proj, chunked (phi3)
  bool scale_embeddings = false;  // gemma: hidden_states * sqrt(hidden_size), a tensor of the dtype
  bool sandwich_norms = false;    // gemma2: post-attention and pre/post-feedforward norms
  double attn_logit_softcapping = 0;   // gemma2: tanh(scores / cap) * cap in eager attention; 0: none
  double final_logit_softcapping = 0;  // gemma2: the same on the logits
  // Eager attention's softmax: in fp32 and cast back (Llama, Gemma, Mistral, ...: dtype=torch.float32), or
  // in the scores' dtype (GPT-2's nn.functional.softmax(attn_weights, dim=-1)).
  bool softmax_in_fp32 = true;
  // Gemma-2 builds its 4D causal mask for SDPA too (no is_causal shortcut), so SDPA cannot take its flash
  // backend, and every other layer (sliding-window attention) builds a mask of its own.
  bool always_builds_mask = false;
  // _update_causal_mask as Llama writes it (full, triu, then the cache-position comparison) or as Mistral
  // does (full and the comparison, no triu): Mistral, Mixtral, Qwen2-MoE and Phi-3 use the latter.
  bool mistral_mask = false;
  MoeConfig moe;

  // Layer variants of the model_types after Llama (all off for the older ones):
  // q_norm / k_norm: an RMSNorm on each head's queries and keys (qwen3, qwen3_moe, gemma3: weight of
  // head_dim) or on the whole projection before the heads are split (olmo2: weight of n_heads * head_dim).
  enum class QkNorm : std::uint8_t { kNone, kPerHead, kWholeProjection };
  QkNorm qk_norm = QkNorm::kNone;
  // olmo2: no norm before attention / MLP; post_attention_layernorm and post_feedforward_layernorm on their
  // outputs before the residual sums.
  bool post_norms_only = false;
  // phi, falcon (parallel_attn): attention and MLP read the same normed input, x + attn + mlp. Falcon's new
  // decoder architecture normalises each branch's input separately (ln_attn, ln_mlp).
  bool parallel_block = false;
  bool parallel_two_norms = false;
  bool lm_head_bias = false;  // phi: lm_head has a bias
  // granite: embeddings * embedding_multiplier, each branch * residual_multiplier before its residual sum,
  // logits / logits_scaling (1.0: no op).
  double embedding_multiplier = 1.0;
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  bool attention_sinks = false;     // gpt_oss: a learned sink logit per head (self_attn.sinks)
  std::int64_t sliding_window = 0;  // the local layers' window as config.json gives it (0: none); see README
  // The decoder layers whose attention is that sliding window, in increasing order (empty: none), as
  // config.json's layer_types lists them ("sliding_attention") or, without the key, as the model's
  // configuration class writes its default list (transformers' Gemma2Config, Gemma3TextConfig, GptOssConfig,
  // Qwen2Config / Qwen3Config with use_sliding_window: layers from max_window_layers on; Mistral and
  // Starcoder2 with a sliding_window: every layer). vLLM's V1 KV-cache manager gives these layers their own
  // KV-cache groups (vllm_kv_cache_groups.h); the training and transformers-generation graphs do not read it.
  std::vector<std::int64_t> sliding_window_layers;
  // llama4: the decoder layers whose attention is chunked local attention of attention_chunk_size tokens (the
  // RoPE layers, no_rope_layers[l] == 1), in increasing order; vLLM gives them ChunkedLocalAttentionSpec's
  // KV-cache groups (vllm_kv_cache_groups.h). The training and transformers-generation graphs do not read it.
  std::int64_t attention_chunk_size = 0;
  std::vector<std::int64_t> chunked_attention_layers;
  // Rows of the token embedding beyond vocab_size (mllama: MllamaTextModel.embed_tokens is
  // nn.Embedding(vocab_size + 8, hidden_size); its lm_head keeps vocab_size rows). 0 for every other model.
  std::int64_t extra_embedding_rows = 0;
  // deepseek_v3 multi-head latent attention: queries through a q_lora_rank bottleneck (0: a plain q_proj),
  // keys and values from a kv_lora_rank latent plus one shared rotary key of qk_rope_head_dim.
  struct Mla {
    std::int64_t q_lora_rank = 0;
    std::int64_t kv_lora_rank = 0;  // 0: not MLA
    std::int64_t qk_nope_head_dim = 0;
    std::int64_t qk_rope_head_dim = 0;
    std::int64_t v_head_dim = 0;
  };
  Mla mla;
  // A multimodal wrapper's vision part (gemma3's vision_config), which transformers builds and loads with the
  // language model but vramsim does not simulate: its parameters as transformers registers them (the vision
  // tower, then the projector), reported beside the language model's and not in its bill (0: text-only).
  struct VisionPart {
    // The wrapper's own model_type ("gemma3", "llama4"; "" for a text-only config.json): model_type above is
    // its text_config's, and PEFT keys its default target_modules by the wrapper's (peft_lora.cpp).
    std::string wrapper_model_type;
    std::string model_type;                 // vision_config's model_type ("siglip_vision_model")
    std::int64_t tower_parameters = 0;      // SiglipVisionModel
    std::int64_t projector_parameters = 0;  // Gemma3MultiModalProjector
    // mllama: the language model's MllamaCrossAttentionDecoderLayers (text_config.cross_attention_layers),
    // Meta's "vision adapter": registered inside the language model, run only on image features, so counted
    // with the vision part (0 for every other model). They run between the self-attention layers on a
    // batch with images (mllama_vision.h).
    std::int64_t cross_attention_parameters = 0;
    std::vector<std::int64_t> cross_attention_layers;  // their indices among text_config's layers
    // mllama: MllamaVisionConfig's shapes (mllama_parameters.h lists the parameters they make)
    struct Mllama {
      std::int64_t hidden = 0, intermediate = 0, layers = 0, global_layers = 0, channels = 3, image_size = 0,
                   patch_size = 0, max_num_tiles = 0, aspect_ratios = 0, output_dim = 0, heads = 0;
      // intermediate_layers_indices: the local transformer's hidden states (layer inputs) concatenated with
      // the global transformer's output (mllama_vision.h)
      std::vector<std::int64_t> intermediate_layers;
    };
    Mllama mllama;
    std::int64_t total() const {
      return tower_parameters + projector_parameters + cross_attention_parameters;
    }
    // A vision encoder vramsim simulates (vision_tower.h): llava's CLIPVisionModel and
    // LlavaMultiModalProjector, gemma3's SiglipVisionModel and Gemma3MultiModalProjector, qwen2_vl's and
    // qwen2_5_vl's vision transformer and PatchMerger (qwen2_vl_vision.h). layers == 0: the vision part is
    // counted only (llama4).
    enum class Tower {
      kClip,      // llava: CLIPVisionModel, LlavaMultiModalProjector
      kSiglip,    // gemma3: SiglipVisionModel, Gemma3MultiModalProjector (avg pooling, RMSNorm, matmul)
      kQwen2Vl,   // qwen2_vl: Qwen2VisionTransformerPretrainedModel (LayerNorm, QuickGELU MLP), PatchMerger
      kQwen25Vl,  // qwen2_5_vl: Qwen2_5_VisionTransformerPretrainedModel (RMSNorm, SiLU gated MLP, windows)
    };
    struct Clip {
      Tower tower = Tower::kClip;
      std::int64_t hidden = 0;        // vision_config.hidden_size
      std::int64_t intermediate = 0;  // vision_config.intermediate_size
      std::int64_t layers = 0;        // vision_config.num_hidden_layers
      std::int64_t heads = 0;         // vision_config.num_attention_heads
      std::int64_t image_size = 0;    // vision_config.image_size (pixels per side)
      std::int64_t patch_size = 0;    // vision_config.patch_size
      std::int64_t channels = 3;      // vision_config.num_channels
      // vision_feature_layer: the index into the encoder's hidden_states (0: the embeddings after
      // pre_layrnorm; -1: the last layer's output) whose features the projector reads.
      std::int64_t feature_layer = -2;
      bool drop_cls = true;        // vision_feature_select_strategy "default": features[:, 1:]; "full": all
      bool projector_bias = true;  // multimodal_projector_bias
      // gemma3: mm_tokens_per_image (Gemma3MultiModalProjector's AvgPool2d to its square root per side)
      std::int64_t pooled_tokens = 0;
      bool pooling_head = false;  // SigLIP's vision_use_head: SiglipMultiheadAttentionPoolingHead registered
      // qwen2_vl / qwen2_5_vl (Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig): patch_size is the spatial
      // patch, temporal_patch_size frames per patch (an image is repeated to fill them), spatial_merge_size^2
      // patches per language-model token (PatchMerger); 2.5-VL's window attention: window_size pixels per
      // window side, full attention only in full_attention_layers (fullatt_block_indexes).
      std::int64_t temporal_patch_size = 1;
      std::int64_t spatial_merge_size = 1;
      std::int64_t window_size = 0;
      std::vector<std::int64_t> full_attention_layers;
      // llava_next: image_grid_pinpoints, the (height, width) resolutions in pixels "anyres" tiles an image
      // into (llava_next_anyres.h); empty for every other model
      std::vector<std::pair<std::int64_t, std::int64_t>> grid_pinpoints;
      std::int64_t patches_per_side() const { return image_size / patch_size; }
      // Tokens each image becomes in the language model's sequence (fixed-size towers; qwen2_vl's depend on
      // the image: qwen2_vl_vision.h).
      std::int64_t tokens_per_image() const {
        if (pooled_tokens > 0) {
          return pooled_tokens;
        }
        return patches_per_side() * patches_per_side() + (drop_cls ? 0 : 1);
      }
      // The encoder layers that run before the selected hidden state exists (all of them run).
      std::int64_t feature_layers_run() const {
        return feature_layer < 0 ? layers + 1 + feature_layer : feature_layer;
      }
    };
    Clip clip;
    // qwen2_vl / qwen2_5_vl: the language model's rotary positions are M-RoPE's (3, batch, seq) position
    // ids (Qwen2VLModel.get_rope_index)
    bool mrope = false;
    bool simulated() const { return clip.layers > 0; }
  };
  VisionPart vision;

  std::int64_t kv_dim() const { return n_kv_heads * head_dim; }
  std::int64_t q_dim() const { return n_heads * head_dim; }
  std::vector<ParameterShape> parameter_shapes() const;
  std::int64_t parameter_count() const;
};

// The preset names load_model() accepts, in the order `--list-models` shows them.
std::vector<std::string> model_preset_names();

// A preset by name, or throws InputError("--model: unknown model 'x' (known: ...)").
ModelConfig model_preset(std::string_view name);

// `name_or_path` is a preset name or a path to a Hugging Face config.json (model_type gpt2, gpt_bigcode,
// llama, mistral, qwen2, gemma, gemma2, phi3, mixtral, qwen2_moe, qwen3, qwen3_moe, gemma3_text, gemma3,
// olmo2, granite, phi, starcoder2, falcon, gpt_oss, llama4_text, llama4, deepseek_v3, llava, llava_next,
// qwen2_vl, qwen2_5_vl, mllama). Throws InputError naming the file and key for an unreadable file, an unknown
// model_type, a missing key or a value of the wrong type.
ModelConfig load_model(const std::string& name_or_path);

// Same, from JSON text; `source` names the file in messages (hf_config.cpp).
ModelConfig model_from_hf_config_json(std::string_view json_text, std::string_view source);
// The model_types model_from_hf_config_json accepts, in the order messages list them.
std::vector<std::string> supported_model_types();

// The parameters Hugging Face transformers registers for this model_type, in model.parameters() order (the
// torch-modules code's; other codes name theirs).
void transformers_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out);

}  // namespace vramsim
