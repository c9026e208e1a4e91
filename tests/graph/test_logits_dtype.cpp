// --logits-dtype fp32: the model's forward upcasts its logits and returns the fp32 tensor, which the training
// loop keeps through backward (torchtitan before pytorch/torchtitan#642: `output = self.output(h).float()` in
// Transformer.forward, torchtitan 83c879f torchtrain/models/llama/model.py; transformers < 4.45:
// `logits = logits.float()` in LlamaForCausalLM.forward), against the default (the projection's dtype).
// Counted by hand on a small model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "loss_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (vocab 1000, d_model 64), batch 2 x seq 64, bf16: the logits are 2 x 64 x 1000 = 128,000
// elements, 256,000 B in bf16 and 512,000 B in fp32.
constexpr Bytes kLogitsBf16 = 256'000;
constexpr Bytes kLogitsFp32 = 512'000;

using Run = test::ScheduledRun;

Run run(LogitsDtype logits) {
  TrainingOptions o = test::loss_test_options();
  o.logits_dtype = logits;
  return test::loss_test_run(o);
}

// The logits-sized tensors (either dtype) alive when the backward begins, by dtype.
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
    const DType d = r.graph.tensor(t).dtype;
    if ((d == DType::kBFloat16 && bytes == kLogitsBf16) || (d == DType::kFloat32 && bytes == kLogitsFp32)) {
      ++out[d];
    }
  }
  return out;
}

// The most bytes allocated during step 1's backward.
std::int64_t backward_peak(const Run& r) {
  const std::size_t begin = r.schedule.phase_begin(1, Phase::kBackward)->event_index;
  const std::size_t end = r.schedule.phase_begin(1, Phase::kOptimizer)->event_index;
  std::int64_t peak = 0;
  for (std::size_t i = begin; i < end; ++i) {
    peak = std::max(peak, r.schedule.live_bytes_after[i]);
  }
  return peak;
}

}  // namespace

// Default (torchtitan today, transformers >= 4.45): the loop keeps the bf16 logits (256,000 B); the loss's
// fp32 copy is not saved by anything (_to_copy's backward keeps nothing) and only log_softmax's fp32 output
// (512,000 B) is. At backward: one bf16 and one fp32 logits-sized tensor, 768,000 B.
// fp32 logits: the loop keeps the fp32 logits (512,000 B), the bf16 projection output was freed when forward
// returned, the loss's `.float()` of an fp32 tensor is the tensor itself, log_softmax's output (512,000 B) is
// saved: two fp32 tensors, 1,024,000 B, 256,000 B more (at PR 165's 8 x 2048 x 32,000 logits that is
// 524,288,000 x 2 B = 0.98 GiB).
TEST_CASE("logits dtype fp32: the loop keeps fp32 logits, the bf16 projection output is gone",
          "[quick][graph]") {
  const std::map<DType, int> model = logits_alive_at_backward(run(LogitsDtype::kModel));
  const std::map<DType, int> fp32 = logits_alive_at_backward(run(LogitsDtype::kFp32));
  CHECK(model == std::map<DType, int>{{DType::kBFloat16, 1}, {DType::kFloat32, 1}});
  CHECK(fp32 == std::map<DType, int>{{DType::kFloat32, 2}});
}

// The backward's peak, by hand: it is reached at log_softmax's backward
// (saved log-probabilities, their gradient from nll_loss, the gradient of the log_softmax input: three fp32
// logits) with the loop's logits alive beside them: bf16 (256,000 B) by default, fp32 (512,000 B) upcast;
// with model dtype the loss's fp32 gradient is then cast back to bf16 (_to_copy's backward), with fp32
// logits it is the logits' gradient itself. The peak moves up by exactly the logits' extra 256,000 B.
TEST_CASE("logits dtype fp32: the peak grows by the logits' bf16 size", "[quick][graph]") {
  const Run model = run(LogitsDtype::kModel);
  const Run fp32 = run(LogitsDtype::kFp32);
  CHECK(backward_peak(fp32) - backward_peak(model) == kLogitsBf16);
}

TEST_CASE("logits dtype: the option and its refusals", "[quick][predict]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  CHECK(make_request(a).options.logits_dtype == LogitsDtype::kModel);
  a.logits_dtype = "fp32";
  CHECK(make_request(a).options.logits_dtype == LogitsDtype::kFp32);
  a.logits_dtype = "fp16";
  CHECK_THROWS_WITH(make_request(a), "--logits-dtype: unknown value 'fp16' (expected model or fp32)");
  a.logits_dtype = "fp32";
  a.loss = "chunked-ce";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--logits-dtype fp32: modelled for --loss ce"));
}
