// Megatron-Core's MoE layer, expert parallelism and the routing model (sim/parallel/expert_parallel.h,
// sim/moe/megatron_moe.cpp): every expected value is worked by hand below from Megatron-LM's code
// (megatron/core/transformer/moe/ at 0014f13713bf: moe_utils.py get_capacity / permute / unpermute,
// token_dispatcher.py MoEAlltoAllTokenDispatcher, experts.py TEGroupedMLP) and the routing model's
// definition (busiest expert = ceil(F x tokens x top_k / experts), the rest even).
#include <catch2/catch.hpp>

#include <string>

#include "graph/graph_test_util.h"
#include "graph/moe_test_util.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/expert_parallel.h"

using namespace vramsim;
using Catch::Matchers::Contains;
using test::bytes_named;
using test::tiny_mixtral;

namespace {

// batch 2 x seq 32 = 64 tokens, fp32, one forward-and-backward step, Megatron's MoE over `ep` of 4 DDP ranks.
TrainingOptions megatron_options(int ep, double imbalance) {
  return test::moe_options(MoeImpl::kMegatron, ep, imbalance, "ddp", 4);
}

}  // namespace

TEST_CASE("routing model: the busiest expert gets F x the mean, the rest even", "[quick][graph]") {
  // 64 tokens x top-2 = 128 assignments over 8 experts: mean 16.
  CHECK(routed_rows_per_expert(64, 2, 8, 1.0) == std::vector<std::int64_t>(8, 16));
  // F = 1.5: 24 for expert 0; 104 left over 7 experts = 14 r 6: six get 15, the last 14.
  CHECK(routed_rows_per_expert(64, 2, 8, 1.5) == std::vector<std::int64_t>{24, 15, 15, 15, 15, 15, 15, 14});
  // F = 4 = experts / top-k: every token picks expert 0 (64 rows), 64 left over 7 = 9 r 1.
  CHECK(routed_rows_per_expert(64, 2, 8, 4.0) == std::vector<std::int64_t>{64, 10, 9, 9, 9, 9, 9, 9});
  // 10 tokens x top-2 = 20 over 8, F = 1: ceil(2.5) = 3 for expert 0; 17 over 7 = 2 r 3.
  CHECK(routed_rows_per_expert(10, 2, 8, 1.0) == std::vector<std::int64_t>{3, 3, 3, 3, 2, 2, 2, 2});
}

TEST_CASE("Megatron's get_capacity and the busiest expert-parallel rank's rows", "[quick][graph]") {
  // moe_utils.get_capacity: math.ceil((num_tokens / num_experts) * capacity_factor), num_tokens = 64 x 2
  CHECK(expert_capacity(64, 2, 8, 1.25) == 20);
  CHECK(expert_capacity(64, 2, 8, 1.0) == 16);
  CHECK(expert_capacity(10, 2, 8, 1.0) == 3);  // ceil(2.5)
  MoeConfig moe;
  moe.n_experts = 8;
  moe.top_k = 2;
  MoeOptions o;
  o.expert_parallel = 4;  // EP rank 0 holds experts 0 and 1
  o.imbalance = 1.5;
  ExpertLoad load = busiest_rank_load(64, moe, o);
  CHECK(load.sent_rows == 128);
  // from each of the 4 ranks: 24 rows for expert 0, 15 for expert 1
  CHECK(load.rows_per_local_expert == std::vector<std::int64_t>{96, 60});
  CHECK(load.received_rows() == 156);
  o.capacity_factor = 1.25;  // capacity 20: expert 0 drops 4 of its 24 rows on every rank
  load = busiest_rank_load(64, moe, o);
  CHECK(load.sent_rows == 124);
  CHECK(load.rows_per_local_expert == std::vector<std::int64_t>{80, 60});
  o.pad_to_capacity = true;  // every expert exactly 20 rows
  load = busiest_rank_load(64, moe, o);
  CHECK(load.sent_rows == 160);
  CHECK(load.received_rows() == 160);
}

