// vLLM V1's KV-cache groups (sim/inference/vllm_kv_cache_groups.h): sliding-window layers beside full ones
// and multi-head latent attention. Each expected value is worked by hand below from vLLM's source
// (vllm/v1/core/kv_cache_utils.py, vllm/v1/kv_cache_interface.py) or quoted from a vLLM log (cited).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_kv_cache_groups.h"
#include "sim/models/model_config.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

// Windows of a model whose even layers slide (gemma2, gpt_oss: layer_types' "sliding_attention" if
// bool((i + 1) % 2)).
std::vector<std::int64_t> alternating(std::int64_t layers, std::int64_t window) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(layers), 0);
  for (std::int64_t l = 0; l < layers; l += 2) {
    w[static_cast<std::size_t>(l)] = window;
  }
  return w;
}

// Llama-4-Scout's 48 layers: chunked local attention of 8,192 tokens on the RoPE layers (no_rope_layers'
// default, [int((l + 1) % 4 != 0)]), full attention on every fourth.
std::vector<VllmLayerKvSpec> llama4_scout_specs() {
  std::vector<VllmLayerKvSpec> specs(48);
  for (std::int64_t l = 0; l < 48; ++l) {
    if ((l + 1) % 4 != 0) {
      specs[static_cast<std::size_t>(l)].attention_chunk_size = 8192;
    }
  }
  return specs;
}

}  // namespace

TEST_CASE("vllm kv cache groups: one spec on every layer is one group of all layers", "[quick][predict]") {
  // _get_kv_cache_groups_uniform_spec: 32 full-attention layers, one group; get_num_blocks divides by 32.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(std::vector<std::int64_t>(32, 0));
  REQUIRE(g.groups.size() == 1);
  CHECK(g.group_size == 32);
  CHECK(g.padding_layers == 0);
  // 1 GiB // 65,536 // 32 = 512 blocks, 512 x 16 = 8,192 tokens (the full-attention arithmetic of before).
  CHECK(vllm_kv_cache_num_blocks(g, std::int64_t{1} << 30, 65536) == 512);
  CHECK(vllm_kv_cache_tokens(g, 512, 16) == 8192);
}

TEST_CASE("vllm kv cache groups: gemma-3's 5:1 pattern pads the sliding groups", "[quick][predict]") {
  // Gemma-3-27B: 62 layers, full attention where (i + 1) % 6 == 0 (layers 5, 11, ..., 59: 10), 52 sliding.
  std::vector<std::int64_t> w(62, 1024);
  for (std::int64_t l = 5; l < 62; l += 6) {
    w[static_cast<std::size_t>(l)] = 0;
  }
  const VllmKvCacheGroups g = vllm_kv_cache_groups(w);
  // _get_kv_cache_groups_uniform_page_size: group_size = min(52, 10) = 10 (52 is not under 1.5 x 10);
  // sliding: cdiv(52, 10) = 6 groups, 60 - 52 = 8 padding layers; full: 1 group of 10.
  CHECK(g.group_size == 10);
  REQUIRE(g.groups.size() == 7);
  CHECK(g.padding_layers == 8);
  // The sliding layers' first group is layers[0::6] of [0, 1, 2, 3, 4, 6, 7, ...]: 0, 7, 14, ...
  CHECK(g.groups[0].sliding_window == 1024);
  CHECK(g.groups[0].layers.at(0) == 0);
  CHECK(g.groups[0].layers.at(1) == 7);
  CHECK(g.groups[6].sliding_window == 0);
  CHECK(g.groups[6].layers.size() == 10);
  // get_num_blocks: available // page // group_size; "GPU KV cache size": blocks // 7 groups x 16.
  // 10 GiB // 65,536 // 10 = 16,384 blocks; 16,384 // 7 = 2,340; x 16 = 37,440 tokens.
  CHECK(vllm_kv_cache_num_blocks(g, std::int64_t{10} << 30, 65536) == 16384);
  CHECK(vllm_kv_cache_tokens(g, 16384, 16) == 37440);
}

