// vLLM V1 serving a vision-language model at tensor parallelism >= 2 (sim/inference/
// vllm_vision_tensor_parallel.h, the tp of sim/inference/vllm_multimodal_budget.h): every expected value is
// worked by hand below from vLLM's model files (vllm/model_executor/models/clip.py, siglip.py, llava.py,
// gemma3_mm.py, qwen2_5_vl.py at fb33ec8c: QKVParallelLinear / ColumnParallelLinear split the output
// features and their bias, RowParallelLinear the input features and keeps its bias whole; embeddings, norms
// and Gemma3MultiModalProjector replicated; mm_encoder_tp_mode "weights", MultiModalConfig's default) and
// vllm/distributed/device_communicators/pynccl.py PyNcclCommunicator.all_reduce (out of place:
// torch.empty_like).
#include <catch2/catch.hpp>

#include <string>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_multimodal_budget.h"
#include "sim/inference/vllm_vision_tensor_parallel.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

std::string stored(const std::string& file) {
  return (test::source_dir() / "tests" / "data" / "hf_configs" / file).string();
}

// gemma-3-27b-it on two (or more) 80 GB H100s, max_model_len 4096: the encoder budget is 8,192 tokens and
// 31 dummy images of 258 tokens (tests/predict/test_vllm_multimodal_budget.cpp), whatever the tp.
RequestArgs gemma3_27b_at_tp(int tp) {
  RequestArgs a = test::served_on_h100(stored("google__gemma-3-27b-it.config.json"));
  a.max_model_len = 4096;
  a.tp = tp;
  a.world_size = tp;
  return a;
}

// gemma-3-27b-it's multimodal profile run: 31 dummy images of 4,096 SigLIP rows (h 1152, I 4304), 896 x 896
// pixels, 256 pooled tokens each into 5,376 text columns, bf16; tp 1 until a test sets it.
VllmEncoderShapes gemma3_27b_encoder_shapes() {
  VllmEncoderShapes s;
  s.items = 31;
  s.tower_tokens_per_item = 4096;
  s.tower_hidden = 1152;
  s.tower_intermediate = 4304;
  s.pixel_elements_per_item = 3 * 896 * 896;
  s.embeds_per_item = 256;
  s.text_hidden = 5376;
  s.dtype_bytes = 2;
  return s;
}

}  // namespace

TEST_CASE("vllm vision tp: which vision parameters vLLM splits, and how",
          "[quick][predict][vllm][vllm-vision-tp]") {
  CHECK(vllm_vision_tp_split("model.vision_tower.vision_model.encoder.layers.3.self_attn.q_proj.weight") ==
        VllmTpSplit::kColumn);
  CHECK(vllm_vision_tp_split("model.visual.blocks.0.attn.qkv.bias") == VllmTpSplit::kColumn);
  CHECK(vllm_vision_tp_split("model.visual.blocks.0.mlp.up_proj.weight") == VllmTpSplit::kColumn);
  CHECK(vllm_vision_tp_split("model.visual.merger.mlp.0.weight") == VllmTpSplit::kColumn);
  CHECK(vllm_vision_tp_split("model.multi_modal_projector.linear_1.weight") == VllmTpSplit::kColumn);
  CHECK(vllm_vision_tp_split("model.vision_tower.vision_model.encoder.layers.3.self_attn.out_proj.weight") ==
        VllmTpSplit::kRow);
  CHECK(vllm_vision_tp_split("model.visual.blocks.0.attn.proj.weight") == VllmTpSplit::kRow);
  CHECK(vllm_vision_tp_split("model.visual.merger.mlp.2.bias") == VllmTpSplit::kRow);
  // replicated: norms, embeddings, Gemma3MultiModalProjector, SigLIP's pooling head's MultiheadAttention
  CHECK(vllm_vision_tp_split("model.visual.blocks.0.norm1.weight") == VllmTpSplit::kReplicated);
  CHECK(vllm_vision_tp_split("model.vision_tower.vision_model.embeddings.patch_embedding.weight") ==
        VllmTpSplit::kReplicated);
  CHECK(vllm_vision_tp_split("model.multi_modal_projector.mm_input_projection_weight") ==
        VllmTpSplit::kReplicated);
  CHECK(vllm_vision_tp_split("model.vision_tower.vision_model.head.attention.out_proj.weight") ==
        VllmTpSplit::kReplicated);
  // A column-parallel weight [out, in] keeps out / tp rows, its bias out / tp; a row-parallel weight in / tp
  // columns and its whole bias.
  CHECK(vllm_vision_rank_numel({"x.mlp.fc1.weight", {4304, 1152}, -1}, 2) == 2152 * 1152);
  CHECK(vllm_vision_rank_numel({"x.mlp.fc1.bias", {4304}, -1}, 4) == 1076);
  CHECK(vllm_vision_rank_numel({"x.mlp.fc2.weight", {1152, 4304}, -1}, 4) == 1152 * 1076);
  CHECK(vllm_vision_rank_numel({"x.mlp.fc2.bias", {1152}, -1}, 4) == 1152);
  CHECK(vllm_vision_rank_numel({"x.layer_norm1.weight", {1152}, -1}, 4) == 1152);
  // Qwen2.5-VL's 3,420 MLP features at tp 8: 427.5 a rank; vLLM's divide() refuses it
  CHECK_THROWS_WITH(
      vllm_vision_rank_numel({"model.visual.blocks.0.mlp.gate_proj.weight", {3420, 1280}, 0}, 8),
      Catch::Matchers::Contains("3420 is not divisible by 8"));
}

