// The op graph of training steps: phase order, step 1 versus step 2, and what each option changes.
#include <catch2/catch.hpp>

#include <set>
#include <utility>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

std::vector<std::pair<int, Phase>> phase_sequence(const AllocationSchedule& s) {
  std::vector<std::pair<int, Phase>> out;
  for (const PhaseMarker& m : s.phases) {
    if (out.empty() || out.back() != std::make_pair(m.step, m.phase)) {
      out.emplace_back(m.step, m.phase);
    }
  }
  return out;
}

Bytes bytes_of(const OpGraph& g, TensorCategory c, bool persistent_only) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == c && (!persistent_only || t.persistent)) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace

TEST_CASE("builder: phases run setup, then forward, loss, backward, optimizer, zero_grad per step",
          "[quick][graph]") {
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), test::small_options());
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::vector<std::pair<int, Phase>> expected{
      {0, Phase::kSetup},     {1, Phase::kForward},   {1, Phase::kLoss},     {1, Phase::kBackward},
      {1, Phase::kOptimizer}, {1, Phase::kZeroGrad},  {2, Phase::kForward},  {2, Phase::kLoss},
      {2, Phase::kBackward},  {2, Phase::kOptimizer}, {2, Phase::kZeroGrad},
  };
  CHECK(phase_sequence(s) == expected);
  // Ops are in execution order: phases never go back within a step.
  for (OpId i = 1; i < g.op_count(); ++i) {
    REQUIRE(g.op(i).step >= g.op(i - 1).step);
    if (g.op(i).step == g.op(i - 1).step) {
      REQUIRE(g.op(i).phase >= g.op(i - 1).phase);
    }
  }
}

TEST_CASE("builder: micro-batches repeat forward, loss and backward before one optimizer step",
          "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.grad_accumulation = 2;
  const OpGraph g = build_training_steps(test::tiny_model("gpt2"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  REQUIRE(s.phase_begin(1, Phase::kForward, 1));
  REQUIRE(s.phase_begin(1, Phase::kBackward, 1));
  CHECK(s.phase_begin(1, Phase::kOptimizer)->micro_batch == 1);
  // One gradient per parameter: the second micro-batch accumulates into the first one's.
  std::size_t grads = 0, params = 0;
  for (const Tensor& t : g.tensors()) {
    grads += t.category == TensorCategory::kGradient;
    params += t.category == TensorCategory::kParameter;
  }
  CHECK(grads == params);
}

TEST_CASE("builder: optimizer states appear at step 1 only, so step 2 starts higher", "[quick][graph]") {
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), test::small_options());
  std::map<int, Bytes> state_bytes_by_step;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kOptimizerState) {
      state_bytes_by_step[g.op(t.producer).step] += t.size_bytes;
    }
  }
  const ModelConfig m = test::tiny_model("llama-2-7b");
  CHECK(state_bytes_by_step[1] == 2 * 4 * static_cast<Bytes>(m.parameter_count()));  // exp_avg, exp_avg_sq
  CHECK(state_bytes_by_step.count(2) == 0);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::int64_t before_1 = *s.live_bytes_at(1, Phase::kForward);
  const std::int64_t before_2 = *s.live_bytes_at(2, Phase::kForward);
  // ... plus what the loop's `logits` and `loss` variables still hold from step 1
  const TrainingOptions o = test::small_options();
  const std::int64_t logits = o.batch * o.seq * m.vocab_size * 4;
  CHECK(before_2 - before_1 == static_cast<std::int64_t>(state_bytes_by_step[1]) + logits + 4);
  // "after backward" = parameters + gradients + (step 2) states + what the loop variables still hold
  CHECK(*s.live_bytes_at(2, Phase::kOptimizer) > *s.live_bytes_at(1, Phase::kOptimizer));
}

TEST_CASE("builder: zero_grad(set_to_none) frees gradients, set_to_none=False keeps them", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  const ModelConfig m = test::tiny_model("gpt2");
  const Bytes param_bytes = 4 * static_cast<Bytes>(m.parameter_count());
  CHECK(bytes_of(build_training_steps(m, o), TensorCategory::kGradient, true) == 0);
  o.zero_grad_set_to_none = false;
  CHECK(bytes_of(build_training_steps(m, o), TensorCategory::kGradient, true) == param_bytes);
}

