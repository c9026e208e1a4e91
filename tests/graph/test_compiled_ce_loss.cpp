// torchtitan's compiled loss (--compile-scope layer with --loss ce: build_cross_entropy_loss's
// `loss_fn = torch.compile(loss_fn)` when training.compile, torchtitan/components/loss.py since
// pytorch/torchtitan#1033; off from #755, 2024-12-18, until then) against the eager loss, with torchtitan's
// `del pred` (--free-logits-before-backward). Counted by hand on a small model.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "graph_test_util.h"
#include "moe_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (vocab 1000, d_model 64), batch 2 x seq 64, bf16: the logits are 2 x 64 x 1000 = 128,000
// elements, 256,000 B in bf16 and 512,000 B in fp32.
constexpr Bytes kLogitsBf16 = 256'000;
constexpr Bytes kLogitsFp32 = 512'000;

struct Run {
  OpGraph graph;
  AllocationSchedule schedule;
};

// compile_model: torchtitan's per-block compile (--compile-scope layer); false: the model eager, only the
// loss compiled when compile_loss (torchtitan's compile.components = ["loss"]).
Run run(bool compile_loss, bool compile_model = true) {
  TrainingOptions o;
  o.compile = compile_model ? CompileMode::kDefault : CompileMode::kNone;
  o.compile_scope = CompileScope::kLayer;
  o.compile_loss = compile_loss;
  o.free_logits_before_backward = true;  // torchtitan's train step: `del pred`
  o.batch = 2;
  o.seq = 64;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  Run r{build_training_steps(test::tiny_model("tinyllama-1.1b"), o), {}};
  r.schedule = build_allocation_schedule(r.graph);
  return r;
}

bool logits_sized(DType d, Bytes bytes) {
  return (d == DType::kBFloat16 && bytes == kLogitsBf16) || (d == DType::kFloat32 && bytes == kLogitsFp32);
}

// The logits-sized tensors alive when the backward begins, by dtype.
std::map<DType, int> logits_alive_at_backward(const Run& r) {
  const std::size_t backward = r.schedule.phase_begin(1, Phase::kBackward)->event_index;
  std::map<TensorId, Bytes> live;
  for (std::size_t i = 0; i < backward; ++i) {
    const TensorId t = r.schedule.event_tensor[i];
    const TraceEvent& e = r.schedule.events[i];
    if (e.action == TraceAction::kAlloc) {
      live[t] = e.size_bytes;
    } else if (e.action == TraceAction::kFreeCompleted) {
      live.erase(t);
    }
  }
  std::map<DType, int> out;
  for (const auto& [t, bytes] : live) {
    if (logits_sized(r.graph.tensor(t).dtype, bytes)) {
      ++out[r.graph.tensor(t).dtype];
    }
  }
  return out;
}

// How many fp32 logits-sized tensors the step allocates at all.
int fp32_logits_allocated(const Run& r) {
  int n = 0;
  for (std::size_t i = 0; i < r.schedule.events.size(); ++i) {
    const TraceEvent& e = r.schedule.events[i];
    const DType d = r.graph.tensor(r.schedule.event_tensor[i]).dtype;
    n += e.action == TraceAction::kAlloc && d == DType::kFloat32 && e.size_bytes == kLogitsFp32 ? 1 : 0;
  }
  return n;
}

// The requested bytes alive just before event `end`.
Bytes live_bytes_before(const Run& r, std::size_t end) {
  Bytes live = 0;
  for (std::size_t i = 0; i < end; ++i) {
    const TraceEvent& e = r.schedule.events[i];
    live += e.action == TraceAction::kAlloc           ? e.size_bytes
            : e.action == TraceAction::kFreeCompleted ? -e.size_bytes
                                                      : 0;
  }
  return live;
}

