// PEFT's prefix tuning for a causal LM (peft/tuners/prefix_tuning/model.py PrefixEncoder,
// PeftModel.get_prompt and PeftModelForCausalLM.forward in peft/peft_model.py; PEFT 5d602fdb).
//
// _prepare_prompt_learning_config (peft/utils/other.py) sizes it: num_layers the model's, token_dim =
// head_dim x num_key_value_heads (grouped-query attention, PEFT #1901), encoder_hidden_size = token_dim when
// unset. PrefixEncoder: without prefix_projection an nn.Embedding(num_virtual_tokens,
// num_layers * 2 * token_dim); with it an nn.Embedding(num_virtual_tokens, token_dim) and
// transform = Linear(token_dim, encoder_hidden_size), Tanh, Linear(encoder_hidden_size,
// num_layers * 2 * token_dim). Made in fp32 (the default dtype), all trainable, the base model frozen.
//
// get_prompt(batch_size): past_key_values = prompt_encoder(prompt_tokens) (batch, n, num_layers * 2 *
// token_dim) fp32, .to(base_model_torch_dtype) (a copy), .view(batch, n, num_layers * 2, heads, head_dim),
// .permute([2, 0, 3, 1, 4]).split(2): per layer a (2, batch, heads, n, head_dim) view, handed to
// DynamicCache(past_key_values). Each attention's past_key_values.update(key, value) then keeps
// torch.cat([prefix, new], dim=-2): keys and values of n + seq positions, with an attention_mask of
// n ones in front, so transformers materialises the (batch, 1, seq, n + seq) mask and SDPA takes the
// memory-efficient kernel. The cache (outputs.past_key_values) lives as long as the training loop's
// `outputs`, until the next step's forward has returned.
#pragma once

#include <memory>
#include <vector>

#include "sim/finetune/peft_method.h"
#include "sim/inference/hf_kv_cache.h"

namespace vramsim {

// The prefix encoder's parameters, in registration order.
std::vector<AdapterTensor> prefix_encoder_tensors(const ModelConfig& model, const LoraOptions& o);
// get_prompt and DynamicCache(past_key_values): the cache the forward's attention layers update. Makes the
// prompt tokens, the encoder's forward and the cast to `model_dtype` (base_model_torch_dtype).
std::unique_ptr<KvCache> make_prefix_cache(TorchOps& ops, const std::vector<VarId>& encoder,
                                           const ModelConfig& model, const LoraOptions& o, std::int64_t batch,
                                           DType model_dtype);

}  // namespace vramsim
