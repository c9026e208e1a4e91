// vLLM V1's multimodal profile run (sim/inference/vllm_multimodal_budget.h, the vision part of
// sim/serving/vllm_v1_sizing.cpp): every expected value is worked by hand below from vLLM's source
// (vllm/multimodal/encoder_budget.py MultiModalBudget, vllm/v1/core/encoder_cache_manager.py
// compute_mm_encoder_budget, vllm/v1/worker/gpu_model_runner.py profile_run at 000fc94b, the model files
// gemma3_mm.py, llava.py, qwen2_vl.py, siglip.py, clip.py). The public start-up logs these reproduce are
// named at each check; the KV cache they leave is compared in docs/serving.md, not asserted here.
#include <catch2/catch.hpp>

#include <string>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_multimodal_budget.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

std::string stored(const std::string& file) {
  return (test::source_dir() / "tests" / "data" / "hf_configs" / file).string();
}

// medgemma-27b-it as deployed in docs/serving.md's row: RTX PRO 6000, util 0.95, max_model_len 131072,
// max_num_seqs 16 (the 96 GB card takes the 8,192-token default).
RequestArgs medgemma_on_rtx_pro_6000() {
  RequestArgs a = test::served_on_h100(stored("google__gemma-3-27b-it.config.json"));
  a.gpu = "rtx-pro-6000";
  a.gpu_memory_utilization = 0.95;
  a.max_model_len = 131072;
  a.max_num_seqs = 16;
  return a;
}

}  // namespace

TEST_CASE("vllm multimodal: the encoder budget and the dummy items, as MultiModalBudget counts them",
          "[quick][predict][vllm-mm]") {
  // Gemma 3 (gemma3_mm.py get_max_image_tokens, pan-and-scan off): "<start_of_image>" + 256 soft tokens +
  // "<end_of_image>" = 258 tokens an image. Budget max(8192, 258) = 8192; per prompt min(999, 131072 // 258
  // = 508); per batch min(8192 // 258 = 31, 16 x 508) = 31 (258 x 32 = 8256 > 8192). A public vLLM 0.11
  // log of gemma-3-27b-it (find_string id 9297248278) prints "a budget of 8192 tokens, and profiled with 31
  // image items".
  const VllmMmBudget g = vllm_mm_budget({8192, 131072, 16, 258, kVllmDefaultMmLimit});
  CHECK(g.encoder_compute_budget == 8192);
  CHECK(g.encoder_cache_size == 8192);
  CHECK(g.encoder_budget == 8192);
  CHECK(g.max_items_per_prompt == 508);
  CHECK(g.max_items_per_batch == 31);
  // the same log's limit_mm_per_prompt {"image": 2} at max_model_len 4096, 1,024 sequences: per prompt
  // min(2, 4096 // 258 = 15) = 2, per batch min(31, 1024 x 2) = 31: the same 31
  CHECK(vllm_mm_budget({8192, 4096, 1024, 258, 2}).max_items_per_batch == 31);
  // Qwen2.5-VL-7B (16,384 tokens an image at max_pixels 12845056) at 2,048 batched tokens: the budget grows
  // to one item, max(2048, 16384) = 16384; per prompt max(1, min(999, 2048 // 16384 = 0)) = 1; one item.
  // vLLM 0.9.0.1 on an L4 (find_string id 39769618681): "a budget of 16384 tokens, and profiled with 1
  // image items".
  const VllmMmBudget q = vllm_mm_budget({2048, 2048, 256, 16384, kVllmDefaultMmLimit});
  CHECK(q.encoder_budget == 16384);
  CHECK(q.max_items_per_prompt == 1);
  CHECK(q.max_items_per_batch == 1);
  // The decoder side caps it: LLaVA-1.5's 576 tokens, 8,192 batched tokens (14 by the encoder), but 2
  // sequences of max_model_len 1,200 hold max(1, min(999, 1200 // 576 = 2)) = 2 each: 4 items.
  CHECK(vllm_mm_budget({8192, 1200, 2, 576, kVllmDefaultMmLimit}).max_items_per_batch == 4);
  CHECK(vllm_mm_budget({8192, 1200, 2, 576, 1}).max_items_per_batch == 2);  // --limit-mm-per-prompt 1
}

