// PEFT's trainable tokens (peft/tuners/trainable_tokens, PEFT 5d602fdb): TrainableTokensConfig(token_indices,
// target_modules=embed_tokens) trains a few rows of the input embedding.
//
// TrainableTokensLayer.update_layer adds trainable_tokens_delta (k, d), a trainable copy of the k rows, and
// trainable_tokens_original (k, d), a buffer, in the embedding's dtype (the delta fp32 under
// autocast_adapter_dtype). Its forward (forward_adapters, get_merged_weights):
//
//   W = base_layer.weight.index_copy(0, index, trainable_tokens_delta.to(W))   (a new (vocab, d) tensor)
//   result = F.embedding(x, W)
//
// so every forward makes a full copy of the embedding matrix; index_copy saves only the index, and
// F.embedding's backward makes a dense (vocab, d) gradient for W, of which index_copy's backward keeps the k
// rows (grad.index_select). With tied embeddings (tie_word_embeddings; TrainableTokensModel wraps the tied
// lm_head with a TrainableTokensLayer tied to the embedding's adapter), lm_head runs F.linear(x, W) on a
// second merged copy, which it saves for backward (W requires grad through the delta).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ModelConfig;

bool is_trainable_tokens(const LoraOptions& o);
// "--token-indices 128000,128001": the count of indices (LoraOptions::trainable_tokens); each index is
// checked against the vocabulary. Throws InputError naming --token-indices.
int parse_token_indices(std::string_view text, std::int64_t vocab_size);
// trainable_tokens_delta then trainable_tokens_original, made in the current op: (k, d) each.
std::vector<VarId> create_trainable_tokens(EagerTape& tape, const ModelConfig& model, const LoraOptions& o,
                                           DType embedding_dtype);
// get_merged_weights: the (vocab, d) weight with the k rows replaced; one reference. `tensors`: what
// create_trainable_tokens made.
VarId trainable_tokens_weight(TorchOps& ops, const std::string& name, VarId weight,
                              const std::vector<VarId>& tensors);

}  // namespace vramsim
