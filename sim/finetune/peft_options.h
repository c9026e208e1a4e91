// The PEFT method and its config's fields, in PEFT's option names and defaults. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vramsim {

// PEFT's tuner (peft.PeftType) that get_peft_model adds, each modelled in sim/finetune/peft_<method>.cpp
// behind the interface of sim/finetune/peft_method.h.
enum class PeftMethod : std::uint8_t {
  kLora,            // LoraConfig (use_dora: DoRA; lora-fa: LoRA-FA's optimizer)
  kIa3,             // IA3Config
  kPromptTuning,    // PromptTuningConfig
  kPrefixTuning,    // PrefixTuningConfig
  kPTuning,         // PromptEncoderConfig
  kLoha,            // LoHaConfig
  kLokr,            // LoKrConfig
  kVera,            // VeraConfig
  kOft,             // OFTConfig
  kBoft,            // BOFTConfig
  kAdalora,         // AdaLoraConfig
  kTrainableTokens  // TrainableTokensConfig
};

// The PEFT config's fields, PEFT's defaults (LoraConfig's, and the other methods' named after theirs).
// LoRA-like methods (lora, loha, lokr, vera, adalora) with rank 0: no PEFT.
struct LoraOptions {
  PeftMethod method = PeftMethod::kLora;
  int rank = 0;                      // r (AdaLoRA: target_r; OFT: r, its number of blocks)
  double alpha = 8.0;                // lora_alpha: scaling = alpha / r (does not change memory)
  double dropout = 0.0;              // lora_dropout
  std::vector<std::string> targets;  // target_modules; empty: PEFT's default for the model_type
  bool all_linear = false;           // target_modules="all-linear": every linear layer but the output layer
  // FSDP1 with use_orig_params=True: the frozen base parameters are views of a FlatParameter that requires
  // grad, so autograd computes and reduces their gradients anyway ("the gradient memory usage will be higher
  // than expected (namely, equivalent to not freezing those parameters)", FSDP's docstring); only the
  // optimizer skips them. Set by the step builder under FSDP1.
  bool base_gradients_computed = false;
  bool use_dora = false;           // LoraConfig.use_dora (DoraLinearLayer)
  bool lora_fa = false;            // peft.optimizers.create_lorafa_optimizer: lora_A frozen
  int num_virtual_tokens = 0;      // prompt / prefix tuning, P-tuning (required by PEFT)
  bool prefix_projection = false;  // PrefixTuningConfig.prefix_projection
  int encoder_hidden_size = 0;     // PrefixTuning / PromptEncoder encoder_hidden_size (0: unset)
  std::vector<std::string> feedforward_modules;  // IA3Config.feedforward_modules; empty: PEFT's default
  int block_size = 0;                            // OFT oft_block_size / BOFT boft_block_size (0: unset)
  int block_num = 0;                             // BOFTConfig.boft_block_num (0: unset)
  int butterfly_factor = 1;                      // BOFTConfig.boft_n_butterfly_factor
  bool use_cayley_neumann = true;                // OFTConfig.use_cayley_neumann
  int num_cayley_neumann_terms = 5;              // OFTConfig.num_cayley_neumann_terms
  int init_r = 12;                               // AdaLoraConfig.init_r
  int trainable_tokens = 0;                      // TrainableTokensConfig: len(token_indices)
  int decompose_factor = -1;                     // LoKrConfig.decompose_factor (-1: as PEFT's factorization)
  // get_peft_model(autocast_adapter_dtype=True): fp16/bf16 adapter weights are cast to fp32
  // (BaseTuner._cast_adapter_dtype); the adapted inputs are then cast to fp32 in the forward.
  bool autocast_adapter_dtype = true;
  bool enabled() const { return rank > 0 || !rank_based(); }
  bool rank_based() const {
    return method == PeftMethod::kLora || method == PeftMethod::kLoha || method == PeftMethod::kLokr ||
           method == PeftMethod::kVera || method == PeftMethod::kAdalora;
  }
};

}  // namespace vramsim
