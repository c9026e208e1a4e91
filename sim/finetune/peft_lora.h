// PEFT's LoRA (peft/tuners/lora): every targeted linear layer keeps its frozen base weight and gains two
// trainable low-rank matrices, lora_A (r x in) and lora_B (out x r), in the base weight's dtype (PEFT moves
// the adapter to the base layer's device and float dtype). Linear.forward adds them to the base output:
//
//   result = base_layer(x)
//   result = result + lora_B(lora_A(dropout(x))) * scaling      (out of place: a new tensor)
//
// Memory that follows, and that the op graph gets from the ordinary autograd rules:
//   * the base weights have no gradient and no optimizer state; only adapters are in the optimizer;
//   * a frozen linear saves nothing for its weight's gradient (mm saves x only when the weight needs grad),
//     so x is kept alive by the adapter path instead: dropout(x) (a copy and its bool mask when p > 0, else
//     x itself) for lora_A's weight gradient, and lora_A's (tokens x r) output for lora_B's;
//   * each adapted linear adds three (tokens x out) temporaries: lora_B's output, its scaled copy, the sum.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ModelConfig;
struct ParameterShape;

// target_modules as PEFT matches them (a module name that ends with ".<target>"), after defaults: PEFT's
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the model_type when none are given.
std::vector<std::string> lora_target_modules(const LoraOptions& options, const ModelConfig& model);

// Parses "--lora-targets q_proj,v_proj" or "all-linear"; throws InputError naming `option`.
void parse_lora_targets(std::string_view text, LoraOptions& out, std::string_view option = "--lora-targets");
void validate(const LoraOptions& options);  // throws InputError("--lora-...: ...")

// What a PEFT method adds to one targeted linear layer (sim/finetune/peft_method.h). LoRA and DoRA fill
// lora_a and lora_b; every method lists all it adds in `params` (trainable parameters and frozen adapter
// tensors, in PEFT's module order), which is what an FSDP unit wraps with its layer.
struct LoraAdapter {
  VarId lora_a = kNoVar;  // (r, in)
  VarId lora_b = kNoVar;  // (out, r)
  std::vector<VarId> params;
  std::vector<VarId> shared;  // tensors every adapted layer reads (VeRA's vera_A, vera_B), owned by the model
};
// Adapters by the base weight they wrap.
using LoraAdapters = std::unordered_map<VarId, LoraAdapter>;

// Whether the parameter is the weight of a targeted linear layer (a 2-D "<module>.weight",
// "model.layers.0.self_attn.q_proj.weight"). The output layer (lm_head) and embeddings never are under
// all-linear.
bool is_lora_target(const ParameterShape& parameter, const std::vector<std::string>& targets,
                    bool all_linear);

// Parameters as PEFT's print_trainable_parameters() counts them: with LoRA the adapters are trainable and
// "all params" includes them; without, everything is trainable.
struct ParameterCount {
  std::int64_t trainable = 0;
  std::int64_t total = 0;
};
ParameterCount count_parameters(const ModelConfig& model, const LoraOptions& lora);

// The rest of PEFT's Linear.forward once `result` = base_layer(x) exists. Takes over the caller's reference
// to `result` and returns the new result (one reference). `lora_a` / `lora_b` run lora_A / lora_B (name,
// input, weight) -> output; empty: F.linear. PEFT's LoraParallelLinear under Megatron's sequence parallelism
// passes its parallel layers here (parallelism.md).
using LoraLinearFn = std::function<VarId(const std::string&, VarId, VarId)>;
VarId peft_lora_forward(TorchOps& ops, const std::string& name, VarId x, VarId result,
                        const LoraAdapter& adapter, const LoraOptions& options, bool training,
                        const LoraLinearFn& lora_a = {}, const LoraLinearFn& lora_b = {});

}  // namespace vramsim
