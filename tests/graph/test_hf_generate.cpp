// model.generate() with a KV cache (sim/inference/hf_generate.h, hf_kv_cache.h): cache sizes, the dynamic
// cache's growing requests and the last-position logits, worked by hand on a small Llama.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// tiny_model: 2 layers, head_dim 16, vocab 1000; batch 2, a prompt of 8 tokens, 4 new tokens, bf16.
TrainingOptions generation(const std::string& cache) {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 8;
  o.generate_tokens = 4;
  o.kv_cache = cache;
  o.inference = true;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  return o;
}

using test::sizes_named;

}  // namespace

TEST_CASE("generate: the dynamic cache holds prompt + new - 1 positions and grows by torch.cat",
          "[quick][graph]") {
  // The last new token is returned without running through the model: 8 + 4 - 1 = 11 cached positions.
  // 2 (keys, values) x 2 layers x batch 2 x 4 kv heads x 11 x 16 x 2 B = 11,264 B.
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), generation("dynamic"));
  CHECK(g.kv_cache_bytes == 11264);
  // Decode steps 2, 3, 4 concatenate one position each: (2, 4, 9 | 10 | 11, 16) bf16 = 2,304, 2,560, 2,816 B.
  CHECK(sizes_named(g, "layers.0.kv_cache.cat_key") == std::vector<Bytes>{2304, 2560, 2816});
  CHECK(sizes_named(g, "layers.1.kv_cache.cat_value") == std::vector<Bytes>{2304, 2560, 2816});
  // logits_to_keep=1: lm_head makes (2, 1, 1000) bf16 = 4,000 B per step, copied to fp32 (8,000 B).
  CHECK(sizes_named(g, "lm_head") == std::vector<Bytes>{4000, 4000, 4000, 4000});
  CHECK(sizes_named(g, "generate.next_token_logits") == std::vector<Bytes>{8000, 8000, 8000, 8000});
  // input_ids grows by torch.cat: (2, 9..12) int64.
  CHECK(sizes_named(g, "generate.input_ids") == std::vector<Bytes>{144, 160, 176, 192});
  // The bill's KV-cache tensors: per layer the prefill's key states (2, 4, 8, 16) and v_proj's output (2, 8,
  // 64), 2,048 B each in bf16, then the three concatenations of keys and of values: 2 x 2,048 + 2 x (2,304 +
  // 2,560 + 2,816) = 19,456 B; 2 layers: 38,912 B.
  Bytes cache = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kKvCache) {
      cache += t.size_bytes;
    }
  }
  CHECK(cache == 38912);
  // under no_grad nothing is saved for backward
  for (const Tensor& t : g.tensors()) {
    CHECK(t.category != TensorCategory::kActivation);
  }
  test::check_schedule_invariants(g, build_allocation_schedule(g));
}

TEST_CASE("generate: grouped-query attention shrinks the cache, a static cache is preallocated",
          "[quick][graph]") {
  // 2 key/value heads instead of 4: half of 11,264
  CHECK(build_training_steps(test::tiny_model("llama-2-7b", 2), generation("dynamic")).kv_cache_bytes ==
        5632);
  // StaticCache: max_cache_len = 8 + 4 = 12 positions from the start: 2 x 2 x 2 x 4 x 12 x 16 x 2 = 12,288 B,
  // as zeros made before the prefill, and no concatenation
  const OpGraph s = build_training_steps(test::tiny_model("llama-2-7b"), generation("static"));
  CHECK(s.kv_cache_bytes == 12288);
  CHECK(sizes_named(s, "layers.0.static_cache.key") == std::vector<Bytes>{3072});
  CHECK(sizes_named(s, "layers.0.kv_cache.cat_key").empty());
  test::check_schedule_invariants(s, build_allocation_schedule(s));
}

TEST_CASE("generate: options are checked", "[quick][graph]") {
  TrainingOptions o = generation("bogus");
  CHECK_THROWS_AS(validate(o), InputError);
  o = generation("dynamic");
  ModelConfig staff = test::tiny_model("cs336-small");
  staff.code = "cs336-basics";
  CHECK_THROWS_AS(build_training_steps(staff, o), InputError);  // the staff model has no KV cache
}

TEST_CASE("generate: every attention kind of both families builds a valid schedule", "[quick][graph]") {
  for (const char* preset : {"gpt2", "llama-2-7b"}) {
    for (AttentionKind a : {AttentionKind::kEager, AttentionKind::kSdpa, AttentionKind::kFlashAttention2}) {
      for (const char* cache : {"dynamic", "static"}) {
        TrainingOptions o = generation(cache);
        o.attention = a;
        o.precision = Precision::kAmpBf16;
        INFO(preset << " " << attention_name(a) << " " << cache);
        const OpGraph g = build_training_steps(test::tiny_model(preset), o);
        test::check_schedule_invariants(g, build_allocation_schedule(g));
      }
    }
  }
}
