// vLLM's LoRA serving on mixture-of-experts models (sim/inference/vllm_lora.h). Bytes by hand from the vLLM
// source (vllm-project/vllm main as stored: vllm/lora/layers/fused_moe.py at 0002540c,
// vllm/lora/model_manager.py at 01533aa8):
//   FusedMoEWithLoRA._create_lora_a_weights / _create_lora_b_weights, per local expert and LoRA slot: w13
//     (gate w1, up w3: two slices) lora_a (r, hidden) and lora_b (intermediate_size_per_partition, r); w2
//     lora_a (r, intermediate_size_per_partition) and lora_b (hidden, r);
//   the router (MixtralMoE.gate, Qwen3MoeSparseMoeBlock.gate: ReplicatedLinear) and Qwen2-MoE's
//     shared_expert_gate: ReplicatedLinearWithLoRA, (r, in) + (out, r), whole on every rank;
//   attention and Qwen2-MoE's shared expert as the dense layers (tests/predict/test_vllm_lora.cpp).
// All in the model's bf16 (2 B), vLLM's defaults max_loras 1, max_lora_rank 16 unless set.
#include <catch2/catch.hpp>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

Prediction::Generation::Paged::V1 served(RequestArgs a) { return test::v1_of(predict(make_request(a))); }

}  // namespace

TEST_CASE("vllm lora moe: Mixtral-8x7B at TP 2, by hand", "[quick][predict][vllm-lora]") {
  // Hidden 4,096, 32 query heads and 8 key/value heads of 128, 8 experts of 14,336, 32 layers, vocabulary
  // 32,000. A TP-2 rank: q 16 x 4,096 + 2,048 x 16 = 98,304; k, v 65,536 + 512 x 16 = 73,728 each; o (row)
  // 16 x 2,048 + 4,096 x 16 = 98,304; gate (replicated, 8 outputs) 16 x 4,096 + 8 x 16 = 65,664.
  // The FusedMoE, 8 experts of 14,336 / 2 = 7,168 on the rank, each
  //   w13 2 x (16 x 4,096 + 7,168 x 16) = 360,448, w2 16 x 7,168 + 4,096 x 16 = 180,224: 540,672,
  //   x 8 = 4,325,376.
  // A layer 98,304 + 2 x 73,728 + 98,304 + 65,664 + 4,325,376 = 4,735,104 elements, 9,470,208 B; 32 layers
  // 303,046,656 B. MixtralForCausalLM's embedding_modules: embed_tokens (32,000 + 4,096) x 16 x 2 B =
  // 1,155,072 B, the logits processor's lm_head the same, and at TP 2 its sharded_to_full_mapping of the
  // padded vocabulary (32,000 rows) x 8 B = 256,000 B.
  RequestArgs a = test::served_on_h100("mixtral-8x7b");
  a.tp = 2;
  a.world_size = 2;
  const std::int64_t without = served(a).weights_bytes;
  a.enable_lora = true;
  const Prediction::Generation::Paged::V1 v = served(a);
  CHECK(v.lora_slot_bytes == 303046656 + 2 * 1155072 + 256000);
  CHECK(v.lora_layers == 32 * 4 + 2);  // qkv_proj, o_proj, gate, experts a layer; embed_tokens, lm_head
  CHECK(v.weights_bytes == without + v.lora_slot_bytes);

  // --fully-sharded-loras: w13's lora_a rank 16 / 2 = 8 and w2's lora_b hidden 4,096 / 2 = 2,048 an expert:
  //   2 x (8 x 4,096 + 7,168 x 16) + 16 x 7,168 + 2,048 x 16 = 442,368, x 8 = 3,538,944 (786,432 fewer);
  // the dense layers: q, k, v lora_a rank 8 (-32,768 each), o's lora_b 2,048 rows (-32,768); the router
  // stays whole. A layer 786,432 + 4 x 32,768 = 917,504 elements fewer, 1,835,008 B; 32 layers 58,720,256 B.
  a.fully_sharded_loras = true;
  CHECK(served(a).lora_slot_bytes == v.lora_slot_bytes - 58720256);
}

TEST_CASE("vllm lora moe: Mixtral-8x7B with --enable-expert-parallel holds 4 whole experts a rank",
          "[quick][predict][vllm-lora]") {
  // Expert parallelism over the 2 TP ranks: the MoE layer's tp_size is 1, so a rank holds experts 0-3 whole
  // (14,336): each 2 x (16 x 4,096 + 14,336 x 16) + 16 x 14,336 + 4,096 x 16 = 884,736, x 4 = 3,538,944, not
  // the 4,325,376 of the TP-2 test above: 786,432 elements, 1,572,864 B a layer fewer, 50,331,648 B for 32.
  // Attention, router and embeddings are laid out as without it. With --fully-sharded-loras nothing in the
  // experts changes (the MoE layer's tp_size 1 shards nothing).
  RequestArgs a = test::served_on_h100("mixtral-8x7b");
  a.tp = 2;
  a.world_size = 2;
  a.enable_lora = true;
  const std::int64_t tp = served(a).lora_slot_bytes;
  a.enable_expert_parallel = true;
  const Prediction::Generation::Paged::V1 ep = served(a);
  CHECK(ep.lora_slot_bytes == tp - 50331648);
  CHECK(ep.local_experts == 4);
  // fully sharded: only the dense layers shrink, by the 4 x 32,768 elements a layer of the test above:
  // 262,144 B a layer, 8,388,608 B for 32
  a.fully_sharded_loras = true;
  CHECK(served(a).lora_slot_bytes == ep.lora_slot_bytes - 8388608);
}

