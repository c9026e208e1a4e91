// The registry of PEFT methods (peft_method.h) and what they share: the adapter dtype and IA3's
// feedforward modules.
#include "sim/finetune/peft_method.h"

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_prompt.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/graph/eager_tape.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {

const std::vector<PeftMethodInfo>& peft_methods() {
  static const std::vector<PeftMethodInfo> kMethods{
      {PeftMethod::kLora, "lora", "LORA",
       "LoraConfig(r, lora_alpha, lora_dropout, target_modules, use_rslora, use_dora); LoRA-FA: "
       "peft.optimizers.create_lorafa_optimizer",
       &lora_method(), ""},
      {PeftMethod::kIa3, "ia3", "IA3", "IA3Config(target_modules, feedforward_modules)", &ia3_method(), ""},
      {PeftMethod::kPromptTuning, "prompt-tuning", "PROMPT_TUNING", "PromptTuningConfig(num_virtual_tokens)",
       nullptr, ""},
      {PeftMethod::kPTuning, "p-tuning", "P_TUNING",
       "PromptEncoderConfig(num_virtual_tokens, encoder_hidden_size, encoder_reparameterization_type=MLP)",
       nullptr, ""},
      {PeftMethod::kPrefixTuning, "prefix-tuning", "PREFIX_TUNING",
       "PrefixTuningConfig(num_virtual_tokens, prefix_projection, encoder_hidden_size)", nullptr, ""},
      {PeftMethod::kLoha, "loha", "LOHA", "LoHaConfig(r, alpha, target_modules)", &loha_method(), ""},
      {PeftMethod::kLokr, "lokr", "LOKR", "LoKrConfig(r, alpha, target_modules, decompose_factor)",
       &lokr_method(), ""},
      {PeftMethod::kVera, "vera", "VERA", "VeraConfig(r, target_modules)", &vera_method(), ""},
      {PeftMethod::kOft, "oft", "OFT",
       "OFTConfig(r or oft_block_size, use_cayley_neumann, num_cayley_neumann_terms, target_modules)",
       &oft_method(), ""},
      {PeftMethod::kBoft, "boft", "BOFT",
       "BOFTConfig(boft_block_size or boft_block_num, boft_n_butterfly_factor, target_modules)",
       &boft_method(), ""},
      {PeftMethod::kAdalora, "adalora", "ADALORA",
       "AdaLoraConfig(init_r, target_r, orth_reg_weight, target_modules); update_and_allocate each step",
       &adalora_method(), ""},
      {PeftMethod::kTrainableTokens, "trainable-tokens", "TRAINABLE_TOKENS",
       "TrainableTokensConfig(token_indices, target_modules=embed_tokens)", nullptr, ""},
  };
  return kMethods;
}

const PeftMethodInfo& peft_method_info(PeftMethod method) {
  for (const PeftMethodInfo& m : peft_methods()) {
    if (m.method == method) {
      return m;
    }
  }
  return peft_methods().front();
}

PeftMethod parse_peft_method(std::string_view text) {
  std::string known;
  for (const PeftMethodInfo& m : peft_methods()) {
    if (m.name == text) {
      return m.method;
    }
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  throw InputError(fmt::format("--peft-method: unknown value '{}' (known: {})", text, known));
}

const PeftLinearMethod* linear_method(const LoraOptions& o) {
  if (o.method == PeftMethod::kLora && o.use_dora) {
    return &dora_method();
  }
  return peft_method_info(o.method).linear;
}

void check_peft_job(const ModelConfig& m, const TrainingOptions& o) {
  if (is_trainable_tokens(o.lora) && (o.generate_tokens > 0 || o.pipeline.stages > 1 ||
                                      o.tensor_parallel > 1 || o.loss == LossKind::kChunkedCrossEntropy)) {
    throw InputError(
        "--peft-method trainable-tokens: with --generate, --pp, --tp or --loss chunked-ce is not modelled "
        "(vramsim)");
  }
  if (o.lora.method == PeftMethod::kPrefixTuning &&
      (o.generate_tokens > 0 || o.pipeline.stages > 1 || o.tensor_parallel > 1 ||
       o.context_parallel.degree > 1 || o.checkpointing != Checkpointing::kNone ||
       o.compile != CompileMode::kNone || !layer_code(m.code).follows_transformers() ||
       m.family == ModelFamily::kGpt2 || m.mla.kv_lora_rank > 0)) {
    throw InputError(
        "--peft-method prefix-tuning: with --generate, --pp, --tp, --cp, --checkpointing, --compile-mode, or "
        "on a model other than Llama-style transformers code, is not modelled (vramsim)");
  }
  if (o.lora.method == PeftMethod::kAdalora &&
      (o.pipeline.stages > 1 || o.data_parallel.scheme.starts_with("zero3"))) {
    // AdaLoraModel.forward adds the regulariser to the whole model's outputs.loss; under ZeRO-3
    // RankAllocator.update_ipt reads deepspeed.utils.safe_get_full_grad of partitioned parameters
    throw InputError("--peft-method adalora: with --pp or --zero 3 is not modelled (vramsim)");
  }
  // Context parallelism: PeftModelForCausalLM.forward prepends the virtual tokens to inputs_embeds after
  // context_parallel has sharded the ids, so every rank would attend over its own copy of them; no library
  // runs that (torchtune's CP recipes have no prompt learning).
  if (is_prompt_learning(o.lora) &&
      (o.generate_tokens > 0 || o.pipeline.stages > 1 || o.context_parallel.degree > 1)) {
    throw InputError(fmt::format("--peft-method {}: with --generate, --pp or --cp is not modelled (vramsim)",
                                 peft_method_info(o.lora.method).name));
  }
}

DType adapter_dtype(DType base, DType quantized_base, const LoraOptions& o) {
  const DType d = is_floating(base) ? base : quantized_base;
  if (o.autocast_adapter_dtype && (d == DType::kBFloat16 || d == DType::kFloat16)) {
    return DType::kFloat32;  // BaseTuner._cast_adapter_dtype: dtypes_to_convert_to_fp32
  }
  return d;
}

std::vector<std::string> ia3_feedforward_modules(const LoraOptions& o, const ModelConfig& model) {
  if (!o.feedforward_modules.empty() || !o.targets.empty() || o.all_linear) {
    return o.feedforward_modules;  // IA3Config: feedforward_modules only with target_modules given
  }
  // TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING (peft/utils/constants.py, 5d602fdb)
  const std::string& t =
      model.vision.wrapper_model_type.empty() ? model.model_type : model.vision.wrapper_model_type;
  if (t == "gpt2" || t == "gpt_bigcode") {
    return {"mlp.c_proj"};
  }
  if (t == "phi") {
    return {"fc2"};
  }
  if (t == "falcon") {
    return {"dense_4h_to_h"};
  }
  if (t == "mixtral") {
    return {"w2"};
  }
  return {"down_proj"};  // llama, mistral, qwen2, gemma, gemma2, gemma3_text, qwen3, llama4
}

}  // namespace vramsim

namespace vramsim {

VarId lycoris_delta_forward(TorchOps& ops, const std::string& name, VarId x, VarId delta,
                            const std::function<VarId(VarId)>& base) {
  EagerTape& t = ops.tape();
  const VarId result = base(x);
  const DType previous = t.dtype(result);
  const VarId xa = ops.to(name + ".cast_input", x, t.dtype(delta));  // _cast_input_dtype
  const VarId delta_out = ops.linear(name + ".F.linear(x, delta_weight)", xa, delta);
  t.drop({xa, delta});
  const VarId sum = ops.add(name + ".result+delta", result, delta_out);
  t.drop({result, delta_out});
  const VarId out = ops.to(name + ".result.to(previous_dtype)", sum, previous);
  t.drop(sum);
  return out;
}

}  // namespace vramsim