TEST_CASE("vllm vision tp: the encoder pass of one rank, heads and intermediate split, outputs all-reduced",
          "[quick][predict][vllm][vllm-vision-tp]") {
  // gemma-3-27b-it's 31 dummy images, SigLIP h 1152, I 4304, 126,976 rows, bf16 (the TP 1 case:
  // tests/predict/test_vllm_multimodal_budget.cpp, 2 h + 2 I = 10,912 columns). At tp 2:
  //   attention  residual h + normed h + qkv 3 h / 2 + attention h / 2 + out_proj's partial sum h + the
  //              all-reduced output h = 6 h = 6,912
  //   MLP up     2 h + fc1 I / 2 + activation I / 2 = 2,304 + 4,304 = 6,608
  //   MLP down   2 h + activation I / 2 + fc2's partial sum h + all-reduced h = 4,608 + 2,152 = 6,760
  // widest 6,912: 126,976 x 6,912 x 2 = 1,755,316,224 B. pixel_values and the kept outputs (256 pooled
  // tokens x 5,376 text columns, whole on every rank) do not change.
  VllmEncoderShapes s = gemma3_27b_encoder_shapes();
  s.tp = 2;
  const VllmEncoderProfile p = vllm_encoder_profile(s);
  CHECK(p.tower_layer_bytes == 1755316224);
  CHECK(p.pixel_values_bytes == 149323776);
  CHECK(p.encoder_outputs_bytes == 85327872);
  // tp 4: attention 2 h + h + 2 h = 5,760; up 2,304 + 2,152 = 4,456; down 4,608 + 1,076 = 5,684:
  // 126,976 x 5,760 x 2 = 1,462,763,520 B
  s.tp = 4;
  CHECK(vllm_encoder_profile(s).tower_layer_bytes == 1462763520);
  // Qwen2.5-VL-7B's one image of 65,536 patch rows, h 1280, I 3420, gated, tp 2: attention 6 h = 7,680;
  // up 2 h + 3 x 1,710 = 7,690; down 4 h + 1,710 = 6,830: 65,536 x 7,690 x 2 = 1,007,943,680 B
  VllmEncoderShapes q;
  q.items = 1;
  q.tower_tokens_per_item = 65536;
  q.tower_hidden = 1280;
  q.tower_intermediate = 3420;
  q.gated_mlp = true;
  q.pixel_elements_per_item = 65536LL * 1176;
  q.embeds_per_item = 16384;
  q.text_hidden = 3584;
  q.tp = 2;
  CHECK(vllm_encoder_profile(q).tower_layer_bytes == 1007943680);
}