// The loss's backward: from the backward's first event to the allocation of the logits' bf16 gradient (the
// output projection's backward starts after it). Returns the highest live bytes in it above those alive when
// the backward began.
Bytes loss_backward_rise(const Run& r) {
  const std::size_t begin = r.schedule.phase_begin(1, Phase::kBackward)->event_index;
  const Bytes at_begin = live_bytes_before(r, begin);
  Bytes live = at_begin;
  Bytes high = at_begin;
  for (std::size_t i = begin; i < r.schedule.events.size(); ++i) {
    const TraceEvent& e = r.schedule.events[i];
    live += e.action == TraceAction::kAlloc           ? e.size_bytes
            : e.action == TraceAction::kFreeCompleted ? -e.size_bytes
                                                      : 0;
    high = std::max(high, live);
    if (e.action == TraceAction::kAlloc && e.size_bytes == kLogitsBf16 &&
        r.graph.tensor(r.schedule.event_tensor[i]).dtype == DType::kBFloat16) {
      break;
    }
  }
  return high - at_begin;
}

}  // namespace

// Eager: the loop deletes its bf16 logits and `.float()`'s backward keeps nothing, so at backward only
// log_softmax's fp32 output is left (one fp32 tensor). In the backward: nll_loss's gradient, log_softmax's
// gradient (fp32 each): three fp32 logits-sized tensors in the step besides the forward's upcast copy: 4.
// Compiled: the min-cut partitioner saves the graph's input, the bf16 logits (a primal is never recomputed;
// the compiled function's node keeps it although the loop deleted `pred`), and the per-row reductions, and
// recomputes the softmax in the backward; Inductor fuses the upcast, log_softmax and nll_loss's gather into
// row reductions, and the backward's softmax-minus-one-hot and downcast into one kernel that writes the bf16
// gradient: no fp32 logits-sized buffer ever.
TEST_CASE("compiled ce loss: the bf16 logits are saved, no fp32 logits exist", "[quick][graph]") {
  const Run eager = run(false);
  const Run compiled = run(true);
  CHECK(logits_alive_at_backward(eager) == std::map<DType, int>{{DType::kFloat32, 1}});
  CHECK(logits_alive_at_backward(compiled) == std::map<DType, int>{{DType::kBFloat16, 1}});
  CHECK(fp32_logits_allocated(eager) == 4);
  CHECK(fp32_logits_allocated(compiled) == 0);
}

TEST_CASE("compiled ce loss: --compile-loss auto follows torchtitan", "[quick][predict]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.compile_mode = "default";
  CHECK_FALSE(make_request(a).options.compile_loss);  // torch.compile(model): the loop's loss stays eager
  a.compile_scope = "layer";                          // torchtitan's per-block compile: its loss_fn compiled
  CHECK(make_request(a).options.compile_loss);
  a.compile_loss = "off";  // torchtitan from #755 (2024-12-18) to #1033 (2025-04-02)
  CHECK_FALSE(make_request(a).options.compile_loss);
  a.compile_loss = "on";
  a.pp = 2;
  a.world_size = 2;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--compile-loss on: compiles"));
}

// torchtitan's deepseek_v3_16b.toml: `[compile] enable = true, components = ["loss"]`: apply_compile only
// with "model" in the components, build_cross_entropy_loss's `torch.compile(loss_fn)` with "loss"
// (torchtitan/models/deepseek_v3/infra/parallelize.py, torchtitan/components/loss.py at 8a2686c4a). The model
// runs eager, so everything before the loss is the eager run's, event for event; the loss is the compiled
// graph above. By hand, from the backward's first event to the logits' bf16 gradient:
//   eager: alive at the start, log_softmax's fp32 output (512,000 B) and what nll_loss saved, the shifted
//     int64 labels (2 x 64 x 8 = 1,024 B) and total_weight (4 B). The loss's gradient (4 B, the backward's
//     seed) is allocated, nll_loss's backward writes its fp32 gradient (+512,000), frees its labels,
//     total_weight and the seed (-1,032), then log_softmax's backward writes its own (+512,000): 1,022,972 B
//     above the start;
//   compiled: alive at the start, the saved bf16 logits and the row statistics; the seed (+4), then the one
//     backward kernel writes the bf16 gradient (+256,000): 256,004 B above the start.
// The compiled loss alone saves 766,968 B of that rise and, at the backward's start, holds the bf16 logits
// (256,000 B) instead of the fp32 log-probabilities (512,000 B).
TEST_CASE("compiled ce loss alone: the model eager, no fp32 logits exist", "[quick][graph]") {
  const Run eager = run(false, false);
  const Run loss_alone = run(true, false);
  const std::size_t loss_begin = eager.schedule.phase_begin(1, Phase::kLoss)->event_index;
  REQUIRE(loss_alone.schedule.phase_begin(1, Phase::kLoss)->event_index == loss_begin);
  for (std::size_t i = 0; i < loss_begin; ++i) {  // the eager model's forward, event for event
    REQUIRE(eager.schedule.events[i].action == loss_alone.schedule.events[i].action);
    REQUIRE(eager.schedule.events[i].size_bytes == loss_alone.schedule.events[i].size_bytes);
  }
  CHECK(logits_alive_at_backward(eager) == std::map<DType, int>{{DType::kFloat32, 1}});
  CHECK(logits_alive_at_backward(loss_alone) == std::map<DType, int>{{DType::kBFloat16, 1}});
  CHECK(fp32_logits_allocated(eager) == 4);
  CHECK(fp32_logits_allocated(loss_alone) == 0);
  constexpr Bytes kSeed = 4, kShiftLabels = 2 * 64 * 8, kTotalWeight = 4;
  CHECK(loss_backward_rise(eager) == kSeed + kLogitsFp32 - kShiftLabels - kTotalWeight - kSeed + kLogitsFp32);
  CHECK(loss_backward_rise(loss_alone) == kSeed + kLogitsBf16);
}

