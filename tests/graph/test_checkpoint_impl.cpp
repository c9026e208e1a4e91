// --checkpoint-impl reentrant against non-reentrant (torch/utils/checkpoint.py), worked by hand on the tiny
// Llama of graph_test_util.h (batch 2, 32 tokens, hidden 64, fp32) checkpointed per decoder layer.
//
// Reentrant: CheckpointFunction.forward runs the layer under torch.no_grad() and saves only its inputs;
// CheckpointFunction.backward reruns the whole layer under enable_grad (`outputs = ctx.run_function(
// *detached_inputs)`: no early stop, the down projection's output and the residual sum are made again) and
// then calls torch.autograd.backward(outputs_with_grad, args_with_grad). `outputs` is a local of backward():
// the layer's output (the residual sum `layers.L.residual_mlp`, one b x s x d fp32 tensor, 2 x 32 x 64 x 4 =
// 16,384 B) stays alive through the whole nested backward of the layer.
//
// Non-reentrant without early stop (set_checkpoint_early_stop(False)):
// _checkpoint_without_reentrant_generator's unpack_hook calls frame.recompute_fn, which reruns the whole
// layer too but keeps nothing of its output (recompute_fn returns None), so the sum is freed when the
// recomputation returns, before the layer's backward nodes run. With early stop (the default since
// PyTorch 2.1) the recomputation stops at the down projection's pack and neither tensor is made
// (test_checkpoint_early_stop.cpp).
//
// So, by hand:
//   * recomputation: reentrant = non-reentrant without early stop (same ops, same frees up to the return);
//     = non-reentrant with early stop + 2 x 16,384 B (the down projection's output and the sum, both alive
//     during the add);
//   * the layer's backward after the recomputation: reentrant = non-reentrant (either) + 16,384 B (the sum).
#include <catch2/catch.hpp>

#include <string>

#include "checkpoint_test_util.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kHidden = test::kCheckpointHidden;  // 16,384 B

OpGraph with_impl(CheckpointImpl impl, bool early_stop) {
  CheckpointOptions c;
  c.impl = impl;
  c.early_stop = early_stop;
  return test::checkpointed_llama(c);
}

// Decoder layer 1's backward once its recomputation is done: from its first backward node to the start of
// layer 0's recomputation.
std::int64_t layer1_backward_peak(const OpGraph& g) {
  const AllocationSchedule s = build_allocation_schedule(g);
  std::string first_backward;
  bool recomputing = false;
  const std::size_t begin = s.phase_begin(1, Phase::kBackward)->event_index;
  for (std::size_t i = begin; i < s.events.size() && first_backward.empty(); ++i) {
    const std::string& op = s.strings[s.events[i].op_tag];
    recomputing = recomputing || op == "layers.1.input_layernorm.pow";
    if (recomputing && op.ends_with(".backward")) {
      first_backward = op;
    }
  }
  REQUIRE(!first_backward.empty());
  return test::backward_peak_between(
      g, first_backward, [](const std::string& op) { return op == "layers.0.input_layernorm.pow"; });
}

}  // namespace

TEST_CASE("checkpoint impl: reentrant reruns the whole layer, as non-reentrant does without early stop",
          "[quick][graph]") {
  const OpGraph reentrant = with_impl(CheckpointImpl::kReentrant, true);  // early stop: ignored by reentrant
  const OpGraph whole = with_impl(CheckpointImpl::kNonReentrant, false);
  const OpGraph early = with_impl(CheckpointImpl::kNonReentrant, true);
  for (int layer : {0, 1}) {
    const std::string l = "layers." + std::to_string(layer);
    INFO(l);
    CHECK(test::allocated_in_backward_by(reentrant, l + ".mlp.down_proj") == kHidden);
    CHECK(test::allocated_in_backward_by(reentrant, l + ".residual_mlp") == kHidden);
    CHECK(test::recomputation_peak(reentrant, layer) == test::recomputation_peak(whole, layer));
    CHECK(test::recomputation_peak(reentrant, layer) - test::recomputation_peak(early, layer) == 2 * kHidden);
  }
}

TEST_CASE("checkpoint impl: reentrant keeps the recomputed layer output through the layer's backward",
          "[quick][graph]") {
  const OpGraph reentrant = with_impl(CheckpointImpl::kReentrant, true);
  const OpGraph whole = with_impl(CheckpointImpl::kNonReentrant, false);
  const OpGraph early = with_impl(CheckpointImpl::kNonReentrant, true);
  CHECK(layer1_backward_peak(reentrant) - layer1_backward_peak(whole) == kHidden);
  CHECK(layer1_backward_peak(reentrant) - layer1_backward_peak(early) == kHidden);
}