TEST_CASE("vllm vision tp: gemma-3-27b-it at TP 2 loads half the tower's layers on each rank",
          "[quick][predict][vllm][vllm-vision-tp]") {
  const Prediction p = predict(make_request(gemma3_27b_at_tp(2)));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  REQUIRE(v.encoder);
  CHECK(v.tensor_parallel == 2);
  CHECK(v.encoder->items == 31);
  // SigLIP so400m (h 1152, I 4304, 27 layers; 416,866,032 parameters with the projector's 6,194,304:
  // 423,060,336). Each layer's split part is q/k/v (3 (h^2 + h)), out_proj's weight h^2, fc1 I h + I and
  // fc2's weight h I: 4 h^2 + 3 h + 2 I h + I = 5,308,416 + 3,456 + 9,916,416 + 4,304 = 15,232,592, half of
  // it on the other rank: 7,616,296 x 27 = 205,639,992. The rank's 217,420,344 parameters x 2 B.
  CHECK(v.encoder->tower_weights_bytes == 434840688);
  CHECK(v.encoder->tower_layer_bytes == 1755316224);
  CHECK(v.encoder->encoder_pass_bytes == 1755316224 + 149323776);
  // "Model loading took": the language model's rank (the gemma-3-27b preset, the same text_config, at
  // TP 2) plus the tower's
  RequestArgs text = gemma3_27b_at_tp(2);
  text.model = "gemma-3-27b";
  const Prediction t = predict(make_request(text));
  CHECK(v.weights_bytes == test::v1_of(t).weights_bytes + 434840688);
}

TEST_CASE("vllm vision tp: Qwen2.5-VL-7B and llava-1.5 at TP 2, and the degrees vLLM refuses",
          "[quick][predict][vllm][vllm-vision-tp]") {
  RequestArgs a = test::served_on_h100(stored("Qwen__Qwen2.5-VL-7B-Instruct.config.json"));
  a.max_model_len = 2048;
  a.tp = 2;
  a.world_size = 2;
  const Prediction p = predict(make_request(a));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  REQUIRE(v.encoder);
  // The vision transformer and PatchMerger: 32 blocks of 2 h (RMSNorm weights) + qkv 3 h^2 + 3 h + proj
  // h^2 + h + gate and up 2 (I h + I) + down h I + h = 19,702,200, patch_embed 1280 x 1176 = 1,505,280,
  // merger ln_q 1,280 + mlp.0 5120^2 + 5,120 + mlp.2 3584 x 5120 + 3,584 = 44,574,464: 676,550,144. The
  // other rank's half of each block's qkv, proj weight, gate/up and down weight: (4 h^2 + 3 h + 3 I h + 2 I)
  // / 2 = (6,553,600 + 3,840 + 13,132,800 + 6,840) / 2 = 9,848,540 x 32 = 315,153,280, and of the merger's
  // mlp.0 and mlp.2 weight (26,214,400 + 5,120 + 18,350,080) / 2 = 22,284,800. The rank's 339,112,064
  // parameters x 2 B.
  CHECK(v.encoder->tower_weights_bytes == 678224128);
  CHECK(v.encoder->tower_layer_bytes == 1007943680);
  // llava-1.5-7b: CLIP-L (h 1024, I 4096, 23 layers built) and LlavaMultiModalProjector (linear_1 column-,
  // linear_2 row-parallel). Whole: 2 x (303,507,456 + 20,979,712 - 12,596,224 - 2,048) B
  // (test_vllm_multimodal_budget.cpp). The other rank's half of each layer: (4 h^2 + 3 h + 2 I h + I) / 2 =
  // (4,194,304 + 3,072 + 8,388,608 + 4,096) / 2 = 6,295,040 x 23 = 144,785,920; of the projector linear_1
  // (4096 x 1024 + 4096) / 2 = 2,099,200 and linear_2's weight 4096^2 / 2 = 8,388,608.
  RequestArgs l = test::served_on_h100(stored("llava-hf__llava-1.5-7b-hf.config.json"));
  l.max_model_len = 4096;
  l.tp = 2;
  l.world_size = 2;
  const Prediction lp = predict(make_request(l));
  REQUIRE(test::v1_of(lp).encoder);
  CHECK(test::v1_of(lp).encoder->tower_weights_bytes ==
        2 * (303507456LL + 20979712 - 12596224 - 2048 - 144785920 - 2099200 - 8388608));
  // TP 32: the language model splits (32 heads, 16 KV heads replicated), SigLIP's 16 heads do not
  CHECK_THROWS_WITH(
      predict(make_request(gemma3_27b_at_tp(32))),
      Catch::Matchers::Contains("--tp: 32 does not divide the vision tower's 16 attention heads"));
  // pipeline parallelism with the tower is still not modelled
  RequestArgs pp = gemma3_27b_at_tp(1);
  pp.pp = 2;
  pp.world_size = 2;
  CHECK_THROWS_WITH(predict(make_request(pp)),
                    Catch::Matchers::Contains("--pp with a vision-language model"));
}

