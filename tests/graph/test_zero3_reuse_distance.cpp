// DeepSpeed ZeRO-3's stage3_max_reuse_distance (sim/graph/deepspeed_zero.cpp): which gathered parameters
// stay from their forward to their backward, worked by hand with PartitionedParameterCoordinator's rule.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "graph_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/graph/transformer_builder.h"

using namespace vramsim;

namespace {

// A 4-layer Llama, d_model 512, 8 heads x 64 (no GQA), MLP 1376, vocabulary 1000, bf16, over 2 ranks.
// Per layer, in registration order: q, k, v, o 512 x 512 = 262,144 elements each; gate, up 1376 x 512 and
// down 512 x 1376 = 704,512 each; two norms of 512 (at most 1e5 elements: persistent, never gathered).
// A layer holds 3,162,112 gathered elements + 1,024 in norms. After the layers the model uses the final norm
// (512) and lm_head (1000 x 512 = 512,000): 512,512.
ModelConfig model() {
  ModelConfig m = test::tiny_model("llama-2-7b", 8);
  m.d_model = 512;
  m.n_heads = 8;
  m.head_dim = 64;
  m.d_ff = 1376;
  m.n_layers = 4;
  return m;
}

// Bytes of the decoder layers' gathered parameters alive where (step, loss) begins.
Bytes gathered_at_loss(std::int64_t max_reuse_distance, int step) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.data_parallel.scheme = "zero3";
  o.data_parallel.world_size = 2;
  o.data_parallel.stage3_max_reuse_distance = max_reuse_distance;
  const OpGraph g = build_training_steps(model(), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t at = s.phase_begin(step, Phase::kLoss)->event_index;
  std::map<TensorId, Bytes> live;
  for (std::size_t i = 0; i < at; ++i) {
    const TensorId t = s.event_tensor[i];
    const std::string& n = g.tensor(t).name;
    if (n.rfind("model.layers.", 0) != 0 || n.find(".gathered") == std::string::npos) {
      continue;
    }
    if (s.events[i].action == TraceAction::kAlloc) {
      live[t] = s.events[i].size_bytes;
    } else if (s.events[i].action == TraceAction::kFreeCompleted) {
      live.erase(t);
    }
  }
  Bytes total = 0;
  for (const auto& [t, bytes] : live) {
    total += bytes;
  }
  return total;
}

}  // namespace

TEST_CASE("ZeRO-3 stage3_max_reuse_distance: the last layers stay gathered into the loss from step 2",
          "[quick][graph]") {
  // Distance 7,000,000. Elements used between a parameter's forward and its backward:
  //   layer 3, q_proj: 2 x (k, v, o, gate, up, down, norms = 2,900,992) + 0 + 512,512 = 6,314,496 < 7e6:
  //   kept,
  //     and every later parameter of layer 3 (smaller distances);
  //   layer 2, down_proj: 2 x 1,024 + 2 x 3,163,136 (layer 3) + 512,512 = 6,840,832 < 7e6: kept;
  //   layer 2, up_proj: 2 x 705,536 + 6,326,272 + 512,512 = 8,249,856: released; layers 1, 0: released.
  // Kept: 3,162,112 + 704,512 = 3,866,624 elements x 2 B = 7,733,248 B.
  CHECK(gathered_at_loss(7'000'000, 2) == 7'733'248);
  // The first step records the module trace (is_complete_trace is false): everything is released.
  CHECK(gathered_at_loss(7'000'000, 1) == 0);
  // Distance 0: nothing is reused.
  CHECK(gathered_at_loss(0, 2) == 0);
  // DeepSpeed's default 1e9 keeps all four layers of this small model: 4 x 3,162,112 x 2 B.
  CHECK(gathered_at_loss(1'000'000'000, 2) == 4 * 3'162'112 * 2);
}