TEST_CASE("vllm kv cache groups: gemma-3-27b's logged tokens from its logged available memory",
          "[quick][predict]") {
  // Two public vLLM V1 logs of Gemma-3-27B's architecture (62 layers, 16 KV heads of 128: page 2 x 16 x 16 x
  // 128 x 2 = 131,072 B), each printing "Add 8 padding layers, may waste at most 15.38% KV cache memory".
  std::vector<std::int64_t> w(62, 1024);
  for (std::int64_t l = 5; l < 62; l += 6) {
    w[static_cast<std::size_t>(l)] = 0;
  }
  const VllmKvCacheGroups g = vllm_kv_cache_groups(w);
  REQUIRE(g.padding_layers == 8);  // 8 / 52 = 15.38 %
  // google/medgemma-27b-it on one RTX PRO 6000 (public deployment notes, find_string id 57700282700):
  // "Available KV cache memory: 35.31 GiB", "GPU KV cache size: 66,112 tokens". 35.31 GiB = 37,913,823,805 B
  // // 131,072 // 10 = 28,925 blocks; // 7 groups = 4,132; x 16 = 66,112. (As full attention in all 62
  // layers it would be 4,665 blocks, 74,640 tokens: +12.9 %.)
  const std::int64_t available = 37913823805;
  CHECK(vllm_kv_cache_num_blocks(g, available, 131072) == 28925);
  CHECK(vllm_kv_cache_tokens(g, 28925, 16) == 66112);
  // A public docker-compose log (find_string id 9297248278): "num_gpu_blocks is: 89994", "GPU KV cache size:
  // 205,696 tokens", "Maximum concurrency for 4,096 tokens per request: 50.05x". 89,994 // 7 x 16 = 205,696.
  // Concurrency: full cdiv(4,096, 16) = 256 pages; each of the 6 sliding groups cdiv(min(1,023 + batched
  // tokens, 4,096), 16) + 1 = 257 (with at least 3,073 batched tokens; the default is 8,192):
  // 89,994 / (256 + 6 x 257) = 89,994 / 1,798 = 50.05.
  CHECK(vllm_kv_cache_tokens(g, 89994, 16) == 205696);
  CHECK(vllm_kv_cache_max_concurrency(g, 89994, {16, 4096, 8192, 131072}) == Approx(50.05).epsilon(1e-4));
}

TEST_CASE("vllm kv cache groups: gpt-oss-120b's request needs what vLLM's refusal printed",
          "[quick][predict]") {
  // vllm-project/vllm issue #27508 (2025-10-31, H100, `vllm serve openai/gpt-oss-120b
  // --gpu-memory-utilization 0.95 --max-num-batched-tokens 1024`): "To serve at least one request with the
  // models's max seq len (131072), (4.54 GiB KV cache is needed ...". 36 layers, 18 sliding (window 128),
  // 18 full; page 2 x 16 x 8 KV heads x 64 x 2 B = 32,768 B. Groups: 18 and 18, group_size 18.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(alternating(36, 128));
  CHECK(g.group_size == 18);
  REQUIRE(g.groups.size() == 2);
  const VllmKvCacheLimits k{16, 131072, 1024, 32768};
  // Full: cdiv(131,072, 16) = 8,192 pages. Sliding: cdiv(min(127 + 1,024, 131,072), 16) + 1 = 72 + 1 = 73.
  CHECK(vllm_group_pages_per_request(g.groups[1], k, 131072) == 8192);
  CHECK(vllm_group_pages_per_request(g.groups[0], k, 131072) == 73);
  // 18 x 32,768 x (8,192 + 73) = 4,874,895,360 B = 4.540 GiB (vLLM: 4.54). Every layer as full attention
  // would need 36 x 32,768 x 8,192 = 9,663,676,416 B (9.00 GiB).
  CHECK(vllm_kv_cache_request_bytes(g, k, 131072) == 4874895360);
  // Concurrency: blocks / (8,192 + 73); 16,530 blocks serve 2.0 requests.
  CHECK(vllm_kv_cache_max_concurrency(g, 16530, k) == Approx(2.0));
  // _estimate_max_model_len_from_groups from 1.71 GiB = 1,836,098,519 B: 18 x 32,768 B a page of both
  // groups, so 3,112 pages a request; past 1,151 tokens the sliding group takes 73 of them, the full group
  // the other 3,039: 3,039 x 16 = 48,624 tokens.
  const std::int64_t available = 1836098519;
  CHECK(vllm_kv_cache_estimate_max_model_len(g, k, available) == 3039 * 16);
}

