// PEFT's LoRA: target matching and the defaults of peft/utils/constants.py, and lora.Linear.forward
// (peft/tuners/lora/layer.py).
#include "sim/finetune/peft_lora.h"

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_prompt.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (PEFT main of 2026-08, 5d602fdb), for the model_types
// vramsim reads. phi3, qwen2_moe, qwen3_moe, olmo2, granite, starcoder2, gpt_oss, deepseek_v3 and
// llama4_text have no entry, nor has the gemma3 wrapper (only gemma3_text has): PEFT asks for
// target_modules. The mapping is looked up by model.config.model_type, which for a multimodal checkpoint is
// the wrapper's: llama4 has an entry (q_proj, v_proj; its vision encoder's q_proj / v_proj match too, but
// the vision encoder is not simulated), gemma3 has none.
std::vector<std::string> default_targets(std::string_view model_type) {
  if (model_type == "llama4") {
    return {"q_proj", "v_proj"};
  }
  if (model_type == "gpt2" || model_type == "gpt_bigcode") {
    return {"c_attn"};
  }
  if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral" || model_type == "qwen2" ||
      model_type == "gemma" || model_type == "gemma2" || model_type == "gemma3_text" ||
      model_type == "qwen3") {
    return {"q_proj", "v_proj"};
  }
  if (model_type == "phi") {
    return {"q_proj", "v_proj", "fc1", "fc2"};
  }
  if (model_type == "falcon") {
    return {"query_key_value"};
  }
  return {};
}

bool ends_with_module(std::string_view module, std::string_view target) {
  return module == target || (module.size() > target.size() && module.ends_with(target) &&
                              module[module.size() - target.size() - 1] == '.');
}

// TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING (same PEFT commit), for the model_types vramsim reads.
std::vector<std::string> ia3_default_targets(std::string_view model_type) {
  if (model_type == "gpt2" || model_type == "gpt_bigcode") {
    return {"c_attn", "mlp.c_proj"};
  }
  if (model_type == "llama" || model_type == "mistral") {
    return {"k_proj", "v_proj", "down_proj"};
  }
  if (model_type == "mixtral") {
    return {"k_proj", "v_proj", "w2"};
  }
  if (model_type == "qwen2" || model_type == "gemma" || model_type == "gemma2" ||
      model_type == "gemma3_text" || model_type == "qwen3" || model_type == "llama4") {
    return {"q_proj", "v_proj", "down_proj"};
  }
  if (model_type == "phi") {
    return {"q_proj", "v_proj", "fc2"};
  }
  if (model_type == "falcon") {
    return {"query_key_value", "dense_4h_to_h"};
  }
  return {};
}

}  // namespace

std::vector<std::string> lora_target_modules(const LoraOptions& options, const ModelConfig& model) {
  if (options.all_linear || !options.targets.empty()) {
    return options.targets;
  }
  // PEFT reads model.config.model_type: a multimodal wrapper's own, not its text_config's
  const std::string& model_type =
      model.vision.wrapper_model_type.empty() ? model.model_type : model.vision.wrapper_model_type;
  // LoHa's, LoKr's and VeRA's mappings are copies of LoRA's; VeRA's phi entry is q_proj, v_proj
  std::vector<std::string> targets = options.method == PeftMethod::kIa3 ? ia3_default_targets(model_type)
                                     : options.method == PeftMethod::kVera && model_type == "phi"
                                         ? std::vector<std::string>{"q_proj", "v_proj"}
                                         : default_targets(model_type);
  if (targets.empty()) {
    throw InputError(
        fmt::format("--lora-targets: PEFT has no default target_modules for model_type '{}'; "
                    "name them (e.g. q_proj,v_proj or all-linear)",
                    model_type));
  }
  return targets;
}

void parse_lora_targets(std::string_view text, LoraOptions& out, std::string_view option) {
  out.targets.clear();
  out.all_linear = text == "all-linear";
  if (out.all_linear) {
    return;
  }
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    if (item.empty()) {
      throw InputError(fmt::format("{}: empty module name in '{}'", option, text));
    }
    for (char ch : item) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.')) {
        throw InputError(
            fmt::format("{}: '{}' is not a module name (letters, digits, '_' and '.')", option, item));
      }
    }
    out.targets.emplace_back(item);
    at = comma + 1;
  }
}

