// --loss-parallel (torch.distributed.tensor.parallel.loss_parallel(), torchtitan's default with tensor
// parallelism) against the fused cross-entropy kernels: how many logits-sized fp32 tensors are alive at
// once, counted by hand from torch/distributed/tensor/parallel/loss.py (PyTorch 2.4 to 2.6).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "graph_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/tensor_parallel.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (vocab 1000, d_model 64) on one rank of --tp 2: Megatron pads the vocabulary to 1,024
// (make_vocab_size_divisible_by 128 x tp), 512 rows per rank. Batch 2 x seq 64 = 128 positions, so this
// rank's logits are 128 x 512 = 65,536 elements: 131,072 B in bf16 and 262,144 B in fp32. No other tensor of
// the step has 262,144 B (hidden states: 128 x 64 x 2 = 16,384 B; MLP: 128 x 86 x 2 = 22,016 B).
constexpr Bytes kLogitsShardFp32 = 262'144;

struct Run {
  OpGraph graph;
  AllocationSchedule schedule;
};

Run run(bool loss_parallel) {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 64;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.tensor_parallel = 2;
  o.loss_parallel = loss_parallel;
  o.cublas_workspace_bytes = 0;
  Run r{build_training_steps(tensor_parallel_rank(test::tiny_model("tinyllama-1.1b"), 2), o), {}};
  r.schedule = build_allocation_schedule(r.graph);
  return r;
}

// The most tensors of `bytes` alive at once within `phase` of step 1 (the first training step), walking the
// allocation schedule.
std::size_t most_alive(const Run& r, Bytes bytes, Phase phase) {
  // The phase runs from its marker to the next marker.
  std::size_t begin = r.schedule.events.size(), end = r.schedule.events.size();
  for (std::size_t m = 0; m < r.schedule.phases.size(); ++m) {
    if (r.schedule.phases[m].step == 1 && r.schedule.phases[m].phase == phase) {
      begin = r.schedule.phases[m].event_index;
      end = m + 1 < r.schedule.phases.size() ? r.schedule.phases[m + 1].event_index : end;
      break;
    }
  }
  REQUIRE(begin < end);
  std::map<TensorId, bool> live;
  std::size_t most = 0;
  for (std::size_t i = 0; i < r.schedule.events.size(); ++i) {
    const TraceEvent& e = r.schedule.events[i];
    const TensorId t = r.schedule.event_tensor[i];
    if (r.graph.tensor(t).size_bytes != bytes) {
      continue;
    }
    if (e.action == TraceAction::kAlloc) {
      live[t] = true;
      if (i >= begin && i < end) {
        most = std::max(most, live.size());
      }
    } else if (e.action == TraceAction::kFreeCompleted) {
      live.erase(t);
    }
  }
  return most;
}

}  // namespace

TEST_CASE(
    "loss_parallel keeps one more logits-sized fp32 tensor than the fused kernels, forward and backward",
    "[quick][graph][tp]") {
  const Run fused = run(false);
  const Run dtensor = run(true);
  // Forward (the loss phase). Fused: logits.float() and log_softmax's output (2). loss_parallel's
  // _log_softmax on the local shard: the fp32 logits, shifted = x - x_max and exp(shifted), then the fp32
  // logits, shifted and result = shifted - log(sumexp) (3).
  CHECK(most_alive(fused, kLogitsShardFp32, Phase::kLoss) == 2);
  CHECK(most_alive(dtensor, kLogitsShardFp32, Phase::kLoss) == 3);
  // Backward. Fused: the saved log-probabilities, nll_loss_backward's gradient and
  // _log_softmax_backward_data's (3). loss_parallel's _nll_loss_and_log_softmax_backward: the saved
  // log-probabilities, grad_input = zeros_like(x), exp(x) then grad_input + exp(x), and (grad_input + exp(x))
  // * grad_output (4); its _log_softmax_backward_handler returns grad_output.to(torch.float32), the same
  // tensor.
  CHECK(most_alive(fused, kLogitsShardFp32, Phase::kBackward) == 3);
  CHECK(most_alive(dtensor, kLogitsShardFp32, Phase::kBackward) == 4);
}
