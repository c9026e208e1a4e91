// PEFT's prompt learning for a causal LM (PeftModelForCausalLM.forward, peft/peft_model.py): the model runs
// on num_virtual_tokens learned embeddings followed by the input's, every base parameter frozen.
//   prompt tuning (peft/tuners/prompt_tuning/model.py PromptEmbedding): an nn.Embedding(num_virtual_tokens,
//     token_dim), made in the default dtype (fp32);
//   P-tuning (peft/tuners/p_tuning/model.py PromptEncoder, encoder_reparameterization_type MLP): the same
//     embedding, then mlp_head = Linear(token_dim, h), ReLU, Linear(h, h), ReLU, Linear(h, token_dim), with
//     h = encoder_hidden_size (PEFT sets it to token_dim when unset: _prepare_prompt_learning_config).
// The forward: prompts = prompt_encoder(prompt_tokens) (prompt_tokens: an arange expanded to the batch and
// copied to the device), prompts.to(inputs_embeds.dtype), torch.cat((prompts, inputs_embeds), dim=1); the
// labels get num_virtual_tokens of -100 in front. So the decoder layers, the head and the loss run on
// seq + num_virtual_tokens positions, and since the prompts require grad every layer saves its activations.
#pragma once

#include <vector>

#include "sim/finetune/peft_method.h"

namespace vramsim {

class EagerTape;

bool is_prompt_learning(const LoraOptions& o);
// The prompt encoder's parameters, in registration order (all trainable).
std::vector<AdapterTensor> prompt_encoder_tensors(const ModelConfig& model, const LoraOptions& o);
// Creates them (fp32) in the current op.
std::vector<VarId> create_prompt_encoder(EagerTape& tape, const ModelConfig& model, const LoraOptions& o);
// get_prompt and the concatenation. `inputs_embeds`: the word embeddings, [batch, seq + n, d] as the step
// builder sizes every tensor by the positions the layers see (the n prompt rows of it are an overcount of
// batch * n * d elements). Does not take over inputs_embeds; returns one reference of [batch, seq + n, d].
VarId peft_prompt_embeddings(TorchOps& ops, const std::vector<VarId>& encoder, VarId inputs_embeds,
                             const LoraOptions& o);

}  // namespace vramsim