void validate(const LoraOptions& o) {
  if (o.rank < 0 || o.rank > 65536) {
    throw InputError(fmt::format("--lora-rank: {} is out of range (1..65536; 0: no LoRA)", o.rank));
  }
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    throw InputError(fmt::format("--lora-dropout: {} is not a probability in [0, 1)", o.dropout));
  }
  if (!(o.alpha > 0.0)) {
    throw InputError(fmt::format("--lora-alpha: {} must be positive", o.alpha));
  }
  const PeftMethodInfo& info = peft_method_info(o.method);
  if (!info.not_modelled.empty()) {
    throw InputError(fmt::format("--peft-method: {}: {} (vramsim)", info.name, info.not_modelled));
  }
  if (o.use_dora && o.method != PeftMethod::kLora) {
    throw InputError("--use-dora: a LoraConfig option (--peft-method lora)");
  }
  if (o.lora_fa && (o.method != PeftMethod::kLora || o.use_dora)) {
    throw InputError("--lora-fa: create_lorafa_optimizer trains plain LoRA adapters (--peft-method lora)");
  }
  const bool prompt = o.method == PeftMethod::kPromptTuning || o.method == PeftMethod::kPTuning ||
                      o.method == PeftMethod::kPrefixTuning;
  if (prompt && (o.num_virtual_tokens < 1 || o.num_virtual_tokens > 65536)) {
    throw InputError(fmt::format(
        "--num-virtual-tokens: {} virtual tokens (PromptLearningConfig.num_virtual_tokens; 1..65536)",
        o.num_virtual_tokens));
  }
  if (o.encoder_hidden_size < 0 || o.encoder_hidden_size > 1 << 20) {
    throw InputError(fmt::format("--encoder-hidden-size: {} is out of range", o.encoder_hidden_size));
  }
  if (o.method == PeftMethod::kTrainableTokens && o.trainable_tokens < 1) {
    throw InputError(
        "--token-indices: TrainableTokensConfig.token_indices is required (--peft-method "
        "trainable-tokens)");
  }
  if (o.init_r < 1 || o.init_r > 65536) {
    throw InputError(fmt::format("--init-r: {} is out of range (AdaLoraConfig.init_r, 1..65536)", o.init_r));
  }
  if (o.block_size < 0 || o.block_size > 65536 || o.block_num < 0 || o.block_num > 65536) {
    throw InputError("--oft-block-size / --boft-block-size / --boft-block-num: out of range (0..65536)");
  }
  if (o.num_cayley_neumann_terms < 1 || o.num_cayley_neumann_terms > 64) {
    throw InputError(
        fmt::format("--num-cayley-neumann-terms: {} is out of range (1..64)", o.num_cayley_neumann_terms));
  }
  if (o.decompose_factor == 0 || o.decompose_factor < -1 || o.decompose_factor > 65536) {
    throw InputError(
        fmt::format("--decompose-factor: {} (LoKrConfig: -1 or a factor >= 1)", o.decompose_factor));
  }
}

bool is_lora_target(const ParameterShape& parameter, const std::vector<std::string>& targets,
                    bool all_linear) {
  const std::string_view name = parameter.name;
  if (parameter.shape.size() != 2 || !name.ends_with(".weight")) {
    return false;  // nn.Linear and Conv1D weights are matrices; norms and biases are vectors
  }
  const std::string_view module = name.substr(0, name.size() - 7);
  if (all_linear) {  // every nn.Linear / Conv1D but the output layer; embeddings are not linear layers
    const bool embedding = module.ends_with("embed_tokens") || module.ends_with("wte") ||
                           module.ends_with("wpe") || module == "token_embeddings";
    return !embedding && module != "lm_head";
  }
  for (const std::string& t : targets) {
    if (ends_with_module(module, t)) {
      return true;
    }
  }
  return false;
}

std::pair<std::int64_t, std::int64_t> linear_in_out(const ModelConfig& model, const Shape& weight) {
  // nn.Linear stores (out, in); GPT-2's Conv1D (in, out)
  const bool conv1d = model.family == ModelFamily::kGpt2 && !model.linear_weights;
  return conv1d ? std::pair{weight[0], weight[1]} : std::pair{weight[1], weight[0]};
}