TEST_CASE("compiled ce loss alone: --compile-loss on without --compile", "[quick][predict]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.compile_loss = "on";  // torchtitan's compile.components = ["loss"]
  PredictRequest r = make_request(a);
  CHECK(r.options.compile_loss);
  CHECK(r.options.compile == CompileMode::kNone);  // the model eager
  a.loss = "torchtitan-chunked-ce";                // torchtitan never compiled this loss
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--compile-loss on: compiles --loss chunked-ce"));
  a.loss = "ce";
  a.pp = 2;  // not modelled in a pipeline's last stage
  a.world_size = 2;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--compile-loss on: compiles"));
}

// The same with torchtitan's MoE blocks (deepseek_v3_16b.toml's case): the compiled loss acts on the logits
// only, so the MoE forward is the eager one, event for event, and the loss holds no fp32 logits. The tiny
// Mixtral's logits: batch 2 x seq 32 x vocabulary 512 = 32,768 elements, 65,536 B in bf16.
TEST_CASE("compiled ce loss alone: with torchtitan's MoE the blocks stay eager", "[quick][graph]") {
  const auto build = [](bool compile_loss) {
    TrainingOptions o = test::moe_options(MoeImpl::kTorchtitan, 1, 1.0, "none", 1);
    o.precision = Precision::kBf16;
    o.free_logits_before_backward = true;
    o.compile_loss = compile_loss;
    Run r{build_training_steps(test::tiny_mixtral(2), o), {}};
    r.schedule = build_allocation_schedule(r.graph);
    return r;
  };
  const Run eager = build(false);
  const Run loss_alone = build(true);
  const std::size_t loss_begin = eager.schedule.phase_begin(1, Phase::kLoss)->event_index;
  REQUIRE(loss_alone.schedule.phase_begin(1, Phase::kLoss)->event_index == loss_begin);
  for (std::size_t i = 0; i < loss_begin; ++i) {
    REQUIRE(eager.schedule.events[i].action == loss_alone.schedule.events[i].action);
    REQUIRE(eager.schedule.events[i].size_bytes == loss_alone.schedule.events[i].size_bytes);
  }
  CHECK(test::bytes_named(eager.graph, "loss.logits_float") == 2 * 65'536);  // `.float()`: fp32 logits
  CHECK(test::bytes_named(eager.graph, "loss.cross_entropy.log_softmax") == 2 * 65'536);
  CHECK(test::bytes_named(loss_alone.graph, "loss.logits_float") == 0);
  CHECK(test::bytes_named(loss_alone.graph, "loss.cross_entropy.log_softmax") == 0);
  CHECK(test::bytes_named(loss_alone.graph, "compiled_loss.grad_input") == 65'536);  // the bf16 gradient
}