TEST_CASE("builder: forward-only keeps autograd's saved tensors until the next logits replace the old",
          "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.forward_only = true;
  const OpGraph g = build_training_steps(test::tiny_model("cs336-2.7b"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  CHECK_FALSE(s.phase_begin(1, Phase::kBackward));
  CHECK(bytes_of(g, TensorCategory::kGradient, false) == 0);
  // Step 2's forward runs while step 1's graph is alive: its peak is above step 1's.
  const std::size_t step2 = s.phase_begin(2, Phase::kForward)->event_index;
  const std::int64_t peak1 = test::peak_rise(s.events, 0, step2);
  const std::int64_t peak2 = test::peak_rise(s.events, 0);
  CHECK(peak2 > peak1);
}

TEST_CASE("builder: activation checkpointing keeps less per layer", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  const ModelConfig m = test::tiny_model("llama-2-7b");
  const auto saved = [&](Checkpointing c) {
    o.checkpointing = c;
    return saved_activation_bytes(build_training_steps(m, o), 1, 0);
  };
  const Bytes none = saved(Checkpointing::kNone);
  const Bytes selective = saved(Checkpointing::kSelective);
  const Bytes full = saved(Checkpointing::kFull);
  CHECK(full < selective);
  CHECK(selective < none);
  // Full recomputation keeps the layer input (b s d fp32); layer 0 is also the first to keep the
  // per-forward rotary tables and mask every checkpointed layer reads (counted once, where first saved): the
  // mask is LlamaModel._update_causal_mask's (s, s + 1) one (target_length = s + 1 when no 2D attention mask
  // is given), expanded over the batch as a view.
  o.checkpointing = Checkpointing::kFull;
  const OpGraph g = build_training_steps(m, o);
  const Bytes input = static_cast<Bytes>(o.batch * o.seq * m.d_model * 4);
  const Bytes shared =
      2 * static_cast<Bytes>(o.seq * m.head_dim * 4) + static_cast<Bytes>(o.seq * (o.seq + 1) * 4);
  CHECK(saved_activation_bytes(g, 1, 1) == input);
  CHECK(full == input + shared);
}

TEST_CASE("builder: flash attention materialises no S x S tensor and saves a logsumexp", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.seq = 256;  // S x S per head is larger than anything else in the layer
  o.steps = 1;
  const ModelConfig m = test::tiny_model("llama-2-7b");
  const Bytes scores = static_cast<Bytes>(o.batch * m.n_heads * o.seq * o.seq) * 2;  // even at 2 bytes
  const auto largest_layer_tensor = [&](AttentionKind a) {
    o.attention = a;
    o.precision = Precision::kAmpBf16;
    const OpGraph g = build_training_steps(m, o);
    Bytes largest = 0;
    for (const Tensor& t : g.tensors()) {
      if (t.layer >= 0 && t.category != TensorCategory::kParameter &&
          t.category != TensorCategory::kGradient) {
        largest = std::max(largest, t.size_bytes);
      }
    }
    return largest;
  };
  CHECK(largest_layer_tensor(AttentionKind::kEager) >= scores);
  CHECK(largest_layer_tensor(AttentionKind::kSdpaFlash) < scores);
}

TEST_CASE("builder: mixed-precision Adam keeps 16 bytes of model state per parameter (ZeRO: 2 + 2 + 12)",
          "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.optimizer = OptimizerKind::kAdam;
  o.zero_grad_set_to_none = false;  // keep the gradients to count them
  const ModelConfig m = test::tiny_model("gpt2");
  const OpGraph g = build_training_steps(m, o);
  const Bytes states = bytes_of(g, TensorCategory::kParameter, true) +
                       bytes_of(g, TensorCategory::kGradient, true) +
                       bytes_of(g, TensorCategory::kOptimizerState, true);
  CHECK(states == 16 * static_cast<Bytes>(m.parameter_count()));
  // 7B parameters at 2 bytes are 14 GB: llama-2-7b's bf16 weights.
  TrainingOptions small;
  small.seq = 16;
  small.forward_only = true;
  small.precision = Precision::kBf16;
  const OpGraph big = build_training_steps(model_preset("llama-2-7b"), small);
  CHECK(bytes_of(big, TensorCategory::kParameter, true) == 2 * 6'738'415'616ULL);  // 13.48 GB
}

TEST_CASE("builder: autocast saves low-precision weight copies and keeps fp32 gradients", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.precision = Precision::kAmpBf16;
  o.zero_grad_set_to_none = false;
  const ModelConfig m = test::tiny_model("llama-2-7b");
  const OpGraph g = build_training_steps(m, o);
  bool saw_weight_copy = false;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kGradient) {
      REQUIRE(t.dtype == DType::kFloat32);
    }
    if (t.name.ends_with(".weight.autocast")) {
      REQUIRE(t.dtype == DType::kBFloat16);
      REQUIRE(t.category == TensorCategory::kActivation);  // saved by the matmul that read it
      saw_weight_copy = true;
    }
  }
  CHECK(saw_weight_copy);
  CHECK(bytes_of(g, TensorCategory::kGradient, true) == 4 * static_cast<Bytes>(m.parameter_count()));
}

TEST_CASE("builder: invalid combinations are input errors", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.seq = 4096;
  CHECK_THROWS_WITH(build_training_steps(model_preset("gpt2"), o), Catch::Matchers::Contains("--seq"));
  ModelConfig m = test::tiny_model("llama-2-7b");
  m.n_kv_heads = 3;
  CHECK_THROWS_WITH(build_training_steps(m, test::small_options()), Catch::Matchers::Contains("--model"));
}

TEST_CASE("builder: --warm puts the workspaces a process already has before the first step",
          "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.cublas_workspace_bytes = 32 * kMiB;
  const ModelConfig m = test::tiny_model("llama-2-7b");
  // (workspaces allocated in setup, in the step)
  const auto where = [&](WarmProcess w) {
    o.warm = w;
    const OpGraph g = build_training_steps(m, o);
    int setup = 0, step = 0;
    for (const Tensor& t : g.tensors()) {
      if (t.category == TensorCategory::kWorkspace) {
        (g.op(t.producer).phase == Phase::kSetup ? setup : step) += 1;
        CHECK(t.size_bytes == 32 * kMiB);
      }
    }
    return std::pair{setup, step};
  };
  CHECK(where(WarmProcess::kNone) == std::pair{0, 2});     // first matmul of each thread
  CHECK(where(WarmProcess::kForward) == std::pair{1, 1});  // the autograd thread's is still to come
  CHECK(where(WarmProcess::kStep) == std::pair{2, 0});
  CHECK(parse_warm("step") == WarmProcess::kStep);
}
