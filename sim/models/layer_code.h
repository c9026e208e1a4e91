// Whose Python a step runs. PyTorch eager memory follows the code line by line (which intermediates exist,
// which a variable keeps alive, what autograd saves), not just the architecture, so the op graph is built by
// running a model's code on the tape. Each code base is one LayerCode; a registry names them (the names
// `--model-code` accepts). The library has the code bases users run:
//   torch-modules : Hugging Face transformers' modeling code per model_type (torch_modules_layers.cpp)
//   cs336-basics  : the Stanford CS336 staff model, cs336_basics/model.py (cs336_basics_layers.cpp)
// Code that mirrors one person's script is not a product choice: a test registers it for itself, and a
// user's own code goes through `vramsim trace`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/models/transformer_parts.h"

namespace vramsim {

class LayerCode {
 public:
  virtual ~LayerCode() = default;
  virtual std::string_view name() const = 0;
  // The parameters the model registers, in model.parameters() order.
  virtual void parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out) const = 0;
  // Registered non-trainable device tensors, made at construction.
  virtual ModelBuffers create_buffers(EagerTape& tape, const ModelConfig& model,
                                      const TrainingOptions& options) const;
  // The forward's pieces (contracts as emit_* in transformer_parts.h).
  virtual VarId embeddings(EmitContext& ctx, VarId ids) const = 0;
  // The per-forward tensors the layers read (rotary tables, masks: EmitContext's), made without the
  // embeddings: a pipeline stage after the first computes them itself from the hidden states' dtype.
  // Code that cannot run split into pipeline stages returns false.
  virtual bool forward_locals(EmitContext& /*ctx*/, DType /*hidden_dtype*/) const { return false; }
  virtual VarId layer(EmitContext& ctx, int layer, VarId x) const = 0;
  virtual VarId final_norm_and_head(EmitContext& ctx, VarId x) const = 0;
  virtual VarId loss(EmitContext& ctx, VarId logits, VarId targets) const = 0;
  // The code is transformers': its attention defaults to sdpa, it can run flash_attention_2, and model_type
  // details (masks, learned positions) apply.
  virtual bool follows_transformers() const { return false; }
};

// Throws InputError("<option>: unknown model code 'x' (known: ...)").
const LayerCode& layer_code(std::string_view name, std::string_view option = "--model-code");
std::vector<std::string> layer_code_names();
// Adds a code base (a static object that outlives every use). A duplicate name is a programming error
// (SIM_ASSERT).
void register_layer_code(const LayerCode& code);

// The library's two.
const LayerCode& torch_modules_code();
const LayerCode& cs336_basics_code();

}  // namespace vramsim
