// The PEFT catalogue: each tuner of peft/tuners/<method> that vramsim models, behind one interface, listed in
// one registry (peft_methods()). A method that wraps linear layers (LoRA, DoRA, IA3, LoHa, LoKr, VeRA,
// AdaLoRA, OFT, BOFT)
// says what update_layer adds to one targeted layer (the tensors, their shapes, which are trainable) and
// runs the wrapped layer's forward on the tape, so that what it allocates, what autograd saves for backward
// and what the optimizer keeps follow from the ordinary rules. Prompt learning (prompt tuning, P-tuning)
// adds a prompt encoder in front of the model instead (peft_prompt.h).
//
// Dtypes: get_peft_model(autocast_adapter_dtype=True), PEFT's default, casts every fp16/bf16 adapter
// parameter and buffer to fp32 (BaseTuner._cast_adapter_dtype, peft/tuners/tuners_utils.py); the forwards
// then cast the adapted input to the adapter's dtype (_cast_input_dtype) and the result back.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/types.h"
#include "sim/finetune/peft_lora.h"
#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ModelConfig;

// A tensor a method adds to one adapted linear layer of (in, out) features.
struct AdapterTensor {
  std::string name;       // below the adapted module, as PEFT names it: "lora_A.default.weight"
  Shape shape;            // elements
  bool trainable = true;  // false: frozen (LoRA-FA's lora_A)
};

// One PEFT tuner that wraps linear layers.
class PeftLinearMethod {
 public:
  virtual ~PeftLinearMethod() = default;
  // update_layer: the tensors one adapted layer of (in, out) features gets. `feedforward`: IA3's
  // feedforward_modules match the layer.
  virtual std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                                   bool feedforward) const = 0;
  // Tensors the model holds once and every adapted layer reads (VeRA's shared vera_A / vera_B), for the
  // largest (in, out) of the adapted layers.
  virtual std::vector<AdapterTensor> shared_tensors(std::int64_t /*max_in*/, std::int64_t /*max_out*/,
                                                    const LoraOptions& /*o*/) const {
    return {};
  }
  // The adapted layer's forward. `base(input)` runs the base layer (F.linear or the quantized one) and
  // returns one reference; `weight` is the base weight. Does not take over x; returns one reference.
  virtual VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId weight,
                        const std::function<VarId(VarId)>& base, const LoraAdapter& adapter,
                        const LoraOptions& o, bool training) const = 0;
};

// The registry: one row per --peft-method value.
struct PeftMethodInfo {
  PeftMethod method;
  std::string_view name;           // --peft-method value
  std::string_view peft_type;      // peft.PeftType
  std::string_view config;         // its config class and the options that matter to memory
  const PeftLinearMethod* linear;  // nullptr: prompt learning (peft_prompt.h), or not modelled yet
  std::string_view not_modelled;   // why vramsim refuses it ("" when modelled)
};
const std::vector<PeftMethodInfo>& peft_methods();
const PeftMethodInfo& peft_method_info(PeftMethod method);
// Throws InputError("--peft-method: unknown value 'x' (known: ...)").
PeftMethod parse_peft_method(std::string_view text);
// The linear-layer method the options select (LoRA with use_dora: DoRA); nullptr for prompt learning.
const PeftLinearMethod* linear_method(const LoraOptions& o);

// The methods, one file each.
const PeftLinearMethod& lora_method();     // peft_lora.cpp (LoRA, rsLoRA, LoRA-FA)
const PeftLinearMethod& dora_method();     // peft_dora.cpp
const PeftLinearMethod& ia3_method();      // peft_ia3.cpp
const PeftLinearMethod& loha_method();     // peft_loha.cpp
const PeftLinearMethod& lokr_method();     // peft_lokr.cpp
const PeftLinearMethod& vera_method();     // peft_vera.cpp
const PeftLinearMethod& adalora_method();  // peft_adalora.cpp
const PeftLinearMethod& oft_method();      // peft_oft.cpp
const PeftLinearMethod& boft_method();     // peft_boft.cpp

// The job shapes a PEFT method is not modelled with (prefix tuning, trainable tokens, AdaLoRA, prompt
// learning with --generate, --pp, ...): throws InputError("--peft-method X: with ... is not modelled").
void check_peft_job(const ModelConfig& model, const TrainingOptions& options);

// The adapter's dtype: fp32 under autocast_adapter_dtype for a fp16/bf16 base, else the base weight's
// float dtype; `quantized_base` for a quantized (non-float) base weight.
DType adapter_dtype(DType base, DType quantized_base, const LoraOptions& o);

// Whether the parameter is a linear layer's weight IA3 treats as feedforward (feedforward_modules, or
// PEFT's TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING for the model_type).
std::vector<std::string> ia3_feedforward_modules(const LoraOptions& o, const ModelConfig& model);

}  // namespace vramsim

namespace vramsim {

// LycorisLayer.forward (peft/tuners/lycoris_utils.py) for LoHa and LoKr once get_delta_weight made the
// (out, in) delta weight: result = base_layer(x); result = result + F.linear(x.to(delta.dtype), delta);
// result.to(previous_dtype). F.linear saves the cast input and the delta weight (it requires grad) for
// backward. Takes over `delta`; does not take over x; returns one reference.
VarId lycoris_delta_forward(TorchOps& ops, const std::string& name, VarId x, VarId delta,
                            const std::function<VarId(VarId)>& base);

}  // namespace vramsim