TEST_CASE("vllm multimodal: the encoder pass and the kept encoder outputs, in bytes",
          "[quick][predict][vllm-mm]") {
  // gemma-3-27b-it's 31 dummy images: SigLIP at 896 pixels, 64 x 64 = 4,096 patches an image, h 1152,
  // I 4304, bf16. Rows 31 x 4096 = 126,976; the widest layer is the MLP's 2 h + 2 I = 10,912 columns (the
  // attention's 7 h = 8,064): 126,976 x 10,912 x 2 = 2,771,124,224 B. pixel_values 31 x 3 x 896 x 896 x 2 =
  // 149,323,776 B. The kept outputs: 31 x 256 pooled tokens x 5,376 x 2 = 85,327,872 B.
  VllmEncoderShapes s;
  s.items = 31;
  s.tower_tokens_per_item = 4096;
  s.tower_hidden = 1152;
  s.tower_intermediate = 4304;
  s.pixel_elements_per_item = 3 * 896 * 896;
  s.embeds_per_item = 256;
  s.text_hidden = 5376;
  s.dtype_bytes = 2;
  const VllmEncoderProfile p = vllm_encoder_profile(s);
  CHECK(p.tower_layer_bytes == 2771124224);
  CHECK(p.pixel_values_bytes == 149323776);
  CHECK(p.encoder_outputs_bytes == 85327872);
  CHECK(p.encoder_pass_bytes == 2771124224 + 149323776);
  CHECK(p.kept_bytes == 149323776 + 85327872);
  // Qwen2.5-VL's gated MLP (gate_up_proj 2 I, SiluAndMul's I): one image of 65,536 patches, h 1280, I 3420:
  // 2 h + 3 I = 12,820 columns (> 7 h = 8,960): 65,536 x 12,820 x 2 = 1,680,343,040 B.
  VllmEncoderShapes q;
  q.items = 1;
  q.tower_tokens_per_item = 65536;
  q.tower_hidden = 1280;
  q.tower_intermediate = 3420;
  q.gated_mlp = true;
  q.pixel_elements_per_item = 65536LL * 1176;  // 65,536 patch rows of 3 x 2 x 14 x 14
  q.embeds_per_item = 16384;
  q.text_hidden = 3584;
  CHECK(vllm_encoder_profile(q).tower_layer_bytes == 1680343040);
  CHECK(vllm_encoder_profile(q).pixel_values_bytes == 65536LL * 1176 * 2);
}

TEST_CASE("vllm multimodal: gemma-3-27b-it's start-up sizes the tower and its profile pass",
          "[quick][predict][vllm-mm]") {
  const Prediction p = predict(make_request(medgemma_on_rtx_pro_6000()));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  REQUIRE(v.encoder);
  const auto& e = *v.encoder;
  CHECK(e.max_tokens_per_item == 258);
  CHECK(e.encoder_budget == 8192);
  CHECK(e.items == 31);
  CHECK(e.tower_tokens_per_item == 4096);
  // The tower and projector in bf16 (counted by hand in tests/cli/test_model_types_cli.cpp for the same
  // SigLIP: 416,866,032; Gemma3MultiModalProjector 1152 x 5376 + 1152 = 6,194,304): 423,060,336 x 2 B.
  CHECK(e.tower_weights_bytes == 846120672);
  CHECK(e.encoder_pass_bytes == 2771124224 + 149323776);
  // The language model's dummy run over 8,192 tokens (h 5376, I 21504): LlamaMLP's widest point 3 h + 3 I =
  // 80,640 columns x 8,192 x 2 = 1,321,205,760 B; the sampler of 16 requests is smaller.
  CHECK(v.forward_peak_bytes == 1321205760);
  CHECK(e.language_pass_bytes == 149323776 + 85327872 + 1321205760);
  // The encoder pass peaks: torch peak increase = 2,920,448,000 + the cuBLAS workspace.
  CHECK(v.torch_peak_increase_bytes == 2920448000 + v.cublas_workspace_bytes);
  // The language model alone (the gemma-3-27b preset: the same text_config) plus the tower.
  RequestArgs text = medgemma_on_rtx_pro_6000();
  text.model = "gemma-3-27b";
  const Prediction t = predict(make_request(text));
  CHECK_FALSE(test::v1_of(t).encoder);
  CHECK(v.weights_bytes == test::v1_of(t).weights_bytes + 846120672);
  // the served batch runs the text prompt through the language model
  CHECK(p.generation->prefill.peak_allocated_bytes > 0);
}

