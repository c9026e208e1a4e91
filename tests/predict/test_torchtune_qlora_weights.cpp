// The torchtune-3b-qlora validation row (pytorch/torchtune README, Llama-3.2-3B on an A100, commit 1814feb17,
// PR #2003): the weights the prediction holds, worked by hand from torchao's NF4Tensor layout and torchtune's
// QLoRA builder, so that the row's miss (docs/known-misses.md) is known not to be in the weights.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "run_cli.h"

using vramsim::test::run_cli;

TEST_CASE("torchtune QLoRA of Llama-3.2-3B: parameter bytes worked by hand from torchao's NF4Tensor",
          "[predict]") {
  // The row's command (docs/validation/measurements.json, id torchtune-3b-qlora), two steps: the peak is
  // step 2's, when the optimizer states exist.
  const std::string out = run_cli(
      "predict --model llama-3.2-3b --gpu a100-80gb --batch 2 --seq 4096 --precision bf16 --optimizer "
      "adamw-fused "
      "--loss chunked-ce --checkpointing full --compile-mode default --compile-scope layer --steps 2 "
      "--lora-rank 64 --lora-alpha 128 --lora-targets q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj "
      "--base-weights torchao-nf4 --offload activations --activation-offload torchtune --json");
  const nlohmann::json j = nlohmann::json::parse(out);

  // Llama-3.2-3B (config.json): hidden 3072, intermediate 8192, 24 query heads and 8 KV heads of 128
  // (k/v 1024 wide), 28 layers, vocabulary 128,256, tie_word_embeddings true.
  constexpr std::int64_t h = 3072, ffn = 8192, kv = 1024, layers = 28, vocab = 128256, r = 64;
  // torchtune's llama3_2 builders keep the embedding an nn.Embedding in bf16, and the output projection is
  // TiedLinear over it (no second weight, not quantized): 128,256 x 3,072 x 2 B = 788,004,864 B.
  constexpr std::int64_t embedding = vocab * h * 2;
  CHECK(embedding == 788004864);
  // Every linear of a decoder layer is NF4 (LoRALinear(quantize_base=True) for the six adapted ones,
  // FrozenNF4Linear for k_proj): q 3072x3072, k 1024x3072, v 1024x3072, o 3072x3072, gate/up 8192x3072,
  // down 3072x8192 = 100,663,296 weights per layer.
  const std::int64_t sizes[] = {h * h, kv * h, kv * h, h * h, ffn * h, ffn * h, h * ffn};
  std::int64_t per_layer_weights = 0;
  std::int64_t per_layer_nf4 = 0;
  for (const std::int64_t n : sizes) {
    // torchao/dtypes/nf4tensor.py (ao b71402647, 2024-11-15), NF4Tensor.from_tensor: quantized_data uint8
    // n / 2; quantized_scalers int8 n / 64 (block_size 64); quantization_factor n / (64 x 256) in the
    // weight's dtype (bf16, 2 B; scaler_block_size 256); scaler_mean one bf16; the nf4 table 16 bf16.
    per_layer_weights += n;
    per_layer_nf4 += n / 2 + n / 64 + n / (64 * 256) * 2 + 2 + 16 * 2;
  }
  CHECK(per_layer_weights == 100663296);
  CHECK(per_layer_nf4 == 51917038);  // 50,331,648 + 1,572,864 + 12,288 + 7 x 34
  // LoRA A (r x in) and B (out x r), bf16 (the recipe builds the model under its dtype): q 64 x (3072 +
  // 3072), v 64 x (3072 + 1024), o 64 x (3072 + 3072), gate and up 64 x (3072 + 8192) each, down 64 x (8192 +
  // 3072).
  constexpr std::int64_t adapter_weights = r * ((h + h) + (h + kv) + (h + h) + 3 * (h + ffn));
  CHECK(adapter_weights == 3211264);
  // Two RMSNorm scales per layer and the final norm, bf16.
  constexpr std::int64_t norms = (2 * layers + 1) * h * 2;

  const std::int64_t expected = embedding + layers * (per_layer_nf4 + adapter_weights * 2) + norms;
  CHECK(expected == 2421862920);
  CHECK(j.at("bill").at("parameters").get<std::int64_t>() == expected);
  CHECK(j.at("trainable_parameters").get<std::int64_t>() == layers * adapter_weights);
  // The model's own count: 3,212,749,824 base parameters (embedding + 28 x (100,663,296 + 2 x 3,072) + 3,072)
  // and the adapters.
  CHECK(j.at("total_parameters").get<std::int64_t>() ==
        vocab * h + layers * (per_layer_weights + 2 * h) + h + layers * adapter_weights);
  // No optimizer state for the frozen NF4 weights: fused torch.optim.AdamW over the 336 adapter tensors only,
  // two bf16 moments each (torch.zeros_like of bf16 parameters) and a 4-byte fp32 `step` on the device
  // (fused/capturable): 2 x 28 x 3,211,264 x 2 B + 336 x 4 B = 359,662,912 B.
  CHECK(j.at("bill").at("optimizer_states").get<std::int64_t>() ==
        2 * layers * adapter_weights * 2 + 336 * 4);
}
