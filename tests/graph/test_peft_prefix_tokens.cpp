// PEFT's prefix tuning (sim/finetune/peft_prefix.h) and trainable tokens (peft_trainable_tokens.h): the two
// methods that act on the model's keys and values and on its embedding rows. Parameter counts are PEFT's own
// output in its MetaMathQA benchmark (huggingface/peft method_comparison/MetaMathQA/results, PEFT
// 0.19.2.dev0 at d787f51b) on meta-llama/Llama-3.2-3B (hidden 3072, 28 layers, 8 key/value heads of 128,
// tied embeddings, 3,212,749,824 parameters), each worked by hand; bytes worked by hand from PEFT 5d602fdb
// (prefix_tuning/model.py PrefixEncoder, peft_model.py get_prompt, trainable_tokens/layer.py).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph/peft_test_util.h"
#include "sim/core/error.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

using test::kLlama32Base;
using test::llama32_3b;

LoraOptions method(PeftMethod m) { return test::peft_method(m); }

// Bytes of saved-for-backward tensors made by ops whose name ends with `suffix`, in any layer.
Bytes saved_by(const OpGraph& g, const std::string& suffix) {
  return test::saved_by(g, test::kAnyLayer, {suffix});
}

ModelConfig tiny() { return test::tiny_peft_model(); }
TrainingOptions tiny_options(const LoraOptions& lora) { return test::tiny_peft_options(lora); }

}  // namespace

TEST_CASE("PEFT prefix tuning and trainable tokens: parameters of Llama-3.2-3B as PEFT's runs report them",
          "[quick][graph][peft]") {
  const ModelConfig m = llama32_3b();
  SECTION("prefix tuning, 200 tokens (prefixtuning--llama-3.2-3B-lr_0.001.json): 11,468,800") {
    LoraOptions o = method(PeftMethod::kPrefixTuning);
    o.num_virtual_tokens = 200;
    const ParameterCount c = count_parameters(m, o);
    // PrefixEncoder without prefix_projection: nn.Embedding(200, num_layers * 2 * token_dim), token_dim =
    // head_dim x num_key_value_heads = 128 x 8 = 1024 (the run's config: token_dim 1024)
    CHECK(c.trainable == 200 * 28 * 2 * 1024);
    CHECK(c.trainable == 11468800);
    CHECK(c.total == 3224218624);
  }
  SECTION("prefix tuning with prefix_projection: embedding (n, 1024) and a two-layer MLP") {
    LoraOptions o = method(PeftMethod::kPrefixTuning);
    o.num_virtual_tokens = 20;
    o.prefix_projection = true;
    // encoder_hidden_size unset: token_dim (_prepare_prompt_learning_config); Linear(1024, 1024) and
    // Linear(1024, 28 x 2 x 1024), with biases
    CHECK(count_parameters(m, o).trainable == 20 * 1024 + (1024 * 1024 + 1024) + (1024 * 57344 + 57344));
  }
  SECTION("trainable tokens 128000, 128001 (trainable_tokens--llama-3.2-3B-sos+eos.json): 6,144") {
    LoraOptions o = method(PeftMethod::kTrainableTokens);
    o.trainable_tokens = parse_token_indices("128000,128001", m.vocab_size);
    CHECK(o.trainable_tokens == 2);
    const ParameterCount c = count_parameters(m, o);
    CHECK(c.trainable == 2 * 3072);  // trainable_tokens_delta; trainable_tokens_original is a buffer
    CHECK(c.total == kLlama32Base + 6144);
    CHECK(c.total == 3212755968);
  }
}

TEST_CASE("PEFT prefix tuning: the prefix in every layer's keys and values", "[quick][graph][peft]") {
  LoraOptions o = method(PeftMethod::kPrefixTuning);
  o.num_virtual_tokens = 8;
  const OpGraph g = build_training_steps(tiny(), tiny_options(o));
  // get_prompt: the embedding (2, 8, 2 layers x 2 x 32) fp32, then .to(bf16)
  CHECK(test::sizes_named(g, "past_key_values.to(base_model_torch_dtype)") ==
        std::vector<Bytes>{2 * 8 * 128 * 2});
  // DynamicLayer.update: torch.cat([prefix, key], dim=-2), (2, 2 heads, 8 + 32, 16) bf16 per layer
  CHECK(test::sizes_named(g, "layers.0.past_key_values.cat_key") == std::vector<Bytes>{2 * 2 * 40 * 16 * 2});
  CHECK(test::sizes_named(g, "layers.1.past_key_values.cat_value") ==
        std::vector<Bytes>{2 * 2 * 40 * 16 * 2});
  // the materialised mask covers the 8 + 32 keys: (2, 1, 32, 40) bf16
  CHECK(test::sizes_named(g, "causal_mask.clone") == std::vector<Bytes>{2 * 1 * 32 * 40 * 2});
  // AdamW keeps two fp32 states of the prefix embedding (8 x 128) and nothing else
  CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * 8 * 128 * 4);
}

TEST_CASE("PEFT trainable tokens: a full copy of the embedding per forward", "[quick][graph][peft]") {
  LoraOptions o = method(PeftMethod::kTrainableTokens);
  o.trainable_tokens = 2;
  SECTION("untied: the embedding's merged weight is made and not saved (F.embedding saves the indices)") {
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    CHECK(test::sizes_named(g, "model.embed_tokens.index_copy") == std::vector<Bytes>{1000 * 64 * 2});
    CHECK(saved_by(g, "model.embed_tokens.index_copy") == 0);
    CHECK(test::sizes_named(g, "lm_head.index_copy").empty());
    // AdamW: two fp32 states of trainable_tokens_delta (2 x 64)
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * 2 * 64 * 4);
  }
  SECTION("tied embeddings: lm_head's merged copy is saved by F.linear for the delta's gradient") {
    ModelConfig m = tiny();
    m.tied_embeddings = true;
    const OpGraph g = build_training_steps(m, tiny_options(o));
    CHECK(saved_by(g, "lm_head.index_copy") == 1000 * 64 * 2);
  }
  SECTION("refusals") {
    CHECK_THROWS_WITH(parse_token_indices("1,x", 1000),
                      "--token-indices: 'x' at position 3 is not a token index");
    CHECK_THROWS_WITH(parse_token_indices("1000", 1000),
                      "--token-indices: 1000 is not below the vocabulary size 1000");
    o.trainable_tokens = 0;
    CHECK_THROWS_WITH(build_training_steps(tiny(), tiny_options(o)),
                      "--token-indices: TrainableTokensConfig.token_indices is required (--peft-method "
                      "trainable-tokens)");
  }
}
