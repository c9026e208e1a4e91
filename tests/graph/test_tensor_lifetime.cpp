// Tensor lifetimes of generated schedules, over every code base and option that changes the graph, and the
// replay of a generated trace through the allocator model.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"
#include "sim/replay/trace_replay.h"

using namespace vramsim;

namespace {

struct Case {
  const char* name;
  ModelConfig model;
  TrainingOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const auto add = [&](const char* name, ModelConfig m, auto tweak) {
    TrainingOptions o = test::small_options();
    tweak(o);
    out.push_back(Case{name, std::move(m), o});
  };
  add("gpt2 fp32 math dropout", test::tiny_model("gpt2"), [](TrainingOptions& o) { o.dropout = 0.1; });
  add("gpt2 bf16 megatron accounting", test::tiny_model("gpt2"), [](TrainingOptions& o) {
    o.precision = Precision::kBf16;
    o.megatron_accounting = true;
    o.dropout = 0.1;
  });
  add("llama GQA amp-bf16 flash", test::tiny_model("llama-2-7b", 2), [](TrainingOptions& o) {
    o.precision = Precision::kAmpBf16;
    o.attention = AttentionKind::kSdpaFlash;
  });
  add("llama GQA math full checkpointing amp-fp16", test::tiny_model("llama-2-7b", 2),
      [](TrainingOptions& o) {
        o.precision = Precision::kAmpFp16;
        o.checkpointing = Checkpointing::kFull;
      });
  add("llama selective checkpointing", test::tiny_model("llama-2-7b"),
      [](TrainingOptions& o) { o.checkpointing = Checkpointing::kSelective; });
  add("llama full checkpointing flash", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.checkpointing = Checkpointing::kFull;
    o.attention = AttentionKind::kSdpaFlash;
  });
  add("qwen2 biases autocast whole step", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.precision = Precision::kAmpBf16;
    o.autocast_whole_step = true;
  });
  add("cs336 staff fp32", test::tiny_model("cs336-small"), [](TrainingOptions&) {});
  add("cs336 staff amp-bf16 full checkpointing", test::tiny_model("cs336-small"), [](TrainingOptions& o) {
    o.precision = Precision::kAmpBf16;
    o.checkpointing = Checkpointing::kFull;
  });
  add("cs336 kkaitlyn111 fp32 for-loop adamw", test::kkaitlyn111(test::tiny_model("cs336-2.7b")),
      [](TrainingOptions& o) { o.optimizer_impl = OptimizerImpl::kForLoop; });
  add("cs336 kkaitlyn111 selective amp-bf16", test::kkaitlyn111(test::tiny_model("cs336-2.7b")),
      [](TrainingOptions& o) {
        o.checkpointing = Checkpointing::kSelective;
        o.precision = Precision::kAmpBf16;
      });
  add("sgd-momentum", test::tiny_model("gpt2"),
      [](TrainingOptions& o) { o.optimizer = OptimizerKind::kSgdMomentum; });
  add("adam fused", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.optimizer = OptimizerKind::kAdam;
    o.optimizer_impl = OptimizerImpl::kFused;
  });
  add("adamw-8bit", test::tiny_model("llama-2-7b"),
      [](TrainingOptions& o) { o.optimizer = OptimizerKind::kAdamW8bit; });
  add("adafactor for-loop", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.optimizer = OptimizerKind::kAdafactor;
    o.optimizer_impl = OptimizerImpl::kForLoop;
  });
  add("adafactor foreach bf16", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.optimizer = OptimizerKind::kAdafactor;
    o.precision = Precision::kBf16;
  });
  add("adamw for-loop bf16", test::tiny_model("gpt2"), [](TrainingOptions& o) {
    o.optimizer_impl = OptimizerImpl::kForLoop;
    o.precision = Precision::kBf16;
  });
  add("grad accumulation, zero_grad keeps grads", test::tiny_model("llama-2-7b"), [](TrainingOptions& o) {
    o.grad_accumulation = 3;
    o.zero_grad_set_to_none = false;
  });
  add("forward only", test::tiny_model("cs336-2.7b"), [](TrainingOptions& o) { o.forward_only = true; });
  add("cublas workspaces", test::tiny_model("gpt2"),
      [](TrainingOptions& o) { o.cublas_workspace_bytes = 32 * kMiB; });
  out[6].model.qkv_bias = true;
  return out;
}

}  // namespace

TEST_CASE("schedules: every tensor allocated once, freed once after its last use, states persist",
          "[quick][graph]") {
  for (const Case& c : cases()) {
    INFO(c.name);
    const OpGraph g = build_training_steps(c.model, c.options);
    const AllocationSchedule s = build_allocation_schedule(g);
    test::check_schedule_invariants(g, s);
  }
}

TEST_CASE("schedules: a generated gpt2 trace replays through the allocator model", "[quick][graph]") {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 128;
  const AllocationSchedule s = build_allocation_schedule(build_training_steps(model_preset("gpt2"), o));
  const Snapshot snap = schedule_to_snapshot(s, "gpt2 b1 s128 (generated)");
  CHECK_FALSE(snap.has_final_state);
  const ReplayResult r = replay_snapshot(snap, ReplayOptions{});
  CHECK_FALSE(r.starts_mid_run);
  CHECK(r.events == s.events.size());
  // The allocator hands out rounded blocks: allocated >= requested at every point, so at the peak too.
  CHECK(r.peaks.peak_allocated_bytes >= s.peak_live_bytes);
  CHECK(r.peaks.peak_requested_bytes == s.peak_live_bytes);
  CHECK(r.peaks.peak_reserved_bytes >= r.peaks.peak_allocated_bytes);
}

TEST_CASE("schedules: events carry the op name and the tensor category", "[quick][graph]") {
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), test::small_options());
  const AllocationSchedule s = build_allocation_schedule(g);
  REQUIRE(s.strings.at(0).empty());
  bool saw_activation = false, saw_gradient = false;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const Tensor& t = g.tensor(s.event_tensor[i]);
    REQUIRE(s.strings.at(s.events[i].category_tag) == category_name(t.category));
    const std::string& op = s.strings.at(s.events[i].op_tag);
    if (s.events[i].action == TraceAction::kAlloc) {
      REQUIRE(op == g.op(t.producer).name);
    }
    saw_activation = saw_activation || t.category == TensorCategory::kActivation;
    saw_gradient = saw_gradient || t.category == TensorCategory::kGradient;
  }
  CHECK(saw_activation);
  CHECK(saw_gradient);
}