TEST_CASE("vllm kv cache groups: a window on every layer keeps one group but needs fewer pages",
          "[quick][predict]") {
  // Mistral-7B-v0.1: sliding_window 4096 on all 32 layers (SlidingWindowSpec everywhere: uniform spec).
  const VllmKvCacheGroups g = vllm_kv_cache_groups(std::vector<std::int64_t>(32, 4096));
  REQUIRE(g.groups.size() == 1);
  CHECK(g.group_size == 32);
  // max_model_len 32,768, 8,192 batched tokens: cdiv(min(4,095 + 8,192, 32,768), 16) + 1 = 768 + 1 = 769.
  const VllmKvCacheLimits k{16, 32768, 8192, 65536};
  CHECK(vllm_group_pages_per_request(g.groups[0], k, 32768) == 769);
  CHECK(vllm_kv_cache_max_concurrency(g, 7690, k) == Approx(10.0));
}

TEST_CASE("vllm kv cache groups: pipeline stages keep their layers of every group", "[quick][predict]") {
  // _project_kv_cache_groups_to_worker: gpt-oss-20b's 24 layers (12 + 12) over 2 stages of 12: each stage
  // keeps 6 layers of each group; group_size 6, num_blocks = available // page // 6.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(alternating(24, 128));
  const VllmKvCacheGroups s = vllm_project_kv_cache_groups(g, 0, 12);
  REQUIRE(s.groups.size() == 2);
  CHECK(s.group_size == 6);
  CHECK(s.groups[0].layers.size() == 6);
  CHECK(vllm_kv_cache_num_blocks(s, 6 * 32768 * 100, 32768) == 100);
}

TEST_CASE("vllm kv cache groups: MLA caches one latent a token, the same at every TP size",
          "[quick][predict]") {
  // MLAAttentionSpec.real_page_size_bytes: block_size x num_kv_heads (1) x head_size x dtype bytes, head_size
  // kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576 (DeepSeek-V2-Lite): 16 x 576 x 2 = 18,432 B.
  CHECK(vllm_v1_mla_page_size_bytes(16, 576, 2) == 18432);
  // DeepSeek-V2-Lite-Chat at max_model_len 32,768 (vllm-project/vllm issue #15871, V1 0.8.3: "(0.95 GiB KV
  // cache is needed"): 27 layers x 2,048 pages x 18,432 B = 1,019,215,872 B = 0.949 GiB.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(std::vector<std::int64_t>(27, 0));
  CHECK(vllm_kv_cache_request_bytes(g, {16, 32768, 8192, 18432}, 32768) == 1019215872);
  // Through predict: the same page at TP 1 and 2 (the latent is not split by heads: each rank caches it
  // whole), and "GPU KV cache size" is the blocks x 16.
  for (const int tp : {1, 2}) {
    RequestArgs a =
        test::served_on_h100((test::source_dir() / "docs/examples/deepseek-style-16b.config.json").string());
    a.tp = tp;
    a.world_size = tp;
    a.max_model_len = 32768;
    const Prediction p = predict(make_request(a));
    const Prediction::Generation::Paged& paged = test::v1_paged_of(p);
    const Prediction::Generation::Paged::V1& v = *paged.v1;
    CHECK(v.mla);
    CHECK(v.page_size_bytes == 18432);
    CHECK(v.kv_cache_tokens == paged.num_gpu_blocks * 16);
    CHECK(paged.num_gpu_blocks == paged.available_bytes / 18432 / 27);
  }
}

TEST_CASE("vllm kv cache groups: gemma-2's even layers slide through predict", "[quick][predict]") {
  // google/gemma-2-9b: 42 layers, sliding_window 4096 on the even ones (Gemma2Config's layer_types): two
  // groups of 21; page 2 x 16 x 8 x 256 x 2 = 131,072 B; blocks = available // 131,072 // 21 and the tokens
  // blocks // 2 x 16.
  RequestArgs a = test::served_on_h100("gemma-2-9b");
  const Prediction p = predict(make_request(a));
  const Prediction::Generation::Paged& paged = test::v1_paged_of(p);
  const Prediction::Generation::Paged::V1& v = *paged.v1;
  CHECK(v.kv_cache_groups == 2);
  CHECK(v.layers_per_group == 21);
  CHECK(v.sliding_window == 4096);
  CHECK(v.page_size_bytes == 131072);
  CHECK(paged.num_gpu_blocks == paged.available_bytes / 131072 / 21);
  CHECK(v.kv_cache_tokens == paged.num_gpu_blocks / 2 * 16);
  // max_model_len 8,192 (max_position_embeddings), 8,192 batched tokens: full 512 pages, sliding
  // cdiv(min(4,095 + 8,192, 8,192), 16) + 1 = 513: concurrency = blocks / 1,025.
  CHECK(v.max_concurrency == Approx(static_cast<double>(paged.num_gpu_blocks) / 1025.0));
}

