// vLLM's LoRA serving (--enable-lora): the adapter slots every LoRA layer allocates at load, inside "Model
// loading took" (sim/inference/vllm_lora.h). Bytes by hand from vLLM's create_lora_weights
// (vllm/lora/layers/base_linear.py, column_parallel_linear.py MergedColumnParallelLinearWithLoRA /
// MergedQKVParallelLinearWithLoRA, row_parallel_linear.py, vocal_parallel_embedding.py,
// logits_processor.py) for each slice: max_loras x (r x input + output x r) in the model's bf16.
#include <catch2/catch.hpp>

#include <vector>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/vllm_serving_fit.h"

using namespace vramsim;

TEST_CASE("vllm lora: the adapter slots of Llama-3.1-8B at TP 1 and 2, by hand",
          "[quick][predict][vllm-lora]") {
  RequestArgs a = test::served_on_h100("llama-3.1-8b");
  const std::int64_t without = test::v1_of(predict(make_request(a))).weights_bytes;
  a.enable_lora = true;
  // TP 1, vLLM's defaults (max_loras 1, max_lora_rank 16). Hidden 4,096, MLP 14,336, 8 key/value heads of
  // 128 (k and v give 1,024 outputs), 32 layers. Elements a layer, r x in + out x r per slice:
  //   qkv_proj (three slices): q 16 x 4,096 + 4,096 x 16 = 131,072; k and v 65,536 + 16,384 = 81,920 each
  //   o_proj (row): 131,072; gate_up_proj (two slices) 65,536 + 229,376 = 294,912 each; down_proj (row)
  //   16 x 14,336 + 4,096 x 16 = 294,912
  //   = 1,310,720 elements, 2,621,440 B; 32 layers 83,886,080 B.
  // LlamaForCausalLM's embedding_modules: embed_tokens (128,256 x 16 + 4,096 x 16 = 2,117,632 elements) and
  // the logits processor's lm_head (16 x 4,096 + 128,256 x 16, the same), 4,235,264 B each.
  // 83,886,080 + 2 x 4,235,264 = 92,356,608 B in 32 x 4 + 2 = 130 LoRA layers.
  const Prediction::Generation::Paged::V1 tp1 = test::v1_of(predict(make_request(a)));
  CHECK(tp1.lora_slot_bytes == 92356608);
  CHECK(tp1.lora_layers == 130);
  CHECK(tp1.weights_bytes == without + 92356608);  // "Model loading took" includes them
  // TP 2, --max-loras 4 --max-lora-rank 64. A rank's column slices keep the whole input and their output
  // share, its row layers their input share and the whole output:
  //   q 64 x 4,096 + 2,048 x 64 = 393,216; k, v 262,144 + 512 x 64 = 294,912 each; o 64 x 2,048 + 4,096 x 64
  //   = 393,216; gate, up 262,144 + 7,168 x 64 = 720,896 each; down 64 x 7,168 + 262,144 = 720,896
  //   = 3,538,944 elements x 4 slots x 2 B = 28,311,552 B a layer, 905,969,664 B for 32.
  // embed_tokens and lm_head: 4 x (128,256 + 4,096) x 64 x 2 B = 67,764,224 B each (org_vocab_size and the
  // logits' vocab_size are the whole vocabulary on every rank); with TP 2 the logits processor's
  // sharded_to_full_mapping_gpu, 128,256 padded rows (a multiple of 64 already) x 8 B = 1,026,048 B.
  a.tp = 2;
  a.world_size = 2;
  a.max_loras = 4;
  a.max_lora_rank = 64;
  CHECK(test::v1_of(predict(make_request(a))).lora_slot_bytes == 905969664 + 2 * 67764224 + 1026048);
}

namespace {

// vLLM V1's start-up of `model` served with --enable-lora at vLLM's defaults (max_model_len 0: the model's).
Prediction::Generation::Paged::V1 lora_start_up(const char* model, std::int64_t max_model_len) {
  RequestArgs a = test::served_on_h100(model);
  a.max_model_len = max_model_len;
  a.enable_lora = true;
  return test::v1_of(predict(make_request(a)));
}

}  // namespace

TEST_CASE("vllm lora: Qwen2.5-7B declares no embedding modules", "[quick][predict][vllm-lora]") {
  // Qwen2ForCausalLM has packed qkv_proj and gate_up_proj and no embedding_modules. Hidden 3,584, MLP 18,944,
  // 4 key/value heads of 128 (512 outputs), 28 layers, r 16:
  //   q 16 x 3,584 + 3,584 x 16 = 114,688; k, v 57,344 + 8,192 = 65,536 each; o 114,688;
  //   gate, up 57,344 + 303,104 = 360,448 each; down 16 x 18,944 + 3,584 x 16 = 360,448
  //   = 1,441,792 elements, 2,883,584 B a layer; 28 layers 80,740,352 B in 112 LoRA layers.
  const Prediction::Generation::Paged::V1 v = lora_start_up("qwen2.5-7b", 0);
  CHECK(v.lora_slot_bytes == 80740352);
  CHECK(v.lora_layers == 112);
}

