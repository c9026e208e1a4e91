// The weight formats of vLLM's V1 start-up ("Model loading took"): each expected byte count is worked by hand
// below from vLLM's quantization methods (file and function named at each check), for Llama-3.1-8B on an
// H100.
#include <catch2/catch.hpp>

#include <string>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

RequestArgs llama31_8b_h100(const std::string& quantization) {
  RequestArgs a = test::served_on_h100();
  a.quantization = quantization;
  return a;
}

std::int64_t weights_of(const RequestArgs& a) {
  const Prediction p = predict(make_request(a));
  REQUIRE(p.generation);
  REQUIRE(p.generation->paged);
  REQUIRE(p.generation->paged->v1);
  return p.generation->paged->v1->weights_bytes;
}

// Llama-3.1-8B, one layer's linears [out, in]: q 4096 x 4096, k and v 1024 x 4096, o 4096 x 4096, gate and up
// 14336 x 4096, down 4096 x 14336: 218,103,808 elements, 43,008 output channels. What stays bf16:
// embed_tokens and lm_head 128,256 x 4,096 each and the norms (32 x 8,192 + 4,096): 2,101,878,784 B;
// get_rope's cos_sin_cache 131,072 x 128 x 2 B = 33,554,432 B.
constexpr std::int64_t kLayers = 32;
constexpr std::int64_t kLinearElements = 218103808;
constexpr std::int64_t kOutChannels = 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096;
constexpr std::int64_t kUnquantized = 2101878784 + 33554432;

}  // namespace

TEST_CASE("vllm formats: compressed-tensors W8A8 keeps a float32 scale per output channel",
          "[quick][predict]") {
  static_assert(kOutChannels == 43008);
  // CompressedTensorsW8A8Int8.create_weights: weight int8 [out, in]; strategy channel:
  // ChannelQuantScaleParameter float32 [out, 1]; process_weights_after_loading transposes (same bytes) and,
  // with dynamic symmetric activations, registers no input scale or azp_adj.
  const std::int64_t expected = kLayers * (kLinearElements + 4 * kOutChannels) + kUnquantized;
  CHECK(expected == 9120260096);
  CHECK(weights_of(llama31_8b_h100("w8a8-int8")) == expected);
  // CompressedTensorsW8A8Fp8 (channel strategy): float8_e4m3fn weight and the same [out, 1] float32 scales.
  CHECK(weights_of(llama31_8b_h100("w8a8-fp8")) == expected);
}

TEST_CASE("vllm formats: block-quantized FP8 keeps a float32 scale per 128 x 128 block", "[quick][predict]") {
  // Fp8LinearMethod with weight_block_size [128, 128]: BlockQuantScaleParameter weight_scale_inv
  // [cdiv(out, 128), cdiv(in, 128)] float32. Blocks a layer: q 32 x 32 = 1,024, k and v 8 x 32 = 256 each,
  // o 1,024, gate and up 112 x 32 = 3,584 each, down 32 x 112 = 3,584: 13,312 blocks, 53,248 B.
  const std::int64_t expected = kLayers * (kLinearElements + 4 * 13312) + kUnquantized;
  CHECK(expected == 9116459008);
  CHECK(weights_of(llama31_8b_h100("fp8-block")) == expected);
  // Per-tensor FP8 (runtime --quantization fp8): one float32 scale a linear, seven a layer.
  CHECK(weights_of(llama31_8b_h100("fp8")) == kLayers * (kLinearElements + 7 * 4) + kUnquantized);
}

TEST_CASE("vllm formats: compressed-tensors W4A16 is kept as symmetric GPTQ by Marlin", "[quick][predict]") {
  // CompressedTensorsWNA16 (4-bit, group 128, symmetric, no act-order) -> MarlinLinearKernel: weight_packed
  // in x out / 2 B and weight_scale in / 128 x out in bf16, no zero points, g_idx empty: per layer
  // 218,103,808 / 2 + 218,103,808 / 128 x 2 = 109,051,904 + 3,407,872 = 112,459,776 B.
  const std::int64_t expected = kLayers * (109051904 + 3407872) + kUnquantized;
  CHECK(weights_of(llama31_8b_h100("w4a16")) == expected);
  CHECK(weights_of(llama31_8b_h100("gptq")) == expected);
}

TEST_CASE("vllm formats: an unknown --quantization is refused, naming the modelled ones",
          "[quick][predict]") {
  try {
    (void)make_request(llama31_8b_h100("nvfp4"));
    FAIL("nvfp4 accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("'nvfp4' is not modelled (fp8, fp8-block, w8a8-int8") !=
          std::string::npos);
  }
}

TEST_CASE("vllm formats: every fp8 KV-cache dtype is one byte an element", "[quick][predict]") {
  // CacheConfig.cache_dtype fp8 / fp8_e4m3 / fp8_e5m2 -> STR_DTYPE_TO_TORCH_DTYPE uint8 storage (one byte);
  // AttentionSpec.page_size_bytes = 2 x block 16 x 8 KV heads x head 128 x 1 B = 32,768 B a layer.
  for (const char* dtype : {"fp8", "fp8_e4m3", "fp8_e5m2"}) {
    RequestArgs a = llama31_8b_h100("");
    a.kv_cache_dtype = dtype;
    const Prediction p = predict(make_request(a));
    CHECK(p.generation->paged->v1->page_size_bytes == 32768);
  }
  RequestArgs bad = llama31_8b_h100("");
  bad.kv_cache_dtype = "int8";
  CHECK_THROWS_AS(make_request(bad), InputError);
}

TEST_CASE("vllm formats: the served batch holds the weights in the format they were loaded in",
          "[quick][predict]") {
  // After the start-up, the engine serves from the weights it loaded: the served batch's parameters are the
  // same bytes as "Model loading took" without get_rope's cos_sin_cache (a buffer, not a parameter). For
  // per-tensor FP8 (Fp8LinearMethod): 32 x (218,103,808 one-byte elements + 7 float32 scales) + the bf16
  // embeddings, head and norms 2,101,878,784 B = 9,081,201,536 B, where bf16 weights would be
  // 32 x 218,103,808 x 2 + 2,101,878,784 = 16,060,522,496 B (the figure the served batch held before it
  // followed the format, so that a served FP8 model needed its bf16 bytes on top of the cache).
  const Prediction fp8 = predict(make_request(llama31_8b_h100("fp8")));
  CHECK(fp8.bill.parameters == kLayers * (kLinearElements + 7 * 4) + 2101878784);
  CHECK(fp8.bill.parameters == 9081201536);
  CHECK(fp8.generation->paged->v1->weights_bytes - fp8.bill.parameters == 33554432);
  // W4A16: 32 x 112,459,776 B of Marlin weights and group scales, the rest bf16.
  const Prediction w4 = predict(make_request(llama31_8b_h100("w4a16")));
  CHECK(w4.bill.parameters == kLayers * (109051904 + 3407872) + 2101878784);
  // Unquantized: every parameter in bf16, as before.
  const Prediction bf16 = predict(make_request(llama31_8b_h100("")));
  CHECK(bf16.bill.parameters == kLayers * kLinearElements * 2 + 2101878784);
  CHECK(bf16.bill.parameters == 16060522496);
}
