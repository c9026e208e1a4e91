// The shape of a decoder-only Transformer: what `--model` names, either a preset or a Hugging Face
// config.json, and the parameter tensors it registers.
//
// Two families cover the models people train:
//   gpt2  : LayerNorm, learned positions, GELU MLP (d_ff = 4 d_model), biases, tied lm_head
//   llama : RMSNorm, RoPE, SwiGLU MLP, no biases (Qwen2: q/k/v biases), untied lm_head, grouped-query
//   attention
// `code` says whose Python the step runs, because PyTorch eager memory follows the code line by line (which
// intermediates exist, which a variable keeps alive, what autograd saves), not just the architecture:
//   kTorchModules      : torch.nn modules as Hugging Face transformers writes them (nn.Linear, F.softmax,
//   ...) kCs336Basics       : the CS336 staff model, cs336-basics/cs336_basics/model.py (BasicsTransformerLM)
//   kCs336Kkaitlyn111  : the student model the kkaitlyn111 snapshots ran (cs336_basics/transformer.py of
//                        kkaitlyn111/cs336-assignment1, imported by cs336-a2-systems' benchmark.py)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramsim {

enum class ModelFamily : std::uint8_t { kGpt2, kLlama };
enum class NormKind : std::uint8_t { kLayerNorm, kRmsNorm };
enum class MlpKind : std::uint8_t { kGelu, kSwiGlu };
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
enum class ModelCode : std::uint8_t { kTorchModules, kCs336Basics, kCs336Kkaitlyn111 };

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
  ModelCode code = ModelCode::kTorchModules;
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
  MlpKind mlp = MlpKind::kSwiGlu;
  GeluKind gelu = GeluKind::kNew;  // with MlpKind::kGelu: GPT2Config's default activation_function
  DropoutRates dropout;

  std::int64_t kv_dim() const { return n_kv_heads * head_dim; }
  std::int64_t q_dim() const { return n_heads * head_dim; }
  std::vector<ParameterShape> parameter_shapes() const;
  std::int64_t parameter_count() const;
};

// The preset names load_model() accepts, in the order `--list-models` shows them.
std::vector<std::string> model_preset_names();

// A preset by name, or throws InputError("--model: unknown model 'x' (known: ...)").
ModelConfig model_preset(std::string_view name);

// `name_or_path` is a preset name or a path to a Hugging Face config.json (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel). Throws InputError naming the file and key for an
// unreadable file, an unknown architecture, a missing key or a value of the wrong type.
ModelConfig load_model(const std::string& name_or_path);

// Same, from JSON text; `source` names the file in messages.
ModelConfig model_from_hf_config_json(std::string_view json_text, std::string_view source);

std::string_view model_code_name(ModelCode code);  // "torch-modules", "cs336-basics", "cs336-kkaitlyn111"
ModelCode parse_model_code(std::string_view text, std::string_view option);

}  // namespace vramsim