TEST_CASE("Megatron MoE: the all-to-all, sort and grouped-GEMM buffers of the busiest rank",
          "[quick][graph]") {
  // 64 tokens, d 64, ff 96, fp32 (4 bytes); ep 4: rank 0 holds experts 0, 1 (2 local experts).
  const ModelConfig m = expert_parallel_rank(tiny_mixtral(), 4);
  CHECK(m.moe.local_experts() == 2);
  const std::string n = "layers.0.mlp";
  SECTION("even router: receives 4 x (16 + 16) = 128 rows") {
    const OpGraph g = build_training_steps(m, megatron_options(4, 1.0));
    // permute: index_select of 128 rows x 64 x 4 B; all_to_all's new_empty of the received 128 rows
    CHECK(bytes_named(g, n + ".permute.permuted_input") == Bytes{128 * 64 * 4});
    CHECK(bytes_named(g, n + ".dispatch.all_to_all") == Bytes{128 * 64 * 4});
    CHECK(bytes_named(g, n + ".dispatch.sort_chunks_by_idxs") == Bytes{128 * 64 * 4});
    CHECK(bytes_named(g, n + ".experts.linear_fc1") == Bytes{128 * 2 * 96 * 4});
    CHECK(bytes_named(g, n + ".experts.weighted_bias_swiglu") == Bytes{128 * 96 * 4});
    CHECK(bytes_named(g, n + ".combine.all_to_all") == Bytes{128 * 64 * 4});
    // the router's [T, E] = 64 x 8 routing probabilities and the [E, T] bool map
    CHECK(bytes_named(g, n + ".router.topk_masked_gates") == Bytes{64 * 8 * 4});
    CHECK(bytes_named(g, n + ".permute.routing_map_T") == Bytes{8 * 64 * 1});
    CHECK(bytes_named(g, n + ".permute.sorted_indices") == Bytes{128 * 8});
  }
  SECTION("F = 1.5: receives 4 x (24 + 15) = 156 rows, sends 128") {
    const OpGraph g = build_training_steps(m, megatron_options(4, 1.5));
    CHECK(bytes_named(g, n + ".permute.permuted_input") == Bytes{128 * 64 * 4});
    CHECK(bytes_named(g, n + ".dispatch.all_to_all") == Bytes{156 * 64 * 4});
    CHECK(bytes_named(g, n + ".experts.linear_fc1") == Bytes{156 * 2 * 96 * 4});
    CHECK(bytes_named(g, n + ".experts.linear_fc2") == Bytes{156 * 64 * 4});
    CHECK(bytes_named(g, n + ".combine.all_to_all") == Bytes{128 * 64 * 4});
  }
  SECTION("capacity factor 1.25 at F = 1.5: expert 0 drops 4 of 24 rows on every rank") {
    TrainingOptions o = megatron_options(4, 1.5);
    o.moe.capacity_factor = 1.25;  // get_capacity: ceil(128 / 8 x 1.25) = 20
    const OpGraph g = build_training_steps(m, o);
    // sends 20 + 6 x 15 + 14 = 124 rows; receives 4 x (20 + 15) = 140
    CHECK(bytes_named(g, n + ".permute.permuted_input") == Bytes{124 * 64 * 4});
    CHECK(bytes_named(g, n + ".dispatch.all_to_all") == Bytes{140 * 64 * 4});
    // topk over dim 0: the capacity indices [20, E] int64; the capacity mask and final map [T, E] bool
    CHECK(bytes_named(g, n + ".router.capacity_indices") == Bytes{20 * 8 * 8});
    CHECK(bytes_named(g, n + ".router.final_map") == Bytes{64 * 8});
  }
  SECTION("the rank keeps 2 of the 8 experts' weights, gradients and AdamW states") {
    const OpGraph g = build_training_steps(m, megatron_options(4, 1.0));
    // each expert: w1, w3 (96 x 64) and w2 (64 x 96), fp32
    const Bytes per_expert = 3 * 96 * 64 * 4;
    Bytes experts = 0;
    for (const Tensor& t : g.tensors()) {
      if (t.category == TensorCategory::kParameter && t.name.find(".experts.") != std::string::npos) {
        experts += t.size_bytes;
      }
    }
    CHECK(experts == 2 * per_expert);
  }
}