TEST_CASE("vllm multimodal: llava's tower is built up to its feature layer and what is refused",
          "[quick][predict][vllm-mm]") {
  RequestArgs a = test::served_on_h100(stored("llava-hf__llava-1.5-7b-hf.config.json"));
  a.max_model_len = 4096;
  const Prediction p = predict(make_request(a));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  REQUIRE(v.encoder);
  // llava.py get_num_image_tokens: 24 x 24 = 576 patches (CLS dropped); the tower runs 577 rows. Budget
  // 8192 // 576 = 14 items (per prompt min(999, 4096 // 576 = 7), x 1,024 sequences).
  CHECK(v.encoder->max_tokens_per_item == 576);
  CHECK(v.encoder->tower_tokens_per_item == 577);
  CHECK(v.encoder->items == 14);
  // init_vision_tower_for_llava: vision_feature_layer -2 builds 23 of CLIP-L's 24 layers, no post_layernorm.
  // The whole tower + projector (tests/graph/test_vision_tower.cpp) is 303,507,456 + 20,979,712; one
  // CLIPEncoderLayer is 4 x (1024^2 + 1024) + 2 x 2 x 1024 + 4096 x 1024 + 4096 + 1024 x 4096 + 1024 =
  // 12,596,224; post_layernorm 2,048.
  CHECK(v.encoder->tower_weights_bytes == 2 * (303507456LL + 20979712 - 12596224 - 2048));
  // a pipeline-parallel tower is not modelled: refused by name (--tp is:
  // test_vllm_vision_tensor_parallel.cpp)
  a.pp = 2;
  a.world_size = 2;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    Catch::Matchers::Contains("--pp with a vision-language model (llava) under --kv-cache "
                                              "paged: the tower's share is not modelled (vramsim)"));
}

TEST_CASE("vllm multimodal: llava_next profiles the pinpoint with the most features, every tile in the tower",
          "[quick][predict][vllm-mm]") {
  RequestArgs a = test::served_on_h100(stored("llava-hf__llava-v1.6-mistral-7b-hf.config.json"));
  a.max_model_len = 4096;
  const Prediction p = predict(make_request(a));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  REQUIRE(v.encoder);
  // llava_next.py get_image_size_with_most_features over image_grid_pinpoints [[336, 672], [672, 336],
  // [672, 672], [1008, 336], [336, 1008]] (height, width) with 336-pixel tiles of 24 x 24 patches;
  // get_num_image_tokens = base 24^2 = 576 + unpadded rows x columns + one newline per row:
  //   336 x 672 and 672 x 336: 1 x 2 tiles, 24 x 48 = 1,152 + 24 (or 48 x 24 + 48) -> 1,752 / 1,776
  //   672 x 672:               2 x 2 tiles, 48 x 48 = 2,304 + 48                    -> 2,928
  //   1008 x 336, 336 x 1008:  3 x 1 tiles, 72 x 24 = 1,728 + 72 (or 24 x 72 + 24)  -> 2,376 / 2,328
  // A pinpoint-sized image needs no unpadding, so 672 x 672 gives the most: 2,928 tokens.
  CHECK(v.encoder->max_tokens_per_item == 2928);
  // its pixel_values hold 2 x 2 tiles and the base image (image_size_to_num_patches = 5), each 577 tower
  // rows (CLS + 576) in _process_image_pixels' one batch
  CHECK(v.encoder->tower_tokens_per_item == 5 * 577);
  // budget 8192 // 2,928 = 2 items (per prompt max(1, min(999, 4096 // 2,928 = 1)) x 1,024 sequences)
  CHECK(v.encoder->items == 2);
  // pixel_values in bf16: 2 items x 5 tiles x 3 x 336 x 336 x 2 B; the kept outputs 2 x 2,928 x 4,096 x 2 B
  CHECK(v.encoder->pixel_values_bytes == 2LL * 5 * 3 * 336 * 336 * 2);
  CHECK(v.encoder->encoder_outputs_bytes == 2LL * 2928 * 4096 * 2);
}
