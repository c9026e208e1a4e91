// DeepSpeed ZeRO's optimizer step, as deepspeed/runtime/zero/stage_1_and_2.py step() and stage3.py
// _prepare_fp32_grad_for_sub_group write it: the rank's gradient partition flattened in the gradients' dtype,
// `.to(fp32)` (single_grad_partition), the parameters' gradients set to None, the inner optimizer stepping
// the fp32 partition with it, then `.grad = None`. Expected sizes are worked by hand below.
#include <catch2/catch.hpp>

#include <string>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// The tiny Llama of graph_test_util.h: vocab 1000, d 64, 2 layers, d_ff 172, untied head.
//   embed_tokens 1000 x 64 = 64,000; per layer q, k, v, o 4 x 64 x 64 = 16,384, gate/up/down 3 x 64 x 172 =
//   33,024, two norms 128: 49,536, twice 99,072; final norm 64; lm_head 64,000. Total 227,136 elements in
//   21 tensors.
constexpr std::int64_t kElements = 227'136;
constexpr int kTensors = 21;
constexpr int kWorld = 4;
// Stages 1 and 2: the group padded to a multiple of 2 x world (227,136 already is: 28,392 x 8), a quarter.
constexpr std::int64_t kPartition = kElements / kWorld;  // 56,784

OpGraph zero_step(const std::string& scheme, OptimizerImpl impl) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.optimizer_impl = impl;
  o.data_parallel.world_size = kWorld;
  o.data_parallel.scheme = scheme;
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

int named_ending(const OpGraph& g, const std::string& suffix) {
  int n = 0;
  for (const Tensor& t : g.tensors()) {
    n += t.name.size() >= suffix.size() && t.name.ends_with(suffix) ? 1 : 0;
  }
  return n;
}

int frees_at(const AllocationSchedule& s, const std::string& op, int step) {
  const std::size_t begin = s.phase_begin(step, Phase::kOptimizer)->event_index;
  const std::size_t end = s.phase_begin(step, Phase::kZeroGrad)->event_index;
  int n = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const TraceEvent& e = s.events[i];
    n += e.action == TraceAction::kFreeRequested && s.strings[e.op_tag] == op ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("zero step: the flat bf16 gradient partition is copied to fp32 for the inner optimizer",
          "[quick][graph]") {
  const OpGraph g = zero_step("zero2", OptimizerImpl::kFused);
  // One of each per step: bf16 (2 B) and fp32 (4 B) copies of the 56,784-element partition.
  CHECK(test::sizes_named(g, "zero.single_grad_partition") ==
        std::vector<Bytes>{kPartition * 2, kPartition * 2});
  CHECK(test::sizes_named(g, "zero.single_grad_partition.fp32") ==
        std::vector<Bytes>{kPartition * 4, kPartition * 4});
  const AllocationSchedule s = build_allocation_schedule(g);
  test::check_schedule_invariants(g, s);
  // The bf16 flat is dropped once copied; the gradient shards go before the inner step; the fp32 flat after.
  CHECK(frees_at(s, "DeepSpeedZeroOptimizer.step.single_grad_partition.to_fp32", 1) == 1);
  CHECK(frees_at(s, "DeepSpeedZeroOptimizer.step.free_grad_in_param_list", 1) == kTensors);
  CHECK(frees_at(s, "DeepSpeedZeroOptimizer.step.fp32_grad_to_none", 1) == 1);
}

TEST_CASE("zero step: the inner optimizer reads the flat fp32 gradient, so it makes no fp32 copies",
          "[quick][graph]") {
  // torch.optim.AdamW(foreach) on bf16 parameters with fp32 masters copies each gradient to fp32 first; on
  // DeepSpeed's fp32 partition the gradient is fp32 already.
  // DDP: 21 copies per step, two steps.
  CHECK(named_ending(zero_step("ddp", OptimizerImpl::kForeach), ".grad_fp32") == 2 * kTensors);
  CHECK(named_ending(zero_step("zero2", OptimizerImpl::kForeach), ".grad_fp32") == 0);
}

TEST_CASE("zero step: stage 1 frees the gradients outside rank 0's partition first", "[quick][graph]") {
  // Rank 0's partition is the group's first 56,784 elements: inside embed_tokens (64,000), the first tensor.
  // The other 20 full gradients go before the flatten; embed_tokens' after the fp32 copy.
  const OpGraph g = zero_step("zero1", OptimizerImpl::kFused);
  const AllocationSchedule s = build_allocation_schedule(g);
  CHECK(frees_at(s, "DeepSpeedZeroOptimizer.step.free_grads_not_in_partition", 1) == kTensors - 1);
  CHECK(frees_at(s, "DeepSpeedZeroOptimizer.step.free_grad_in_param_list", 1) == 1);
  CHECK(test::sizes_named(g, "zero.single_grad_partition.fp32") ==
        std::vector<Bytes>{kPartition * 4, kPartition * 4});
}

TEST_CASE("zero step: stage 3 partitions each parameter", "[quick][graph]") {
  // ceil(numel / 4) per tensor. Every numel here divides by 4 (64,000; 4,096 x 8; 11,008 x 6; 64 x 5;
  // 64,000), so the sum is the same 56,784 elements.
  const OpGraph g = zero_step("zero3", OptimizerImpl::kFused);
  CHECK(test::sizes_named(g, "zero.single_grad_partition.fp32") ==
        std::vector<Bytes>{kPartition * 4, kPartition * 4});
}

TEST_CASE("zero step: with offload_optimizer the flat gradient is on the host", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.data_parallel.world_size = kWorld;
  o.data_parallel.scheme = "zero2";
  o.data_parallel.offload_optimizer = true;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  CHECK(test::sizes_named(g, "zero.single_grad_partition.fp32").empty());
}
