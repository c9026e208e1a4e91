// The PEFT catalogue, second part (sim/finetune/peft_adalora.h, peft_oft.cpp, peft_boft.cpp): AdaLoRA, OFT
// and BOFT. Parameter counts are PEFT's own output in its MetaMathQA benchmark
// (huggingface/peft method_comparison/MetaMathQA/results/<experiment>.json, train_info.num_trainable_params
// and num_total_params, PEFT 0.19.2.dev0 at d787f51b) on meta-llama/Llama-3.2-3B (hidden 3072, 28 layers,
// q_proj 3072 -> 3072, v_proj 3072 -> 1024, 3,212,749,824 parameters), each also worked by hand. Saved
// bytes are worked by hand from PEFT 5d602fdb's layer.py of each method (functions named at each check).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph/peft_test_util.h"
#include "sim/core/error.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

using test::kLlama32Base;
using test::llama32_3b;
using test::saved_by;

LoraOptions method(PeftMethod m, int rank) { return test::peft_method(m, rank, {"q_proj", "v_proj"}); }

constexpr std::int64_t kT = test::kTinyTokens, kD = test::kTinyWidth, kKv = test::kTinyKv;
ModelConfig tiny() { return test::tiny_peft_model(); }
TrainingOptions tiny_options(const LoraOptions& lora) { return test::tiny_peft_options(lora); }

}  // namespace

TEST_CASE(
    "PEFT catalogue II: AdaLoRA, OFT and BOFT parameters of Llama-3.2-3B as PEFT's MetaMathQA runs "
    "report them",
    "[quick][graph][peft]") {
  const ModelConfig m = llama32_3b();
  SECTION("AdaLoRA init_r 64, target_r 32 (adalora--llama-3.2-3B-rank32.json): 18,353,664 of 3,231,103,544") {
    LoraOptions o = method(PeftMethod::kAdalora, 32);
    o.init_r = 64;
    const ParameterCount c = count_parameters(m, o);
    // update_layer with r = init_r: lora_A (64, in), lora_E (64, 1), lora_B (out, 64); ranknum (1,) frozen
    CHECK(c.trainable == 28 * (64 * (3072 + 1 + 3072) + 64 * (3072 + 1 + 1024)));
    CHECK(c.trainable == 18353664);
    CHECK(c.total == kLlama32Base + 18353664 + 28 * 2);  // + the 56 ranknum Parameters
    CHECK(c.total == 3231103544);
  }
  SECTION("OFT r 32, Cayley-Neumann (oft--llama-3.2-3B-rank32.json): 8,171,520 of 3,220,921,344") {
    const ParameterCount c = count_parameters(m, method(PeftMethod::kOft, 32));
    // OFTRotationModule.weight (r, b (b - 1) / 2) with b = in / r = 3072 / 32 = 96: 32 x 4560 per layer
    CHECK(c.trainable == 28 * 2 * (32 * (96 * 95 / 2)));
    CHECK(c.trainable == 8171520);
    CHECK(c.total == 3220921344);
  }
  SECTION("BOFT block size 4, butterfly factor 1 (boft--llama-3.2-3B-default.json): 802,816") {
    LoraOptions o = method(PeftMethod::kBoft, 0);
    o.block_size = 4;
    const ParameterCount c = count_parameters(m, o);
    // boft_R (1, 3072 / 4, 4, 4) = 12,288 per layer; boft_s (out, 1): 3072 (q_proj), 1024 (v_proj)
    CHECK(c.trainable == 28 * ((12288 + 3072) + (12288 + 1024)));
    CHECK(c.trainable == 802816);
    CHECK(c.total == 3213552640);
  }
  SECTION("OFT's adjust_oft_parameters: r 10 on 3072 features becomes the nearest divisor, 8") {
    // 3072 = 2^10 x 3: divisors near 10 are 8 (distance 2) and 12 (distance 2); lower wins ties
    const ParameterCount c = count_parameters(m, method(PeftMethod::kOft, 10));
    CHECK(c.trainable == 28 * 2 * (8 * (384 * 383 / 2)));
  }
}