TEST_CASE("vllm kv cache groups: config.json's layer_types decides the windowed layers", "[quick][predict]") {
  // A gemma2 config whose layer_types (transformers' list) puts the window on layers 1 and 2 only.
  const std::string json = R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
      "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
      "intermediate_size": 9216, "sliding_window": 4096,
      "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]})";
  const ModelConfig m = model_from_hf_config_json(json, "config.json");
  CHECK(m.sliding_window_layers == std::vector<std::int64_t>{1, 2});
  // Without the key, Gemma2Config's default: the even layers.
  const std::string plain = R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
      "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
      "intermediate_size": 9216})";
  CHECK(model_from_hf_config_json(plain, "config.json").sliding_window_layers ==
        std::vector<std::int64_t>{0, 2});
  // A list of the wrong length is the file's error, named at its key.
  const std::string wrong = R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
      "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
      "intermediate_size": 9216, "layer_types": ["full_attention"]})";
  CHECK_THROWS_WITH(model_from_hf_config_json(wrong, "config.json"),
                    "config.json: key 'layer_types': 1 entries for 4 layers");
}

TEST_CASE("vllm kv cache groups: llama4's chunked local layers get their own groups", "[quick][predict]") {
  // Llama-4-Scout: 48 layers; Llama4TextConfig's default no_rope_layers = [int((l + 1) % 4 != 0)] makes 36
  // RoPE layers, which vLLM's Llama4Attention runs as ChunkedLocalAttention (attention_chunk_size 8,192), and
  // 12 NoPE layers of full attention (3, 7, ..., 47). Two specs, chunked first (layer 0): group_size the
  // fewest layers, 12 (36 is not under 1.5 x 12); the chunked layers in 3 groups of 12 (layers[i::3]), the
  // full ones in 1: 4 groups, no padding.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(llama4_scout_specs());
  REQUIRE(g.groups.size() == 4);
  CHECK(g.group_size == 12);
  CHECK(g.padding_layers == 0);
  CHECK(g.groups[0].attention_chunk_size == 8192);
  // the chunked layers in order are 4k + j (j = 0, 1, 2), the i-th of them 4 (i / 3) + i % 3; the first
  // group takes i = 0, 3, ..., 33: layers 0, 4, ..., 44
  CHECK(g.groups[0].layers == std::vector<std::int64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44});
  CHECK(g.groups[3].full_attention());
  CHECK(g.groups[3].layers.front() == 3);
  // ChunkedLocalAttentionSpec.max_admission_blocks_per_request at max_model_len 131,072 and 8,192 batched
  // tokens: cdiv(min(8,192 + 8,192, 131,072), 16) = 1,024 pages, no extra block (unlike a sliding window);
  // the full group cdiv(131,072, 16) = 8,192. Page 2 x 16 x 8 x 128 x 2 = 65,536 B. One request needs
  // 12 x 65,536 x (8,192 + 3 x 1,024) = 8,858,370,048 B, where all-full attention needs 48 x 65,536 x 8,192
  // = 25,769,803,776 B.
  const VllmKvCacheLimits k{16, 131072, 8192, 65536};
  CHECK(vllm_group_pages_per_request(g.groups[0], k, 131072) == 1024);
  CHECK(vllm_group_pages_per_request(g.groups[3], k, 131072) == 8192);
  CHECK(vllm_kv_cache_request_bytes(g, k, 131072) == 8858370048);
  // a request shorter than a chunk and the batch: min(16,384, 4,000) = 4,000 tokens, 250 pages
  CHECK(vllm_group_pages_per_request(g.groups[0], k, 4000) == 250);
}

