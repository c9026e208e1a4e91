// Builds the op graph of N training steps of a decoder-only Transformer, in the order PyTorch eager runs
// them, by running the model's code (transformer_parts.h) on an EagerTape:
//
//   setup      model.to(device) (parameters, buffers), the batch, the optimizer (bf16: master weights)
//   per step, per micro-batch (grad_accumulation):
//     forward  embeddings, each decoder layer (inside torch.utils.checkpoint for --checkpointing full),
//              final norm and lm_head; the previous step's logits die when the new ones are assigned
//     loss     the code's cross-entropy
//     backward loss.backward(): nodes in reverse order, saved activations released as their node runs,
//              activation gradients transient, parameter gradients created at first write, then accumulated
//   optimizer  optimizer.step() (states created at the first step)
//   zero_grad  optimizer.zero_grad()
// --forward-only runs the forward with autograd on and keeps each step's graph alive until the next step's
// logits replace the old ones (as `logits = model(x)` in a loop does).
#pragma once

#include "sim/graph/op_graph.h"
#include "sim/models/model_config.h"
#include "sim/training/training_options.h"

namespace vramsim {

// Throws InputError for invalid options (see validate()) and for combinations the models cannot run
// (e.g. a head count that does not divide d_model).
OpGraph build_training_steps(const ModelConfig& model, const TrainingOptions& options);

// The attention kernel the run uses: options.attention with SDPA's backend resolved for this model (its head
// size, whether its code passes SDPA a mask) on options.compute_capability.
AttentionKind attention_kernel(const ModelConfig& model, const TrainingOptions& options);

// The longest --seq the model's position table allows with options' --generate (transformers' GPT-2: its
// learned positions, less the generated tokens after the first), or 0 where the model sets no such limit
// (rotary positions). build_training_steps refuses a longer one; fit caps its search there.
std::int64_t learned_positions_seq_limit(const ModelConfig& model, const TrainingOptions& options);

// Bytes of activations (tensors autograd saved) that the forward of `step` created for decoder layer `layer`:
// what the activation-memory formulas of Korthikanti et al. count.
Bytes saved_activation_bytes(const OpGraph& graph, int step, int layer);

}  // namespace vramsim
