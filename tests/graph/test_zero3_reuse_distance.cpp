// DeepSpeed ZeRO-3's PartitionedParameterCoordinator (sim/parallel/zero3_param_coordinator.h): which gathered
// parameters stay from their forward to their backward (stage3_max_reuse_distance), and what is prefetched
// (stage3_prefetch_bucket_size, stage3_max_live_parameters), worked by hand with the rules of
// deepspeed/runtime/zero/partitioned_param_coordinator.py.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "graph_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// A 4-layer Llama, d_model 512, 8 heads x 64 (no GQA), MLP 1376, vocabulary 1000, bf16, over 2 ranks.
// Modules in the order a step uses them (the trace), with their elements:
//   forward   embed_tokens 512,000; per layer input_layernorm 512, q, k, v, o 262,144 each,
//             post_attention_layernorm 512, gate, up, down 704,512 each; norm 512; lm_head 512,000
//   backward  lm_head, norm, then per layer from the last: down, up, gate, post_attention_layernorm, o, v, k,
//             q, input_layernorm (autograd runs a layer's nodes in reverse order); embed_tokens
// A layer's modules hold 3,163,136 elements, 3,162,112 of them in the seven partitioned projections (the
// norms, at most 1e5 elements, stay whole and are never gathered).
ModelConfig model() {
  ModelConfig m = test::tiny_model("llama-2-7b", 8);
  m.d_model = 512;
  m.n_heads = 8;
  m.head_dim = 64;
  m.d_ff = 1376;
  m.n_layers = 4;
  return m;
}

OpGraph run(std::int64_t max_reuse_distance, std::int64_t prefetch_bucket, std::int64_t max_live) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.data_parallel.scheme = "zero3";
  o.data_parallel.world_size = 2;
  o.data_parallel.stage3_max_reuse_distance = max_reuse_distance;
  o.data_parallel.stage3_prefetch_bucket_size = prefetch_bucket;
  o.data_parallel.stage3_max_live_parameters = max_live;
  return build_training_steps(model(), o);
}

// Bytes of the decoder layers' gathered parameters alive where (step, loss) begins, without prefetching.
Bytes gathered_at_loss(std::int64_t max_reuse_distance, int step) {
  const OpGraph g = run(max_reuse_distance, 0, 1'000'000'000);
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

// The sizes of the tensors the op `op` of step `step` allocates.
std::vector<Bytes> allocated_by(const OpGraph& g, const std::string& op, int step) {
  std::vector<Bytes> out;
  for (const Tensor& t : g.tensors()) {
    const Op& producer = g.op(t.producer);
    if (producer.name == op && producer.step == step) {
      out.push_back(t.size_bytes);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("ZeRO-3 stage3_max_reuse_distance: the last layers stay gathered into the loss from step 2",
          "[quick][graph]") {
  // A parameter released after its forward module stays gathered when its next use comes before the modules
  // between hold max_reuse_distance elements (__params_to_release walks the trace from the next module and
  // stops once it has passed that many).
  //   layer 3 q_proj: k, v, o, norm, gate, up, down, norm, lm_head (forward: 3,412,992), then lm_head, norm,
  //   down, up, gate, norm, o, v, k (backward: 3,412,992): 6,825,984 before its backward; every later
  //   projection of layer 3 has less in between.
  //   layer 2 down_proj: layer 3 twice (6,326,272) + norm and lm_head twice (1,025,024) = 7,351,296.
  //   layer 2 up_proj: that + down_proj twice = 8,760,320.
  // At 7e6 layer 3 is kept: 3,162,112 elements x 2 B.
  CHECK(gathered_at_loss(7'000'000, 2) == 3'162'112 * 2);
  // At 7.5e6 layer 2's down_proj too: (3,162,112 + 704,512) x 2 B.
  CHECK(gathered_at_loss(7'500'000, 2) == (3'162'112 + 704'512) * 2);
  // The first step records the module trace (is_complete_trace is false): everything is released.
  CHECK(gathered_at_loss(7'000'000, 1) == 0);
  // Distance 0: nothing is reused.
  CHECK(gathered_at_loss(0, 2) == 0);
  // DeepSpeed's default 1e9 keeps all four layers of this small model: 4 x 3,162,112 x 2 B.
  CHECK(gathered_at_loss(1'000'000'000, 2) == 4 * 3'162'112 * 2);
}

TEST_CASE("ZeRO-3 prefetch: the next parameters in the trace, up to the bucket and max_live_parameters",
          "[quick][graph]") {
  // Step 2, after embed_tokens is fetched (512,000 elements available): the queue holds layer 0's
  // input_layernorm (persistent: popped, not fetched), q, k, v, o (262,144 each), ... Prefetching stops once
  // it has taken the bucket's elements: with 1e6, q, k, v and o, 1,048,576 elements, all-gathered coalesced
  // into one flat buffer (2,097,152 B); q_proj's fetch waits on it and gives each its own 524,288 B.
  const std::string op = "model.layers.0.self_attn.q_proj.weight.zero3.prefetch.forward";
  const std::string wait = "model.layers.0.self_attn.q_proj.weight.zero3.all_gather_coalesced.wait";
  const OpGraph bucket = run(0, 1'000'000, 1'000'000'000);
  CHECK(allocated_by(bucket, op, 2) == std::vector<Bytes>{2'097'152});
  CHECK(allocated_by(bucket, wait, 2) == std::vector<Bytes>(4, 524'288));
  CHECK(allocated_by(bucket, op, 1).empty());  // the first step has no trace to prefetch from
  // max_live_parameters 600,000: the budget is 600,000 - 512,000 = 88,000 elements, which q alone passes;
  // one parameter is gathered into its own tensor at once.
  const OpGraph live = run(0, 50'000'000, 600'000);
  CHECK(allocated_by(live, op, 2) == std::vector<Bytes>{524'288});
  CHECK(allocated_by(live, wait, 2).empty());
  // No prefetch with a zero bucket.
  CHECK(allocated_by(run(0, 0, 1'000'000'000), op, 2).empty());
}