TEST_CASE("Megatron MoE: what Megatron and vramsim refuse", "[quick][graph]") {
  const ModelConfig m = tiny_mixtral();
  TrainingOptions o = megatron_options(4, 1.0);
  SECTION("--ep must divide the experts (arguments.py)") {
    CHECK_THROWS_WITH(expert_parallel_rank(m, 3), Contains("does not divide the 8 experts"));
  }
  SECTION("--ep must divide the data-parallel ranks (initialize_model_parallel)") {
    o.data_parallel.world_size = 2;
    CHECK_THROWS_WITH(
        build_training_steps(expert_parallel_rank(m, 4), o),
        Contains("decoder world_size (2) is not divisible by expert_tensor_model_pipeline_parallel "
                 "size (4)"));
  }
  SECTION("transformers' block has no expert parallelism") {
    o.moe.impl = MoeImpl::kTransformers;
    CHECK_THROWS_WITH(build_training_steps(expert_parallel_rank(m, 4), o), Contains("not modelled"));
  }
  SECTION("tensor parallelism needs sequence parallelism in Megatron") {
    o.tensor_parallel = 2;
    CHECK_THROWS_WITH(build_training_steps(expert_parallel_rank(m, 4), o),
                      Contains("sequence parallelism must be used"));
  }
  SECTION("an expert gets each token at most once: F <= experts / top-k = 4") {
    o.moe.imbalance = 4.5;
    CHECK_THROWS_WITH(build_training_steps(expert_parallel_rank(m, 4), o),
                      Contains("exceeds 8 experts / top-2"));
  }
  SECTION("capacity is Megatron's") {
    o.moe.impl = MoeImpl::kTransformers;
    o.moe.expert_parallel = 1;
    o.moe.capacity_factor = 1.0;
    CHECK_THROWS_WITH(build_training_steps(m, o), Contains("drop no tokens"));
  }
}

TEST_CASE("transformers' MoE loop: imbalance moves the busiest expert's rows, not the saved total",
          "[quick][graph]") {
  ModelConfig m = tiny_mixtral();
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.moe.imbalance = 1.5;
  const OpGraph g = build_training_steps(m, o);
  // current_state of expert 0: 24 rows x 64 x 4 B; of expert 7: 14 rows
  CHECK(bytes_named(g, "layers.0.moe.experts.0.current_state") == Bytes{24 * 64 * 4});
  CHECK(bytes_named(g, "layers.0.moe.experts.7.current_state") == Bytes{14 * 64 * 4});
}

TEST_CASE("DeepseekV3MoE: the fp32 router input and weight, fp32 accumulator and weighted outputs",
          "[quick][graph]") {
  // modeling_deepseek_v3.py: F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)),
  // final_hidden_states = zeros_like(hidden_states, dtype=topk_weights.dtype) (fp32), weighted_output =
  // expert_output (bf16) * expert_weights (fp32) -> fp32. Shrunk DeepSeek-V3: d 64, 8 experts of 96, top-2,
  // one shared expert; 64 tokens in bf16, F = 1: 16 rows per expert.
  ModelConfig m = load_model(
      (test::source_dir() / "tests" / "data" / "hf_configs" / "deepseek-ai__DeepSeek-V3.config.json")
          .string());
  m.vocab_size = 512;
  m.d_model = 64;
  m.n_layers = 1;
  m.moe.dense_layers.clear();
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.mla.q_lora_rank = 32;
  m.mla.kv_lora_rank = 32;
  m.mla.qk_nope_head_dim = 16;
  m.mla.qk_rope_head_dim = 8;
  m.mla.v_head_dim = 16;
  m.head_dim = 24;
  m.d_ff = 96;
  m.moe.n_experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_d_ff = 96;
  m.moe.shared_expert_d_ff = 96;
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.precision = Precision::kBf16;
  const OpGraph g = build_training_steps(m, o);
  const std::string n = "layers.0.mlp";
  CHECK(bytes_named(g, n + ".gate.hidden_states_fp32") == Bytes{64 * 64 * 4});
  CHECK(bytes_named(g, n + ".gate.weight_fp32") == Bytes{8 * 64 * 4});
  CHECK(bytes_named(g, n + ".gate.sigmoid") == Bytes{64 * 8 * 4});
  CHECK(bytes_named(g, n + ".final_hidden_states") == Bytes{64 * 64 * 4});
  CHECK(bytes_named(g, n + ".experts.0.weighted_output") == Bytes{16 * 64 * 4});
  CHECK(bytes_named(g, n + ".experts.0.expert_input") == Bytes{16 * 64 * 2});
  CHECK(bytes_named(g, n + ".moe_to_dtype") == Bytes{64 * 64 * 2});
}
