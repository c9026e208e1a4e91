// The PEFT catalogue (sim/finetune/peft_method.h): per method, the trainable parameters PEFT reports and
// the bytes autograd keeps for backward, worked out by hand from PEFT's source (PEFT 5d602fdb, the commit
// peft_lora.cpp follows; files and functions named at each check).
//
// Trainable and total parameter counts are PEFT's own output: its method-comparison benchmark
// (huggingface/peft method_comparison/MetaMathQA/results/<experiment>.json, train_info.num_trainable_params
// and num_total_params, printed by PeftModel.get_nb_trainable_parameters) on meta-llama/Llama-3.2-3B
// (hidden 3072, 28 layers, 24 query heads and 8 key/value heads of 128: q_proj 3072 -> 3072, v_proj and
// k_proj 3072 -> 1024, down_proj 8192 -> 3072; 3,212,749,824 parameters with the tied embeddings once).
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

LoraOptions method(PeftMethod m, int rank, std::vector<std::string> targets) {
  return test::peft_method(m, rank, std::move(targets));
}

constexpr std::int64_t kT = test::kTinyTokens, kD = test::kTinyWidth, kKv = test::kTinyKv,
                       kFf = test::kTinyFf;
ModelConfig tiny() { return test::tiny_peft_model(); }
TrainingOptions tiny_options(const LoraOptions& lora) { return test::tiny_peft_options(lora); }

}  // namespace

TEST_CASE("PEFT catalogue: trainable parameters of Llama-3.2-3B as PEFT's MetaMathQA runs report them",
          "[quick][graph][peft]") {
  const ModelConfig m = llama32_3b();
  SECTION("LoRA r 32 on q_proj, v_proj (lora--llama-3.2-3B-rank32.json): 9,175,040 of 3,221,924,864") {
    // per layer r x (in + out): 32 x (3072 + 3072) + 32 x (3072 + 1024) = 327,680; x 28
    const ParameterCount c = count_parameters(m, method(PeftMethod::kLora, 32, {"q_proj", "v_proj"}));
    CHECK(c.trainable == 28 * (32 * (3072 + 3072) + 32 * (3072 + 1024)));
    CHECK(c.trainable == 9175040);
    CHECK(c.total == 3221924864);
  }
  SECTION("DoRA (lora--llama-3.2-3B-rank32-dora.json): 9,289,728, LoRA's + a magnitude of out per layer") {
    LoraOptions o = method(PeftMethod::kLora, 32, {"q_proj", "v_proj"});
    o.use_dora = true;
    const ParameterCount c = count_parameters(m, o);
    CHECK(c.trainable == 9175040 + 28 * (3072 + 1024));
    CHECK(c.trainable == 9289728);
    CHECK(c.total == 3222039552);
  }
  SECTION("LoRA-FA (lora--llama-3.2-3B-rank32-lorafa.json): lora_A frozen, 3,670,016 trainable") {
    LoraOptions o = method(PeftMethod::kLora, 32, {"q_proj", "v_proj"});
    o.lora_fa = true;
    const ParameterCount c = count_parameters(m, o);
    CHECK(c.trainable == 28 * (3072 * 32 + 1024 * 32));  // lora_B only
    CHECK(c.trainable == 3670016);
    CHECK(c.total == 3221924864);  // lora_A still counted in all params
  }
  SECTION("IA3, PEFT's llama defaults (ia3--llama-3.2-3B-default.json): 286,720") {
    // k_proj, v_proj: ia3_l (out, 1) = 1024 each; down_proj is a feedforward module: (1, in) = 8192
    const ParameterCount c = count_parameters(m, method(PeftMethod::kIa3, 0, {}));
    CHECK(c.trainable == 28 * (1024 + 1024 + 8192));
    CHECK(c.trainable == 286720);
    CHECK(c.total == 3213036544);
  }
  SECTION("prompt tuning, 200 virtual tokens (prompt_tuning--llama-3.2-3B-default.json): 614,400") {
    LoraOptions o = method(PeftMethod::kPromptTuning, 0, {});
    o.num_virtual_tokens = 200;
    const ParameterCount c = count_parameters(m, o);
    CHECK(c.trainable == 200 * 3072);  // PromptEmbedding: nn.Embedding(200, token_dim)
    CHECK(c.total == 3213364224);
  }
  SECTION("P-tuning, 20 virtual tokens, MLP of 3072 (ptuning--llama-3.2-3B-default.json): 28,382,208") {
    LoraOptions o = method(PeftMethod::kPTuning, 0, {});
    o.num_virtual_tokens = 20;
    o.encoder_hidden_size = 3072;
    const ParameterCount c = count_parameters(m, o);
    // PromptEncoder: embedding 20 x 3072, mlp_head three Linear(3072, 3072) with biases
    CHECK(c.trainable == 20 * 3072 + 3 * (3072 * 3072 + 3072));
    CHECK(c.trainable == 28382208);
    CHECK(c.total == 3241132032);
  }
  SECTION("LoHa r 32 (loha--llama-3.2-3B-rank32.json): 18,350,080") {
    // hada_w1_a, hada_w2_a (out, r), hada_w1_b, hada_w2_b (r, in): 2 r (in + out) per layer
    const ParameterCount c = count_parameters(m, method(PeftMethod::kLoha, 32, {"q_proj", "v_proj"}));
    CHECK(c.trainable == 28 * (2 * 32 * (3072 + 3072) + 2 * 32 * (3072 + 1024)));
    CHECK(c.trainable == 18350080);
    CHECK(c.total == 3231099904);
  }
  SECTION("LoKr r 32, decompose_factor 4 (lokr--llama-3.2-3B-rank32-factor4-lr0.003.json): 2,294,656") {
    LoraOptions o = method(PeftMethod::kLokr, 32, {"q_proj", "v_proj"});
    o.decompose_factor = 4;
    const ParameterCount c = count_parameters(m, o);
    // factorization(3072, 4) = (4, 768), factorization(1024, 4) = (4, 256). q_proj: lokr_w1 (4, 4), and as
    // r = 32 < max(768, 768) / 2, lokr_w2_a (768, 32) and lokr_w2_b (32, 768); v_proj: lokr_w1 (4, 4),
    // lokr_w2_a (256, 32), lokr_w2_b (32, 768)
    CHECK(c.trainable == 28 * ((16 + 768 * 32 + 32 * 768) + (16 + 256 * 32 + 32 * 768)));
    CHECK(c.trainable == 2294656);
    CHECK(c.total == 3215044480);
  }
  SECTION("VeRA r 256 (vera--llama-3.2-3B-default.json): 129,024; vera_A / vera_B are buffers") {
    // vera_lambda_b (out) and vera_lambda_d (r) per layer
    const ParameterCount c = count_parameters(m, method(PeftMethod::kVera, 256, {"q_proj", "v_proj"}));
    CHECK(c.trainable == 28 * ((3072 + 256) + (1024 + 256)));
    CHECK(c.trainable == 129024);
    CHECK(c.total == kLlama32Base + 129024);
  }
}

