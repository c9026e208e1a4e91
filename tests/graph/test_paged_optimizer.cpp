// bitsandbytes' paged optimizers (sim/training/optimizer.h): which state buffers go to CUDA unified memory
// (Optimizer8bit.get_state_buffer: parameters of at least 1e5 elements) and which stay device tensors.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (d_model 64) with a 2,000-token vocabulary: the embedding and the untied lm_head are
// 2,000 x 64 = 128,000 elements each, the only parameters of at least 1e5 elements.
ModelConfig model() {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  m.vocab_size = 2000;
  return m;
}

OpGraph steps(OptimizerKind optimizer) {
  TrainingOptions o = test::small_options();
  o.optimizer = optimizer;
  return build_training_steps(model(), o);
}

}  // namespace

TEST_CASE("paged optimizers: large parameters' states in unified memory, the rest on the device",
          "[quick][graph]") {
  std::int64_t small_numel = 0;  // parameters under 1e5 elements: their states stay device tensors
  int large = 0;
  for (const ParameterShape& p : model().parameter_shapes()) {
    if (p.numel() < 100'000) {
      small_numel += p.numel();
    } else {
      CHECK(p.numel() == 128'000);
      ++large;
    }
  }
  REQUIRE(large == 2);

  SECTION("paged-adamw: two fp32 states per parameter") {
    const OpGraph g = steps(OptimizerKind::kPagedAdamW);
    CHECK(g.unified_memory_bytes == 2 * 2 * 128'000 * 4);  // 2 parameters x (state1, state2) x fp32
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) ==
          static_cast<Bytes>(small_numel * 2 * 4));
  }
  SECTION("paged-adamw-8bit: the uint8 states move, the absmax buffers stay") {
    const OpGraph paged = steps(OptimizerKind::kPagedAdamW8bit);
    const OpGraph device = steps(OptimizerKind::kAdamW8bit);
    CHECK(paged.unified_memory_bytes == 2 * 2 * 128'000);  // 2 parameters x (state1, state2) x 1 byte
    CHECK(device.unified_memory_bytes == 0);
    CHECK(test::persistent_bytes(device, TensorCategory::kOptimizerState) -
              test::persistent_bytes(paged, TensorCategory::kOptimizerState) ==
          paged.unified_memory_bytes);
  }
}