TEST_CASE("vllm kv cache groups: llama4's no_rope_layers decides the chunked layers", "[quick][predict]") {
  const std::string base = R"({"model_type": "llama4_text", "vocab_size": 1000, "hidden_size": 256,
      "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
      "intermediate_size": 512, "intermediate_size_mlp": 512, "num_local_experts": 2)";
  // the default list: every layer but the fourth; an empty list is taken as absent
  CHECK(model_from_hf_config_json(base + "}", "c.json").chunked_attention_layers ==
        std::vector<std::int64_t>{0, 1, 2});
  CHECK(model_from_hf_config_json(base + R"(, "no_rope_layers": []})", "c.json").chunked_attention_layers ==
        std::vector<std::int64_t>{0, 1, 2});
  const ModelConfig listed =
      model_from_hf_config_json(base + R"(, "no_rope_layers": [0, 1, 1, 0]})", "c.json");
  CHECK(listed.chunked_attention_layers == std::vector<std::int64_t>{1, 2});
  CHECK(listed.attention_chunk_size == 8192);
  // attention_chunk_size null: no chunked attention (use_chunked_local_attn is falsy)
  CHECK(model_from_hf_config_json(base + R"(, "attention_chunk_size": null})", "c.json")
            .chunked_attention_layers.empty());
  CHECK_THROWS_WITH(model_from_hf_config_json(base + R"(, "no_rope_layers": [1, 1]})", "c.json"),
                    "c.json: key 'no_rope_layers': 2 entries for 4 layers");
  CHECK_THROWS_WITH(model_from_hf_config_json(base + R"(, "no_rope_layers": [1, 2, 1, 0]})", "c.json"),
                    "c.json: key 'no_rope_layers': entries must be 0 (NoPE) or 1 (RoPE)");
}

TEST_CASE("vllm kv cache groups: llama4 through predict", "[quick][predict]") {
  // Llama-4-Scout at TP 4 on H100s: 4 groups of 12 layers; tokens = blocks // 4 x 16, as all-full attention
  // (4 x 12 = 48 tensors), and one max_model_len request takes 8,192 + 3 x 1,024 = 11,264 blocks at
  // max_model_len 131,072 and 8,192 batched tokens (above).
  RequestArgs a = test::served_on_h100("llama-4-scout");
  a.tp = 4;
  a.world_size = 4;
  a.max_model_len = 131072;
  a.max_num_batched_tokens = 8192;
  const Prediction p = predict(make_request(a));
  const Prediction::Generation::Paged& paged = test::v1_paged_of(p);
  const Prediction::Generation::Paged::V1& v = *paged.v1;
  CHECK(v.kv_cache_groups == 4);
  CHECK(v.layers_per_group == 12);
  CHECK(v.attention_chunk_size == 8192);
  CHECK(v.chunked_attention_layers == 36);
  CHECK(v.kv_cache_tokens == paged.num_gpu_blocks / 4 * 16);
  CHECK(v.max_concurrency == Approx(static_cast<double>(paged.num_gpu_blocks) / 11264.0));
}

TEST_CASE("vllm kv cache groups: Llama-4-Scout's logged concurrency at 8M tokens", "[quick][predict]") {
  // fuhengwu2021/coderepo extra/README.md ("8M Context Length Configuration"): vLLM 0.12.0's API server,
  // Llama-4-Scout-17B-16E-Instruct at TP 8 on 8 x H200, gpu_memory_utilization 0.9, max_model_len 8,388,608,
  // the hybrid manager on: "Available KV cache memory: 89.71 GiB", "GPU KV cache size: 3,919,664 tokens",
  // "Max concurrency: 1.86x". TP 8 leaves one of the 8 KV heads a rank: page 2 x 16 x 1 x 128 x 2 = 8,192 B.
  const VllmKvCacheGroups g = vllm_kv_cache_groups(llama4_scout_specs());
  // 89.71 GiB (two decimals: +-0.005 GiB, +-55 blocks) = 96,325,379,031 B; // 8,192 = 11,758,469 pages; // 12
  // = 979,872 blocks; 979,872 // 4 x 16 = 3,919,488 tokens: the log's 3,919,664 is 44 blocks more, inside the
  // rounding.
  const auto available = static_cast<std::int64_t>(89.71 * 1073741824.0);
  const std::int64_t blocks = vllm_kv_cache_num_blocks(g, available, 8192);
  CHECK(blocks == 979872);
  CHECK(std::abs(vllm_kv_cache_tokens(g, blocks, 16) - 3919664) <= 55 * 16 / 4);  // 4 tokens a block
  // The concurrency from the logged tokens: at least 3,919,664 / 16 x 4 = 979,916 blocks; one 8,388,608-token
  // request takes 524,288 full pages + 3 x cdiv(8,192 + 8,192, 16) = 527,360 (the API server's 8,192 batched
  // tokens on an H200): 979,916 / 527,360 = 1.858, "1.86x". As all-full attention (one group of 48 layers,
  // 11,758,469 // 48 = 244,968 blocks from the same memory) it would be 244,968 / 524,288 = 0.47x.
  const VllmKvCacheLimits k{16, 8388608, 8192, 8192};
  CHECK(vllm_kv_cache_max_concurrency(g, 979916, k) == Approx(1.86).margin(0.005));
}