TEST_CASE("vllm vision tp: mm_encoder_tp_mode data, the whole tower on each rank and the items split",
          "[quick][predict][vllm][vllm-vision-tp]") {
  // vision.py run_dp_sharded_mrope_vision_model: get_load_balance_assignment gives 31 equal items to the
  // least-loaded of 4 ranks in turn, 8 on the busiest; it copies their pixel_values (torch.cat), runs them
  // through the whole tower (TP 1's columns: SigLIP's MLP 2 h + 2 I = 10,912), and all-gathers every rank's
  // output padded to 8 items. Rows 8 x 4096 = 32,768: 32,768 x 10,912 x 2 = 715,128,832 B; the copy
  // 8 x 3 x 896 x 896 x 2 = 38,535,168 B; the gathered outputs 4 x 8 x 256 x 5,376 x 2 = 88,080,384 B.
  VllmEncoderShapes s = gemma3_27b_encoder_shapes();
  s.tp = 4;
  s.tower_data_parallel = true;
  const VllmEncoderProfile p = vllm_encoder_profile(s);
  CHECK(p.items_on_rank == 8);
  CHECK(p.tower_layer_bytes == 715128832);
  CHECK(p.local_pixel_values_bytes == 38535168);
  CHECK(p.encoder_outputs_bytes == 88080384);
  CHECK(p.encoder_pass_bytes == 149323776 + 38535168 + 715128832);

  // Qwen2.5-VL-7B at TP 2 with --mm-encoder-tp-mode data (Qwen2_5_VLForConditionalGeneration declares
  // supports_encoder_tp_data): the one dummy image on one rank, through the whole tower (676,550,144
  // parameters x 2 B) at TP 1's widest layer (2 h + 3 I = 12,820 columns: 1,680,343,040 B), its
  // 65,536 x 1,176 x 2 = 154,140,672 B of pixel_values copied; the gathered outputs two ranks' 16,384 rows
  // (the empty rank's padded): 2 x 16,384 x 3,584 x 2 = 234,881,024 B.
  RequestArgs a = test::served_on_h100(stored("Qwen__Qwen2.5-VL-7B-Instruct.config.json"));
  a.max_model_len = 2048;
  a.tp = 2;
  a.world_size = 2;
  a.mm_encoder_tp_mode = "data";
  const Prediction q = predict(make_request(a));
  REQUIRE(test::v1_of(q).encoder);
  const auto& e = *test::v1_of(q).encoder;
  CHECK(e.tp_mode == "data");
  CHECK(e.items_on_rank == 1);
  CHECK(e.tower_weights_bytes == 1353100288);
  CHECK(e.tower_layer_bytes == 1680343040);
  CHECK(e.local_pixel_values_bytes == 154140672);
  CHECK(e.encoder_pass_bytes == 154140672 + 154140672 + 1680343040);
  CHECK(e.encoder_outputs_bytes == 234881024);
  // the models whose data mode is not read here are refused by name; a mode vLLM does not have is an error
  RequestArgs g = gemma3_27b_at_tp(2);
  g.mm_encoder_tp_mode = "data";
  CHECK_THROWS_WITH(
      predict(make_request(g)),
      Catch::Matchers::Contains("--mm-encoder-tp-mode data with a vision-language model (gemma3)"));
  g.mm_encoder_tp_mode = "layers";
  CHECK_THROWS_WITH(make_request(g),
                    Catch::Matchers::Contains("--mm-encoder-tp-mode: 'layers' is not weights or data"));
}