ParameterCount count_parameters(const ModelConfig& model, const LoraOptions& lora) {
  // PeftModel.get_nb_trainable_parameters: every parameter (not buffers: VeRA's shared vera_A / vera_B),
  // the trainable ones apart
  std::int64_t base = 0;
  for (const ParameterShape& s : model.parameter_shapes()) {
    base += numel(s.shape);
  }
  if (!lora.enabled()) {
    return {base, base};
  }
  std::int64_t trainable = 0, frozen = 0;
  if (const PeftLinearMethod* method = linear_method(lora)) {
    const std::vector<std::string> targets = lora_target_modules(lora, model);
    const std::vector<std::string> feedforward =
        lora.method == PeftMethod::kIa3 ? ia3_feedforward_modules(lora, model) : std::vector<std::string>{};
    for (const ParameterShape& s : model.parameter_shapes()) {
      if (!is_lora_target(s, targets, lora.all_linear)) {
        continue;
      }
      const auto [in, out] = linear_in_out(model, s.shape);
      for (const AdapterTensor& a :
           method->layer_tensors(in, out, lora, is_lora_target(s, feedforward, false))) {
        (a.trainable ? trainable : frozen) += numel(a.shape);
      }
    }
  } else if (lora.method ==
             PeftMethod::kTrainableTokens) {  // trainable_tokens_delta; the original is a buffer
    trainable += static_cast<std::int64_t>(lora.trainable_tokens) * model.d_model;
  } else {
    for (const AdapterTensor& a : prompt_encoder_tensors(model, lora)) {
      trainable += numel(a.shape);
    }
  }
  return {trainable, base + trainable + frozen};
}

VarId peft_lora_forward(TorchOps& ops, const std::string& name, VarId x, VarId result,
                        const LoraAdapter& adapter, const LoraOptions& options, bool training,
                        const LoraLinearFn& lora_a, const LoraLinearFn& lora_b) {
  EagerTape& t = ops.tape();
  // x = self._cast_input_dtype(x, lora_A.weight.dtype): a copy only when the dtypes differ
  const VarId xa = ops.to(name + ".lora_cast_input", x, t.dtype(adapter.lora_a));
  VarId dropped = xa;
  if (training && options.dropout > 0.0) {  // lora_dropout: nn.Dropout(p), nn.Identity when p == 0
    const auto [y, mask] = ops.dropout(name + ".lora_dropout", xa, options.dropout);
    t.drop({mask, xa});
    dropped = y;
  }
  const VarId a = lora_a ? lora_a(name + ".lora_A", dropped, adapter.lora_a)
                         : ops.linear(name + ".lora_A", dropped, adapter.lora_a);
  t.drop(dropped);
  const VarId b =
      lora_b ? lora_b(name + ".lora_B", a, adapter.lora_b) : ops.linear(name + ".lora_B", a, adapter.lora_b);
  t.drop(a);
  const VarId scaled = ops.scale(name + ".lora_scaling", b);  // * scaling
  t.drop(b);
  const DType result_dtype = t.dtype(result);
  const VarId sum = ops.add(name + ".lora_add", result, scaled);  // result = result + ...
  t.drop({result, scaled});
  const VarId out = ops.to(name + ".lora_result_dtype", sum, result_dtype);  // result.to(torch_result_dtype)
  t.drop(sum);
  return out;
}

namespace {

// LoRA (lora/layer.py Linear.update_layer): lora_A (r, in) and lora_B (out, r). LoRA-FA
// (peft/optimizers/lorafa.py create_lorafa_optimizer): `param.requires_grad_(False)` for every lora_A, so
// lora_A's input is not saved and only lora_B is in the optimizer. rsLoRA changes the scaling only.
class LoraMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    return {{"lora_A.default.weight", {o.rank, in}, !o.lora_fa}, {"lora_B.default.weight", {out, o.rank}}};
  }
  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& adapter, const LoraOptions& o,
                bool training) const override {
    return peft_lora_forward(ops, name, x, base(x), adapter, o, training);
  }
};

}  // namespace

const PeftLinearMethod& lora_method() {
  static const LoraMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