TEST_CASE("vllm lora: Gemma-2-9B's decoder layers only", "[quick][predict][vllm-lora]") {
  // Gemma2ForCausalLM: packed qkv_proj and gate_up_proj, no embedding modules ("Gemma does not apply LoRA to
  // the embedding layer"). Hidden 3,584, MLP 14,336, 16 query heads and 8 key/value heads of 256 (4,096 and
  // 2,048 outputs), 42 layers, r 16:
  //   q 16 x 3,584 + 4,096 x 16 = 122,880; k, v 57,344 + 2,048 x 16 = 90,112 each; o 16 x 4,096 + 3,584 x 16
  //   = 122,880; gate, up 57,344 + 14,336 x 16 = 286,720 each; down 16 x 14,336 + 3,584 x 16 = 286,720
  //   = 1,286,144 elements, 2,572,288 B a layer; 42 layers 108,036,096 B in 168 LoRA layers.
  const Prediction::Generation::Paged::V1 v = lora_start_up("gemma-2-9b", 8192);
  CHECK(v.lora_slot_bytes == 108036096);
  CHECK(v.lora_layers == 168);
}

TEST_CASE("vllm lora: what LoRAConfig refuses and what is not modelled", "[quick][predict][vllm-lora]") {
  RequestArgs a = test::served_on_h100("llama-3.1-8b");
  a.enable_lora = true;
  a.max_lora_rank = 24;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    Catch::StartsWith("--max-lora-rank: 24 is not one of vLLM's MaxLoRARanks"));
  a.max_lora_rank = 16;
  a.max_loras = 0;
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::StartsWith("--max-loras: must be 1 or more"));
  a.max_loras = 2;
  a.enable_lora = false;
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::EndsWith("vLLM's LoRA slots, for --enable-lora"));
  a.enable_lora = true;
  a.model = "phi-3-mini";
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::Contains("model_type 'phi3' are not modelled"));
  RequestArgs training;
  training.model = "llama-3.1-8b";
  training.gpu = "h100";
  training.batch = 1;
  training.seq = 128;
  training.enable_lora = true;
  CHECK_THROWS_WITH(predict(make_request(training)),
                    "--enable-lora: vLLM's LoRA serving, for --kv-cache paged with the V1 engine");
}

TEST_CASE("vllm lora: fit --vary max-loras finds the most adapter slots that still start",
          "[quick][predict][vllm-lora]") {
  // Llama-3.1-8B at max_lora_rank 64: one slot is 4 x the defaults' 92,356,608 B = 369,426,432 B (the test
  // above), and the slots come out of the KV cache's memory one for one. At max_model_len 131,072 one
  // request needs 131,072 / 16 = 8,192 blocks of the 32 layers' 65,536 B pages: the engine starts while
  // available - L x 369,426,432 >= 8,192 x 32 x 65,536 = 17,179,869,184 B.
  RequestArgs a = test::served_on_h100("llama-3.1-8b");
  a.gpu_memory_utilization = 0.95;
  a.max_model_len = 131072;
  const std::int64_t available = test::paged_of(predict(make_request(a))).available_bytes;
  a.enable_lora = true;
  a.max_lora_rank = 64;
  const ServingFitResult r = fit_vllm_serving(make_request(a), ServingQuestion::kMaxLoras, 0.1);
  const std::int64_t expected = (available - 17179869184) / 369426432;
  REQUIRE(expected > 1);
  CHECK(r.answer == expected);
  a.max_loras = r.answer + 1;
  CHECK_FALSE(test::paged_of(predict(make_request(a))).refusal.empty());
  a.enable_lora = false;
  a.max_loras = 1;
  a.max_lora_rank = 16;
  CHECK_THROWS_WITH(fit_vllm_serving(make_request(a), ServingQuestion::kMaxLoras, 0.1),
                    "--vary max-loras: vLLM's LoRA slots, for --enable-lora");
}

TEST_CASE("vllm lora: pipeline stages wrap their own layers, the first the embedding, the last lm_head",
          "[quick][predict][vllm-lora]") {
  // Llama-3.2-1B (16 layers, hidden 2,048, MLP 8,192, 8 key/value heads of 64: 512 outputs, tied embeddings)
  // at PP 2, r 16. A layer: q and o 16 x 2,048 + 2,048 x 16 = 65,536 each; k, v 32,768 + 512 x 16 = 40,960
  // each; gate, up 32,768 + 8,192 x 16 = 163,840 each; down 16 x 8,192 + 2,048 x 16 = 163,840: 704,512
  // elements, 1,409,024 B; 8 layers a stage 11,272,192 B. embed_tokens (128,256 + 2,048) x 16 x 2 B =
  // 4,169,728 B on the first stage; the last holds the tied lm_head, the same VocabParallelEmbedding, which
  // _create_lora_modules wraps again under "lm_head" (4,169,728 B), and the logits processor's slots
  // (16 x 2,048 + 128,256 x 16) x 2 B = 4,169,728 B.
  RequestArgs a = test::served_on_h100("llama-3.2-1b");
  a.pp = 2;
  a.world_size = 2;
  const auto stage_weights = [](const RequestArgs& r) {
    std::vector<std::int64_t> w;
    const Prediction p = predict(make_request(r));  // the stages live in it
    for (const auto& s : test::v1_of(p).stages) {
      w.push_back(s.weights_bytes);
    }
    return w;
  };
  const std::vector<std::int64_t> without = stage_weights(a);
  a.enable_lora = true;
  const std::vector<std::int64_t> with = stage_weights(a);
  REQUIRE(with.size() == 2);
  REQUIRE(without.size() == 2);
  CHECK(with[0] - without[0] == 11272192 + 4169728);
  CHECK(with[1] - without[1] == 11272192 + 2 * 4169728);
}