TEST_CASE("PEFT catalogue II: what AdaLoRA, OFT and BOFT save for backward and keep",
          "[quick][graph][peft]") {
  SECTION("AdaLoRA: the fp32 input and the (T, r) product (SVDLinear.forward); layer 1 also A * E") {
    LoraOptions o = method(PeftMethod::kAdalora, 4);
    o.init_r = 8;
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    // dropout(x) @ (lora_A * lora_E).T: the fp32 copy of x is saved for (A * E)'s gradient
    CHECK(saved_by(g, 0, {".lora_cast_input"}) == 2 * kT * kD * 4);
    // ... @ lora_B.T saves the (T, 8) fp32 product for lora_B's gradient
    CHECK(saved_by(g, 0, {".x@(A*E).T"}) == 2 * kT * 8 * 4);
    // layer 0's input needs no gradient, so A * E (8, 64) is saved only from layer 1 on
    CHECK(saved_by(g, 0, {".lora_A*lora_E"}) == 0);
    CHECK(saved_by(g, 1, {".lora_A*lora_E"}) == 2 * 8 * kD * 4);
    // the orthogonality regulariser: torch.norm(para_cov - I) keeps its (8, 8) fp32 input, for each lora_A
    // and lora_B of the 4 adapted layers
    CHECK(saved_by(g, test::kAnyLayer, {".orth_reg.para_cov-I"}) == 4 * 2 * 8 * 8 * 4);
    // AdamW's two states and RankAllocator's ipt, exp_avg_ipt, exp_avg_unc for lora_A, lora_B, lora_E:
    // per layer q: 8 x 64 + 64 x 8 + 8 = 1032, v: 8 x 64 + 32 x 8 + 8 = 776; 2 layers
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == (2 + 3) * 2 * (1032 + 776) * 4);
  }
  SECTION("OFT: the fp32 input, and Q, Q^2, Q^3 of the Cayley-Neumann series (OFTRotationModule)") {
    LoraOptions o = method(PeftMethod::kOft, 0);
    o.block_size = 16;  // r = 64 / 16 = 4 blocks of 16 for q_proj and v_proj (both have 64 inputs)
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    // einsum("...rk,rkc->...rc", x, R) saves x, the fp32 copy (R needs its gradient)
    CHECK(saved_by(g, 0, {".oft_cast_input"}) == 2 * kT * kD * 4);
    // _cayley_batch: bmm(Q, Q) saves Q; bmm(Q^2, Q) saves Q^2; bmm(Q^3, Q) saves Q^3: (4, 16, 16) fp32
    CHECK(saved_by(g, 0, {".Q_skew-Q_skew.T", ".cayley.Q^2", ".cayley.Q^3"}) == 2 * 3 * 4 * 16 * 16 * 4);
    // R itself is saved by the einsum only where the input needs a gradient (layer 1)
    CHECK(saved_by(g, 0, {".cayley.eye.repeat"}) == 0);
    CHECK(saved_by(g, 1, {".cayley.eye.repeat"}) == 2 * 4 * 16 * 16 * 4);
  }
  SECTION("BOFT: the copy of boft_P, the eye and the base output (BOFT Linear.forward)") {
    LoraOptions o = method(PeftMethod::kBoft, 0);
    o.block_size = 4;
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    // self.boft_P.to(x): (1, 64, 64) bf16, saved by both bmm
    CHECK(saved_by(g, 0, {".boft_P.to(x)"}) == 2 * 64 * 64 * 2);
    // butterfly_oft_mat @ boft_rotation saves the eye (64, 64) bf16
    CHECK(saved_by(g, 0, {".boft_rotation"}) == 2 * 64 * 64 * 2);
    // result * boft_scale.squeeze(-1) saves the base output (bf16) and the fp32 scale (out)
    CHECK(saved_by(g, 0, {".boft_s*boft_scale"}) == (kD + kKv) * 4);
    CHECK(saved_by(g, 0, {"attn.q_proj", "attn.v_proj"}) == kT * kD * 2 + kT * kKv * 2);
    // x @ boft_rotation saves the rotation where x needs a gradient (layer 1)
    CHECK(saved_by(g, 1, {".butterfly@boft_rotation"}) == 2 * 64 * 64 * 2);
  }
}

TEST_CASE("PEFT catalogue II: refusals as PEFT refuses", "[quick][graph][peft]") {
  LoraOptions o = method(PeftMethod::kOft, 4);
  o.block_size = 16;
  CHECK_THROWS_WITH(
      build_training_steps(tiny(), tiny_options(o)),
      "--oft-block-size: You can only specify either r (4) or oft_block_size (16), but not both "
      "simultaneously (OFTConfig)");
  o = method(PeftMethod::kBoft, 0);
  o.block_size = 4;
  o.block_num = 16;
  CHECK_THROWS_AS(build_training_steps(tiny(), tiny_options(o)), InputError);
  o = method(PeftMethod::kBoft, 0);
  o.block_size = 4;
  o.butterfly_factor = 6;  // 4 x 2^5 = 128 > 64 in_features
  CHECK_THROWS_WITH(
      build_training_steps(tiny(), tiny_options(o)),
      "--boft-block-size: Invalid combination of in_features (64), boft_n_butterfly_factor (6) and "
      "boft_block_size (4) (BOFT)");
}
