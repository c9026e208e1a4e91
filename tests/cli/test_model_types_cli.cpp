// Each supported model_type end to end through the CLI, from a real config.json (tests/data/hf_configs;
// llama4_text: the stored Llama-4-Scout file's text_config written alone): `predict` for a training step and
// for generation, `fit` and `plan`. What can fail: the parameter count the report prints
// is the count worked by hand (tests/graph/test_hf_real_configs.cpp, test_hf_model_types_2025.cpp: the
// constants below are those hand counts) and the parameters' bytes are that count x 2 (bf16); a quantized
// checkpoint is refused with the format it read.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"

using vramsim::test::run_vramsim;
using vramsim::test::write_file;

namespace {

std::string stored(const std::string& file) {
  return (vramsim::test::source_dir() / "tests" / "data" / "hf_configs" / file).string();
}

struct Case {
  std::string model_type;
  std::string config;  // a path
  std::int64_t parameters;
};

// A copy of a stored config with fewer layers, for the MoE models whose full step takes minutes to simulate
// (DeepSeek-V3: 61 layers of 256 experts); every other key as stored.
std::string with_layers(const std::string& file, int layers) {
  std::ifstream in(stored(file));
  nlohmann::json j = nlohmann::json::parse(in);
  j["num_hidden_layers"] = layers;
  return write_file(std::to_string(layers) + "_layers_" + file, j.dump()).string();
}

// The stored Llama-4-Scout file with fewer layers in its text_config (llama4), or that text_config alone as a
// config.json (llama4_text, as a text-only checkpoint writes it).
std::string scout(int layers, bool text_only) {
  std::ifstream in(stored("unsloth__Llama-4-Scout-17B-16E.config.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  j["text_config"]["num_hidden_layers"] = layers;
  const std::string name =
      std::to_string(layers) + (text_only ? "_layers_scout_text.json" : "_layers_scout.json");
  return write_file(name, (text_only ? j["text_config"] : j).dump()).string();
}

// Llama-4-Scout's language model with one of its 48 layers (test_hf_real_configs.cpp counts all 48): q and o
// 5120 x 5120, k and v 5120 x 1024, 16 fused experts of 3 x 5120 x 8192, router 16 x 5120, the shared expert
// 3 x 5120 x 8192, two norms; untied 202048 x 5120 embeddings and lm_head; final norm
constexpr std::int64_t kScoutOneLayer =
    2 * 202048LL * 5120 +
    (2 * 5120 * 5120 + 2 * 5120 * 1024 + 17 * 3LL * 5120 * 8192 + 16 * 5120 + 2 * 5120) + 5120;

// Every supported model_type from a stored real config.json (SOURCES.md), with the hand counts of
// test_hf_real_configs.cpp.
std::vector<Case> cases() {
  return {
      {"gpt2", stored("openai-community__gpt2.config.json"), 124'439'808},
      // wte 49280 x 2048, wpe 2048 x 2048, ln_f; per layer two LayerNorms, c_attn 2048 x (2048 + 2 x 128) +
      // bias (one key/value head), c_proj 2048 x 2048 + bias, c_fc 2048 x 8192 + bias, c_proj 8192 x 2048 +
      // bias: 49280*2048 + 2048*2048 + 24*(4*2048 + 2048*2304 + 2304 + 2048*2048 + 2048 + 2*2048*8192 + 8192
      // + 2048) + 2*2048
      {"gpt_bigcode", stored("bigcode__gpt_bigcode-santacoder.config.json"), 1'124'886'528},
      {"llama", stored("meta-llama__Llama-3.2-3B.config.json"), 3'212'749'824},
      {"qwen2", stored("Qwen__Qwen2.5-7B.config.json"), 7'615'616'512},
      {"qwen3", stored("Qwen__Qwen3-8B.config.json"), 8'190'735'360},
      // Qwen3-30B-A3B with 1 of its 48 layers: attention 2048 x 4096 + 2 x 2048 x 512 + 4096 x 2048, q/k
      // norms 2 x 128, router 128 x 2048, 128 experts of 3 x 2048 x 768, two norms; untied embeddings; final
      // norm
      {"qwen3_moe", with_layers("Qwen__Qwen3-30B-A3B.config.json", 1),
       2 * 151936LL * 2048 +
           (2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 128 * 2048 + 128LL * 3 * 2048 * 768 +
            2 * 2048) +
           2048},
      // Gemma 2 report's 2,024,517,888 non-embedding + 256000 x 2304 tied embeddings
      {"gemma2", stored("google__gemma-2-2b-it.config.json"), 2'614'341'888},
      {"gemma3_text", stored("google__gemma-3-1b-it.config.json"), 999'885'952},
      {"phi", stored("microsoft__phi-2.config.json"), 2'779'683'840},
      // 2 x 32064 x 3072 + 3072 + 32 x (3072 x 9216 + 3072 x 3072 + 3072 x 16384 + 8192 x 3072 + 2 x 3072)
      {"phi3", stored("microsoft__Phi-3-mini-4k-instruct.config.json"), 3'821'079'552},
      {"mixtral", stored("mistralai__Mixtral-8x7B-v0.1.config.json"), 46'702'792'704},
      {"gpt_oss", stored("openai__gpt-oss-20b.config.json"), 20'914'757'184},
      // DeepSeek-V3 with 4 of its 61 layers: the 3 dense ones (first_k_dense_replace) and one MoE layer; MLA
      // attention as in test_hf_real_configs.cpp, dense MLP 3 x 7168 x 18432, 256 experts + 1 shared of
      // 3 x 7168 x 2048 and the 256 x 7168 router
      {"deepseek_v3", with_layers("deepseek-ai__DeepSeek-V3.config.json", 4),
       4 * (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168 +
            2 * 7168) +
           3 * 3LL * 7168 * 18432 + (257LL * 3 * 7168 * 2048 + 256 * 7168) + 2 * 129280LL * 7168 + 7168},
      // the hand counts of tests/graph/test_hf_real_configs.cpp
      {"mistral", stored("mistralai__Mistral-7B-Instruct-v0.3.config.json"), 7'248'023'552},
      {"olmo2", stored("allenai__OLMo-2-1124-7B-Instruct.config.json"), 7'298'617'344},
      {"granite", stored("ibm-granite__granite-3.3-8b-instruct.config.json"), 8'170'864'640},
      // the language model's 3,880,263,168 and the SigLIP tower and projector (test_hf_real_configs.cpp)
      {"gemma3", stored("google__gemma-3-4b-it.config.json"), 4'300'079'472},
      {"falcon", stored("tiiuae__falcon-7b.config.json"), 6'921'720'704},
      {"gemma", stored("unsloth__gemma-2b.config.json"), 2'506'172'416},
      {"starcoder2", stored("bigcode__starcoder2-3b.config.json"), 3'030'371'328},
      // Qwen1.5-MoE-A2.7B with 1 of its 24 layers: q/k/v 2048 x 2048 + bias, o 2048 x 2048, router 60 x 2048,
      // 60 experts of 3 x 2048 x 1408, the shared expert 3 x 2048 x 5632 and its 1 x 2048 gate, two norms
      {"qwen2_moe", with_layers("Qwen__Qwen1.5-MoE-A2.7B.config.json", 1),
       2 * 151936LL * 2048 +
           (3 * (2048 * 2048 + 2048) + 2048 * 2048 + 60 * 2048 + 60LL * 3 * 2048 * 1408 + 3 * 2048 * 5632 +
            2048 + 2 * 2048) +
           2048},
      {"llama4", scout(1, false), kScoutOneLayer},
      {"llama4_text", scout(1, true), kScoutOneLayer},
  };
}

nlohmann::json predict_json(const std::string& args) {
  const auto r = run_vramsim("predict " + args + " --json");
  INFO(args << "\n" << r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("every model_type runs predict (training and generation), fit and plan from its config.json",
          "[cli][slow]") {
  for (const Case& c : cases()) {
    INFO(c.model_type << " " << c.config);
    const std::string model = "--model " + c.config + " --capacity 2000GiB --precision bf16 ";
    // gemma3's vision part runs in the step (vision_tower.h): a text-only batch here (its image is 256
    // tokens)
    const bool vlm = c.model_type == "gemma3";
    const nlohmann::json train = predict_json(model + "--batch 1 --seq 64 --checkpointing full" +
                                              (vlm ? " --images-per-sample 0" : ""));
    CHECK(train.at("total_parameters").get<std::int64_t>() == c.parameters);
    CHECK(train.at("bill").at("parameters").get<std::int64_t>() == 2 * c.parameters);
    if (vlm) {  // generate() with images is not modelled (as for llava)
      const auto r = run_vramsim("predict " + model + "--batch 1 --seq 300 --generate 2");
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err,
                 Catch::Matchers::Contains("--generate with a vision-language model (gemma3): not modelled"));
      continue;
    }
    const nlohmann::json gen = predict_json(model + "--batch 1 --seq 16 --generate 2");
    CHECK(gen.at("total_parameters").get<std::int64_t>() == c.parameters);
    CHECK(gen.at("bill").at("parameters").get<std::int64_t>() == 2 * c.parameters);
    CHECK(gen.at("bill").at("gradients").get<std::int64_t>() == 0);
  }
}

TEST_CASE("gemma3: the SigLIP tower, pooling projector and language model in the step", "[cli]") {
  // gemma-3-4b-it: its SigLIP tower and projector, counted by hand in test_hf_real_configs.cpp, run in the
  // step with the language model (inference: every parameter in bf16 on the device)
  const std::string model = "--model " + stored("google__gemma-3-4b-it.config.json") +
                            " --capacity 200GiB --precision bf16 --batch 1 --seq 300 --inference";
  const nlohmann::json j = predict_json(model);
  CHECK(j.at("total_parameters").get<std::int64_t>() == 3'880'263'168 + 416'866'032 + 1152 * 2560 + 1152);
  CHECK(j.at("bill").at("parameters").get<std::int64_t>() ==
        2 * (3'880'263'168LL + 416'866'032 + 1152 * 2560 + 1152));
  const nlohmann::json& v = j.at("vision_part");
  CHECK(v.at("model_type") == "siglip_vision_model");
  CHECK(v.at("tower_parameters").get<std::int64_t>() == 416'866'032);
  CHECK(v.at("projector_parameters").get<std::int64_t>() == 1152 * 2560 + 1152);
  CHECK(v.at("tokens_per_image").get<std::int64_t>() == 256);  // mm_tokens_per_image
  // 256 image tokens do not fit in 64
  const auto r = run_vramsim("predict --model " + stored("google__gemma-3-4b-it.config.json") +
                             " --capacity 200GiB --precision bf16 --batch 1 --seq 64 --inference");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("256 image tokens (256 per image) do not fit in --seq 64"));
}

TEST_CASE("fit and plan take a real config.json of the current model_types", "[cli][slow]") {
  for (const char* file :
       {"Qwen__Qwen3-8B.config.json", "openai__gpt-oss-20b.config.json", "microsoft__phi-2.config.json",
        "mistralai__Mistral-7B-Instruct-v0.3.config.json", "allenai__OLMo-2-1124-7B-Instruct.config.json",
        "ibm-granite__granite-3.3-8b-instruct.config.json", "google__gemma-3-4b-it.config.json",
        "unsloth__gemma-2b.config.json", "bigcode__starcoder2-3b.config.json",
        "tiiuae__falcon-7b.config.json"}) {
    INFO(file);
    const auto fit = run_vramsim("fit --model " + stored(file) +
                                 " --gpu H100 --precision bf16 --seq 512 --checkpointing full --json");
    INFO(fit.err);
    REQUIRE(fit.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(fit.out);
    CHECK_FALSE(j.at("trials").empty());
    if (std::string(file) == "microsoft__phi-2.config.json") {
      // 2,779,683,840 bf16 parameters, their gradients and AdamW's two bf16 states (no master copy on one
      // GPU): 8 bytes each, 22.2 GB, well under the H100's 0.9 x 79.2 GiB: batch 1 fits
      CHECK(j.at("best").get<int>() >= 1);
    }
  }
  for (const char* file :
       {"microsoft__phi-2.config.json", "mistralai__Mistral-7B-Instruct-v0.3.config.json",
        "allenai__OLMo-2-1124-7B-Instruct.config.json", "ibm-granite__granite-3.3-8b-instruct.config.json",
        "google__gemma-3-4b-it.config.json", "unsloth__gemma-2b.config.json",
        "bigcode__starcoder2-3b.config.json", "tiiuae__falcon-7b.config.json"}) {
    INFO(file);
    const auto plan = run_vramsim("plan --model " + stored(file) +
                                  " --gpu H100 --gpus 8 --global-batch 8 --seq 512 --json");
    INFO(plan.err);
    REQUIRE(plan.exit_code == 0);
    CHECK(nlohmann::json::parse(plan.out).at("configurations_evaluated").get<int>() > 0);
  }
  // the MoE checkpoints with one layer each (their full steps take minutes): Qwen1.5-MoE-A2.7B, Llama-4-Scout
  for (const std::string& model : {with_layers("Qwen__Qwen1.5-MoE-A2.7B.config.json", 1), scout(1, false)}) {
    INFO(model);
    const auto fit = run_vramsim("fit --model " + model +
                                 " --gpu H100 --precision bf16 --seq 512 --checkpointing full --json");
    INFO(fit.err);
    REQUIRE(fit.exit_code == 0);
    CHECK(nlohmann::json::parse(fit.out).at("best").get<int>() >= 1);
    const auto plan =
        run_vramsim("plan --model " + model + " --gpu H100 --gpus 8 --global-batch 8 --seq 512 --json");
    INFO(plan.err);
    REQUIRE(plan.exit_code == 0);
    CHECK(nlohmann::json::parse(plan.out).at("configurations_evaluated").get<int>() > 0);
  }
}

TEST_CASE("a quantized checkpoint is refused naming the format it read, in predict, fit and plan", "[cli]") {
  // DeepSeek-V3's fp8 block on the stored copy (SOURCES.md); the bytes are the hand count of
  // tests/graph/test_hf_real_configs.cpp ("fp8: DeepSeek-V3's block").
  nlohmann::json j =
      nlohmann::json::parse(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  const std::string path = write_file("llama_fp8.json", j.dump()).string();
  // 224 linear layers, one byte per weight; a float32 per 128 x 128 tile: per layer q and o 32 x 32, k and
  // v 8 x 32, gate and up 112 x 32, down 32 x 112
  const std::int64_t weights = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096;
  const std::int64_t tiles = 2 * 32 * 32 + 2 * 8 * 32 + 3 * 112 * 32;
  const std::string expected = path +
                               ": quantization_config: fp8 (float8_e4m3fn weights, a float32 scale per 128 x "
                               "128 block): 224 weights in " +
                               std::to_string(32 * (weights + 4 * tiles)) + " B";
  for (const std::string& cmd :
       {"predict --model " + path + " --gpu H100 --batch 1 --seq 128",
        "fit --model " + path + " --gpu H100 --seq 128",
        "plan --model " + path + " --gpu H100 --gpus 8 --global-batch 8 --seq 512"}) {
    INFO(cmd);
    const auto r = run_vramsim(cmd);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Matchers::Contains(expected));
    CHECK_THAT(r.err, Catch::Matchers::Contains("not modelled"));
  }
  // bitsandbytes' block is the --base-weights path: the same prediction as the flags
  j["quantization_config"] = {{"quant_method", "bitsandbytes"},
                              {"load_in_4bit", true},
                              {"bnb_4bit_quant_type", "nf4"},
                              {"bnb_4bit_compute_dtype", "bfloat16"}};
  j["num_hidden_layers"] = 2;
  const std::string bnb = write_file("llama_bnb.json", j.dump()).string();
  j.erase("quantization_config");
  const std::string plain = write_file("llama_plain.json", j.dump()).string();
  const auto from_config =
      run_vramsim("predict --model " + bnb + " --gpu H100 --batch 1 --seq 128 --lora-rank 8 --json");
  const auto from_flags = run_vramsim(
      "predict --model " + plain +
      " --gpu H100 --batch 1 --seq 128 --lora-rank 8 --base-weights nf4 --bnb-compute-dtype bf16 --json");
  REQUIRE(from_config.exit_code == 0);
  REQUIRE(from_flags.exit_code == 0);
  CHECK(nlohmann::json::parse(from_config.out).at("peak_reserved_bytes") ==
        nlohmann::json::parse(from_flags.out).at("peak_reserved_bytes"));
  CHECK(nlohmann::json::parse(from_config.out).at("base_weights").at("format") == "nf4");
  const auto conflict = run_vramsim("predict --model " + bnb +
                                    " --gpu H100 --batch 1 --seq 128 --lora-rank 8 --base-weights int8");
  CHECK(conflict.exit_code == 2);
  CHECK_THAT(conflict.err,
             Catch::Matchers::Contains("--base-weights int8: contradicts the quantization_config of " + bnb));
}

TEST_CASE("LoRA takes PEFT's default target_modules for qwen3, gemma3_text, phi and falcon", "[cli]") {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: qwen3 q_proj, v_proj; phi q_proj, v_proj, fc1,
  // fc2. A rank-r adapter on an in x out Linear has r x (in + out) parameters.
  // Qwen3-8B, r 16: q 16 x (4096 + 4096), v 16 x (4096 + 1024), 36 layers
  const nlohmann::json qwen3 =
      predict_json("--model " + stored("Qwen__Qwen3-8B.config.json") +
                   " --capacity 200GiB --batch 1 --seq 64 --precision bf16 --lora-rank 16");
  CHECK(qwen3.at("trainable_parameters").get<std::int64_t>() == 36 * (16 * 8192 + 16 * 5120));
  // phi-2, r 8: q and v 8 x (2560 + 2560), fc1 8 x (2560 + 10240), fc2 8 x (10240 + 2560), 32 layers
  const nlohmann::json phi =
      predict_json("--model " + stored("microsoft__phi-2.config.json") +
                   " --capacity 200GiB --batch 1 --seq 64 --precision bf16 --lora-rank 8");
  CHECK(phi.at("trainable_parameters").get<std::int64_t>() == 32 * (2 * 8 * 5120 + 2 * 8 * 12800));
  // gpt-oss has no entry: PEFT asks for target_modules
  const auto oss = run_vramsim("predict --model " + stored("openai__gpt-oss-20b.config.json") +
                               " --capacity 200GiB --batch 1 --seq 64 --lora-rank 8");
  CHECK(oss.exit_code == 2);
  CHECK_THAT(oss.err, Catch::Matchers::Contains("no default target_modules for model_type 'gpt_oss'"));
}

TEST_CASE("llava: the vision tower, projector and language model in the step, frozen or trained", "[cli]") {
  // llava-1.5-7b-hf, counted by hand in tests/graph/test_vision_tower.cpp: language model 6,738,939,904, CLIP
  // tower 303,507,456, projector 20,979,712. A frozen tower (the default) leaves the projector and the
  // language model to train; every parameter is in the bill (bf16: 2 bytes each).
  const std::string model = "--model " + stored("llava-hf__llava-1.5-7b-hf.config.json") +
                            " --capacity 2000GiB --precision bf16 --batch 1 --seq 640 --checkpointing full";
  const nlohmann::json frozen = predict_json(model);
  CHECK(frozen.at("total_parameters").get<std::int64_t>() == 7'063'427'072);
  CHECK(frozen.at("trainable_parameters").get<std::int64_t>() == 6'738'939'904 + 20'979'712);
  CHECK(frozen.at("bill").at("parameters").get<std::int64_t>() == 2 * 7'063'427'072LL);
  const nlohmann::json& v = frozen.at("vision_part");
  CHECK(v.at("tokens_per_image") == 576);
  CHECK(v.at("tower_frozen") == true);
  const nlohmann::json trained = predict_json(model + " --freeze-vision-tower false");
  CHECK(trained.at("trainable_parameters").get<std::int64_t>() == 7'063'427'072);
  CHECK(trained.at("vision_part").at("tower_frozen") == false);
  // the tower's gradients and AdamW states (fp32 master weights) come on top
  CHECK(trained.at("peak_allocated_bytes").get<std::int64_t>() >
        frozen.at("peak_allocated_bytes").get<std::int64_t>() + 303'507'456LL * 2);
  // --seq counts the image tokens: two images of 576 need 1152 of its 640
  const auto r = run_vramsim("predict " + model + " --images-per-sample 2");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains(
                        "--images-per-sample 2: 1152 image tokens (576 per image) do not fit in --seq 640"));
}

TEST_CASE("mllama: --json names the vision part that runs with images, and the one only in memory without",
          "[cli]") {
  // Llama-3.2-11B-Vision-Instruct, counted by hand in tests/graph/test_mllama.cpp and docs/vlm.md: the
  // tower 863,567,379 parameters (32 local + 8 global layers), the projector 7680 x 4096 + 4096 =
  // 31,461,376, 8 cross-attention layers of 218,112,258 = 1,744,898,064; MllamaImageProcessor pads every
  // image to max_num_tiles 4 tiles of (560 / 14)^2 + 1 = 1601 patches.
  const std::string model = "--model " + stored("meta-llama__Llama-3.2-11B-Vision-Instruct.config.json") +
                            " --capacity 2000GiB --precision bf16 --batch 1 --seq 256 --checkpointing full "
                            "--lora-rank 8 --lora-targets q_proj,v_proj";
  const nlohmann::json with_images = predict_json(model + " --images-per-sample 1");
  REQUIRE(with_images.contains("vision_part"));
  CHECK_FALSE(with_images.contains("vision_part_not_simulated"));
  const nlohmann::json& v = with_images.at("vision_part");
  CHECK(v.at("model_type") == "mllama_vision_model");
  CHECK(v.at("tower_parameters").get<std::int64_t>() == 863'567'379);
  CHECK(v.at("tower_layers") == 32);
  CHECK(v.at("tower_global_layers") == 8);
  CHECK(v.at("projector_parameters").get<std::int64_t>() == 31'461'376);
  CHECK(v.at("cross_attention_parameters").get<std::int64_t>() == 1'744'898'064);
  CHECK(v.at("cross_attention_layers").size() == 8);
  CHECK(v.at("tower_frozen") == true);  // PEFT freezes every base parameter
  CHECK(v.at("images_per_sample") == 1);
  CHECK(v.at("tiles_per_image") == 4);
  CHECK(v.at("patches_per_tile") == 1601);
  // a text-only batch runs none of it: the parts are in memory only
  const nlohmann::json text_only = predict_json(model + " --images-per-sample 0");
  CHECK_FALSE(text_only.contains("vision_part"));
  CHECK(text_only.at("vision_part_not_simulated").at("in_memory") == true);
}
