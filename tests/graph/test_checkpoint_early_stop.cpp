// torch.utils.checkpoint.set_checkpoint_early_stop (torch/utils/checkpoint.py; the default since
// pytorch/pytorch#96866, PyTorch 2.1). In a checkpointed Llama decoder layer the last op that saves a tensor
// is the down projection: `down_proj(act_fn(gate_proj(x)) * up_proj(x))` saves its input (the product) and
// its weight, which autograd packs before the matmul's kernel runs; the residual add after it saves nothing.
// With early stop the recomputation raises _StopRecomputationError at that pack: neither the down
// projection's output nor the residual sum is made again. Without it (PyTorch 1.13's
// _checkpoint_without_reentrant: `_unused = function(*args)`), both are made, the down projection's output
// is freed after the add reads it, and the sum (`_unused`) when the recomputation returns.
//
// The tiny Llama of graph_test_util.h at batch 2, 32 tokens, fp32: each of the two is 2 x 32 x 64 x 4 =
// 16,384 B, and both are alive during the add, so the recomputation's peak is 32,768 B higher without early
// stop. Worked by hand from the sources above; the layer's backward after the recomputation is the same.
#include <catch2/catch.hpp>

#include <string>

#include "checkpoint_test_util.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kHidden = test::kCheckpointHidden;  // one b x s x d fp32 tensor: 16,384 B

OpGraph checkpointed(bool early_stop) {
  CheckpointOptions c;
  c.early_stop = early_stop;
  return test::checkpointed_llama(c);
}

std::int64_t recomputation_peak(const OpGraph& g, int layer) { return test::recomputation_peak(g, layer); }

std::int64_t allocated_by(const OpGraph& g, const std::string& op) {
  return test::allocated_in_backward_by(g, op);
}

}  // namespace

TEST_CASE(
    "checkpoint early stop: the recomputation never makes the down projection's output or the residual sum",
    "[quick][graph]") {
  const OpGraph on = checkpointed(true);
  const OpGraph off = checkpointed(false);
  for (int layer : {0, 1}) {
    const std::string l = "layers." + std::to_string(layer);
    INFO(l);
    CHECK(allocated_by(off, l + ".mlp.down_proj") == kHidden);
    CHECK(allocated_by(off, l + ".residual_mlp") == kHidden);
    CHECK(allocated_by(on, l + ".mlp.down_proj") == 0);
    CHECK(allocated_by(on, l + ".residual_mlp") == 0);
    // What the recomputation saves is the same: the product the down projection reads is made in both.
    CHECK(allocated_by(on, l + ".mlp.mul") == allocated_by(off, l + ".mlp.mul"));
  }
}

TEST_CASE("checkpoint early stop: without it the recomputation peaks two hidden states higher",
          "[quick][graph]") {
  const OpGraph on = checkpointed(true);
  const OpGraph off = checkpointed(false);
  for (int layer : {0, 1}) {
    INFO("layer " << layer);
    CHECK(recomputation_peak(off, layer) - recomputation_peak(on, layer) == 2 * kHidden);
  }
}