TEST_CASE("vllm lora moe: Qwen3-30B-A3B's 128 experts a layer dwarf its attention slots",
          "[quick][predict][vllm-lora]") {
  // Qwen3MoeForCausalLM: packed qkv_proj, no embedding_modules (and no gate_up_proj: mlp_only_layers is
  // empty). Hidden 2,048, 32 query heads of 128 (4,096 outputs), 4 key/value heads (512), 48 layers of 128
  // experts of 768. TP 1, r 16:
  //   q 16 x 2,048 + 4,096 x 16 = 98,304; k, v 32,768 + 512 x 16 = 40,960 each; o 16 x 4,096 + 2,048 x 16 =
  //   98,304; gate 16 x 2,048 + 128 x 16 = 34,816;
  //   experts 128 x (2 x (16 x 2,048 + 768 x 16) + 16 x 768 + 2,048 x 16) = 128 x 135,168 = 17,301,504
  //   = 17,614,848 elements, 35,229,696 B a layer; 48 layers 1,691,025,408 B (1.57 GiB) in 4 x 48 LoRA
  //   layers.
  RequestArgs a = test::served_on_h100("qwen3-30b-a3b");
  a.max_model_len = 8192;
  a.enable_lora = true;
  const Prediction::Generation::Paged::V1 v = served(a);
  CHECK(v.lora_slot_bytes == 1691025408);
  CHECK(v.lora_layers == 192);

  // TP 4 with expert parallelism: a rank's 32 whole experts, 32 x 135,168 = 4,325,376; attention q 16 x
  // 2,048 + 1,024 x 16 = 49,152, k, v 32,768 + 128 x 16 = 34,816 each, o 16 x 1,024 + 2,048 x 16 = 49,152;
  // gate 34,816: 4,528,128 elements, 9,056,256 B a layer, 434,700,288 B for 48. Without expert
  // parallelism each of the 128 experts is split (768 / 4 = 192): 2 x (32,768 + 3,072) + 3,072 + 32,768 =
  // 107,520, x 128 = 13,762,560: 13,965,312 elements a layer, 1,340,669,952 B for 48.
  a.tp = 4;
  a.world_size = 4;
  CHECK(served(a).lora_slot_bytes == 1340669952);
  a.enable_expert_parallel = true;
  CHECK(served(a).lora_slot_bytes == 434700288);
}

TEST_CASE("vllm lora moe: Qwen1.5-MoE's shared expert and its gate are wrapped too",
          "[quick][predict][vllm-lora]") {
  // Qwen2MoeForCausalLM: packed qkv_proj, no embedding_modules. Hidden 2,048, 16 heads of 128 (key/value
  // too), 24 layers of 60 experts of 1,408, a shared expert of 5,632 gated by shared_expert_gate
  // (ReplicatedLinear, 1 output). TP 1, r 16:
  //   q, k, v, o 16 x 2,048 + 2,048 x 16 = 65,536 each: 262,144; gate 16 x 2,048 + 60 x 16 = 33,728;
  //   shared_expert gate_proj, up_proj 32,768 + 5,632 x 16 = 122,880 each, down_proj 16 x 5,632 + 2,048 x 16
  //   = 122,880: 368,640; shared_expert_gate 32,768 + 16 = 32,784;
  //   experts 60 x (2 x (32,768 + 1,408 x 16) + 16 x 1,408 + 32,768) = 60 x 165,888 = 9,953,280
  //   = 10,650,576 elements, 21,301,152 B a layer; 24 layers 511,227,648 B in 7 x 24 LoRA layers.
  RequestArgs a = test::served_on_h100("qwen1.5-moe");
  a.enable_lora = true;
  a.max_loras = 2;  // every slot the same again: 1,022,455,296 B
  const Prediction::Generation::Paged::V1 v = served(a);
  CHECK(v.lora_slot_bytes == 2 * 511227648);
  CHECK(v.lora_layers == 168);
}

TEST_CASE("vllm lora moe: what stays refused", "[quick][predict][vllm-lora]") {
  RequestArgs a = test::served_on_h100("deepseek-v3");
  a.enable_lora = true;
  a.tp = 8;
  a.world_size = 8;
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::Contains("multi-head latent attention"));
  a = test::served_on_h100("gpt-oss-20b");
  a.enable_lora = true;
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::Contains("FusedMoE3DWithLoRA"));
  // vLLM's divide(max_lora_rank, tp_size) for the experts' sharded lora_a: rank 1 over 2 ranks
  a = test::served_on_h100("mixtral-8x7b");
  a.tp = 2;
  a.world_size = 2;
  a.enable_lora = true;
  a.fully_sharded_loras = true;
  a.max_lora_rank = 1;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    "--fully-sharded-loras: max_lora_rank 1 is not divisible by 2 (vLLM's divide in "
                    "FusedMoEWithLoRA)");
}