TEST_CASE("PEFT catalogue: what each method saves for backward in a decoder layer", "[quick][graph][peft]") {
  // Layer 0 of the tiny Llama: its input does not require grad (the embeddings are frozen), so only what
  // the adapters' own gradients need is saved there. Adapters are fp32 (autocast_adapter_dtype=True), the
  // model bf16.
  const std::string attn = "layers.0.attn.";  // vramsim's op names (layer_name)
  SECTION("LoRA: lora_A keeps the fp32 copy of its input, lora_B lora_A's output (lora/layer.py)") {
    const OpGraph g =
        build_training_steps(tiny(), tiny_options(method(PeftMethod::kLora, 8, {"q_proj", "v_proj"})));
    CHECK(saved_by(g, 0, {".lora_cast_input"}) == 2 * kT * kD * 4);
    CHECK(saved_by(g, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * kT * 8 * 4);
  }
  SECTION("LoRA-FA: lora_A frozen (create_lorafa_optimizer), so its input is not saved") {
    LoraOptions o = method(PeftMethod::kLora, 8, {"q_proj", "v_proj"});
    o.lora_fa = true;
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    CHECK(saved_by(g, 0, {".lora_cast_input"}) == 0);
    CHECK(saved_by(g, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * kT * 8 * 4);
    // AdamW's exp_avg and exp_avg_sq for lora_B only: 2 layers x (64 x 8 + 32 x 8) x 2 states x 4 bytes
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * (64 * 8 + 32 * 8) * 2 * 4);
  }
  SECTION("DoRA: also the base output and lora_B's output (DoraLinearLayer.forward)") {
    LoraOptions o = method(PeftMethod::kLora, 8, {"q_proj", "v_proj"});
    o.use_dora = true;
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    // (mag_norm_scale - 1) * base_result saves base_result (bf16, the base layer's output);
    // mag_norm_scale * lora_result saves lora_result (fp32) and mag_norm_scale (out fp32);
    // magnitude / weight_norm saves weight_norm (out fp32)
    CHECK(saved_by(g, 0, {attn + "q_proj", attn + "v_proj"}) == kT * kD * 2 + kT * kKv * 2);
    CHECK(saved_by(g, 0, {"q_proj.lora_B", "v_proj.lora_B"}) == kT * kD * 4 + kT * kKv * 4);
    CHECK(saved_by(g, 0, {".dora.weight_norm", ".dora.magnitude/weight_norm"}) == 2 * (kD + kKv) * 4);
    CHECK(saved_by(g, 0, {".lora_cast_input"}) == 2 * kT * kD * 4);
  }
  SECTION("IA3: the base output of k_proj / v_proj, the fp32 input of down_proj (ia3/layer.py)") {
    const OpGraph g = build_training_steps(tiny(), tiny_options(method(PeftMethod::kIa3, 0, {})));
    // llama's defaults: k_proj, v_proj (result * ia3_l saves result, bf16), down_proj feedforward
    // (x.to(fp32) * ia3_l saves the fp32 input, T x d_ff)
    CHECK(saved_by(g, 0, {attn + "k_proj", attn + "v_proj"}) == 2 * kT * kKv * 2);
    CHECK(saved_by(g, 0, {"down_proj.ia3_cast_input"}) == kT * kFf * 4);
  }
  SECTION("LoHa: the (out, in) delta weight, saved by F.linear, and the fp32 input (loha/layer.py)") {
    const OpGraph g =
        build_training_steps(tiny(), tiny_options(method(PeftMethod::kLoha, 4, {"q_proj", "v_proj"})));
    // layer 1, whose input requires grad (layer 0's adapters): F.linear then keeps the delta weight too
    CHECK(saved_by(g, 1, {".HadaWeight"}) == (kD * kD + kKv * kD) * 4);
    CHECK(saved_by(g, 1, {".cast_input"}) == 2 * kT * kD * 4);
    CHECK(saved_by(g, 0, {".HadaWeight"}) == 0);
  }
  SECTION("VeRA: lambda_d's and lambda_b's operands, (T, r) and (T, out) in fp32 (vera/layer.py)") {
    const OpGraph g =
        build_training_steps(tiny(), tiny_options(method(PeftMethod::kVera, 16, {"q_proj", "v_proj"})));
    CHECK(saved_by(g, 0, {".vera.F.linear(x, sliced_A)"}) == 2 * kT * 16 * 4);
    CHECK(saved_by(g, 0, {".vera.F.linear(., sliced_B)"}) == kT * kD * 4 + kT * kKv * 4);
    // vera_A (16, 64) and vera_B (64, 16), fp32, once for the model, not in the optimizer
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * (64 + 16 + 32 + 16) * 2 * 4);
  }
  SECTION("prompt tuning: every position of seq + num_virtual_tokens through the model") {
    LoraOptions o = method(PeftMethod::kPromptTuning, 0, {});
    o.num_virtual_tokens = 8;
    const OpGraph g = build_training_steps(tiny(), tiny_options(o));
    // torch.cat((prompts, inputs_embeds), dim=1): batch 2 x (32 + 8) x 64 in bf16
    CHECK(test::sizes_named(g, "torch.cat((prompts, inputs_embeds), dim=1)") ==
          std::vector<Bytes>{2 * 40 * 64 * 2});
    // the prompt embedding (8 x 64 fp32) is the only trainable tensor: AdamW keeps two of its size
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * 8 * 64 * 4);
  }
}

TEST_CASE("PEFT catalogue: refusals", "[quick][graph][peft]") {
  TrainingOptions o = tiny_options(method(PeftMethod::kPrefixTuning, 0, {}));
  o.lora.num_virtual_tokens = 8;
  o.checkpointing = Checkpointing::kFull;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o),
                    "--peft-method prefix-tuning: with --generate, --pp, --tp, --cp, --checkpointing, "
                    "--compile-mode, or on a model other than Llama-style transformers code, is not modelled "
                    "(vramsim)");
  o = tiny_options(method(PeftMethod::kIa3, 0, {}));
  o.lora.use_dora = true;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o), "--use-dora: a LoraConfig option (--peft-method lora)");
  o = tiny_options(method(PeftMethod::kPromptTuning, 0, {}));
  CHECK_THROWS_AS(build_training_steps(tiny(), o), InputError);  // num_virtual_tokens is required
  CHECK_THROWS_WITH(parse_peft_method("adapter"),
                    "--peft-method: unknown value 'adapter' (known: lora, ia3, prompt-tuning, p-tuning, "
                    "prefix-tuning, loha, lokr, vera, oft, boft, adalora, trainable-tokens)");
}
