// PEFT's LoRA: target matching and the defaults of peft/utils/constants.py, and lora.Linear.forward
// (peft/tuners/lora/layer.py).
#include "sim/finetune/peft_lora.h"

#include <fmt/format.h>

#include "sim/core/error.h"
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

}  // namespace

std::vector<std::string> lora_target_modules(const LoraOptions& options, const ModelConfig& model) {
  if (options.all_linear || !options.targets.empty()) {
    return options.targets;
  }
  // PEFT reads model.config.model_type: a multimodal wrapper's own, not its text_config's
  const std::string& model_type =
      model.vision.wrapper_model_type.empty() ? model.model_type : model.vision.wrapper_model_type;
  std::vector<std::string> targets = default_targets(model_type);
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

ParameterCount count_parameters(const ModelConfig& model, const LoraOptions& lora) {
  const std::vector<std::string> targets =
      lora.rank > 0 ? lora_target_modules(lora, model) : std::vector<std::string>{};
  std::int64_t base = 0, adapters = 0;
  for (const ParameterShape& s : model.parameter_shapes()) {
    base += numel(s.shape);
    if (lora.rank > 0 && is_lora_target(s, targets, lora.all_linear)) {
      adapters += static_cast<std::int64_t>(lora.rank) * (s.shape[0] + s.shape[1]);  // r x in + out x r
    }
  }
  return {lora.rank > 0 ? adapters : base, base + adapters};
}

VarId peft_lora_forward(TorchOps& ops, const std::string& name, VarId x, VarId result,
                        const LoraAdapter& adapter, const LoraOptions& options, bool training) {
  EagerTape& t = ops.tape();
  // x = self._cast_input_dtype(x, lora_A.weight.dtype): a copy only when the dtypes differ
  const VarId xa = ops.to(name + ".lora_cast_input", x, t.dtype(adapter.lora_a));
  VarId dropped = xa;
  if (training && options.dropout > 0.0) {  // lora_dropout: nn.Dropout(p), nn.Identity when p == 0
    const auto [y, mask] = ops.dropout(name + ".lora_dropout", xa, options.dropout);
    t.drop({mask, xa});
    dropped = y;
  }
  const VarId a = ops.linear(name + ".lora_A", dropped, adapter.lora_a);
  t.drop(dropped);
  const VarId b = ops.linear(name + ".lora_B", a, adapter.lora_b);
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

}  // namespace vramsim
