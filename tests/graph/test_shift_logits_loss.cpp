// --loss ce-shift-logits: the causal-LM loss of transformers before huggingface/transformers#35646 (merged
// 2025-01-13, after 4.48.0). transformers 4.46-4.48's loss/loss_utils.py ForCausalLMLoss, and before it each
// *ForCausalLM.forward (e.g. models/llama/modeling_llama.py, 4.36-4.45), compute
//     logits = logits.float()
//     shift_logits = logits[..., :-1, :].contiguous()
//     shift_labels = labels[..., 1:].contiguous()
//     loss = cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1))
// where `--loss ce` (transformers since #35646) pads the labels and takes the logits whole:
//     labels = F.pad(labels, (0, 1), value=-100); shift_labels = labels[..., 1:].contiguous()
//     loss = cross_entropy(logits.view(-1, V), shift_labels.view(-1))
// Counted by hand on a small model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "loss_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (vocab 1000, d_model 64), batch 2 x seq 64, bf16 logits.
//   logits                   2 x 64 x 1000 = 128,000 elements: 256,000 B bf16, 512,000 B fp32
//   shifted logits           2 x 63 x 1000 = 126,000 elements: 504,000 B fp32
//   labels padded (ce)       2 x 65 int64 = 1,040 B; their shifted copy 2 x 64 int64 = 1,024 B
//   shifted labels (shift)   2 x 63 int64 = 1,008 B
constexpr Bytes kLogitsBf16 = 256'000;
constexpr Bytes kLogitsFp32 = 512'000;
constexpr Bytes kShiftedFp32 = 504'000;

using Run = test::ScheduledRun;

Run run(LossKind loss) {
  TrainingOptions o = test::loss_test_options();
  o.loss = loss;
  return test::loss_test_run(o);
}

// The sizes of step 1's allocations of at least `min_bytes` from phase `from` up to phase `to`, in order.
std::vector<Bytes> allocations(const Run& r, Phase from, Phase to, Bytes min_bytes) {
  const std::size_t begin = r.schedule.phase_begin(1, from)->event_index;
  const std::size_t end = r.schedule.phase_begin(1, to)->event_index;
  std::vector<Bytes> out;
  for (std::size_t i = begin; i < end; ++i) {
    const TraceEvent& e = r.schedule.events[i];
    if (e.action == TraceAction::kAlloc && e.size_bytes >= min_bytes) {
      out.push_back(e.size_bytes);
    }
  }
  return out;
}

// The most bytes allocated in [from, to) of step 1.
std::int64_t phase_peak(const Run& r, Phase from, Phase to) {
  const std::size_t begin = r.schedule.phase_begin(1, from)->event_index;
  const std::size_t end = r.schedule.phase_begin(1, to)->event_index;
  std::int64_t peak = 0;
  for (std::size_t i = begin; i < end; ++i) {
    peak = std::max(peak, r.schedule.live_bytes_after[i]);
  }
  return peak;
}

}  // namespace

// The loss's forward, every allocation of 1,000 B or more, in order:
//   ce:              logits.float() 512,000; the padded labels 1,040 and their shifted copy 1,024;
//                    log_softmax's output 512,000
//   ce-shift-logits: logits.float() 512,000; the shifted logits' copy 504,000; the shifted labels 1,008;
//                    log_softmax's output over the shifted logits 504,000
TEST_CASE("ce-shift-logits: the loss copies the shifted logits in fp32", "[quick][graph][loss]") {
  CHECK(allocations(run(LossKind::kCrossEntropy), Phase::kLoss, Phase::kBackward, 1'000) ==
        std::vector<Bytes>{kLogitsFp32, 1'040, 1'024, kLogitsFp32});
  CHECK(allocations(run(LossKind::kCrossEntropyShiftLogits), Phase::kLoss, Phase::kBackward, 1'000) ==
        std::vector<Bytes>{kLogitsFp32, kShiftedFp32, 1'008, kShiftedFp32});
}

// The loss's backward, the allocations of at least the bf16 logits' 256,000 B (nothing else in this model is
// that large), in order:
//   ce:              nll_loss's gradient (the log-probabilities' shape) 512,000; log_softmax's backward
//                    512,000; _to_copy's backward back to bf16 256,000
//   ce-shift-logits: nll_loss's gradient 504,000; log_softmax's backward 504,000 (the copy's gradient, which
//                    the clone passes on); slice_backward's zero-filled gradient of the whole fp32 logits
//                    512,000; _to_copy's backward 256,000
TEST_CASE("ce-shift-logits: slice_backward makes a gradient of the whole logits", "[quick][graph][loss]") {
  CHECK(allocations(run(LossKind::kCrossEntropy), Phase::kBackward, Phase::kOptimizer, kLogitsBf16) ==
        std::vector<Bytes>{kLogitsFp32, kLogitsFp32, kLogitsBf16});
  CHECK(allocations(run(LossKind::kCrossEntropyShiftLogits), Phase::kBackward, Phase::kOptimizer,
                    kLogitsBf16) == std::vector<Bytes>{kShiftedFp32, kShiftedFp32, kLogitsFp32, kLogitsBf16});
}

// The loss's forward peak, by hand. Alive through the loss in both: the loop's bf16 logits and everything the
// layers saved (the same in both runs). On top of them at the loss's widest point:
//   ce:              logits.float() + log_softmax's output = 512,000 + 512,000 plus the labels' 1,040 + 1,024
//   ce-shift-logits: logits.float() + the shifted copy + log_softmax's output = 512,000 + 504,000 + 504,000
//                    plus the shifted labels' 1,008
// so the shifted loss's forward peak is higher by 1,521,008 - 1,026,064 = 494,944 B.
TEST_CASE("ce-shift-logits: the loss's forward peak holds three logits-sized fp32 tensors",
          "[quick][graph][loss]") {
  const std::int64_t ce = phase_peak(run(LossKind::kCrossEntropy), Phase::kLoss, Phase::kBackward);
  const std::int64_t shift =
      phase_peak(run(LossKind::kCrossEntropyShiftLogits), Phase::kLoss, Phase::kBackward);
  CHECK(shift - ce == 494'944);
}

TEST_CASE("ce-shift-logits: the option and its refusals", "[quick][predict][loss]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.loss = "ce-shift-logits";
  CHECK(make_request(a).options.loss == LossKind::kCrossEntropyShiftLogits);
  a.seq = 1;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--loss ce-shift-logits: needs --seq 2 or more"));
  a.seq = 128;
  a.model_code = "cs336-basics";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--loss ce-shift-logits: transformers' loss"));
}
