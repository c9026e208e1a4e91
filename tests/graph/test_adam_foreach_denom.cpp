// torch.optim's foreach AdamW before and after pytorch/pytorch#104898 (July 2023, first in PyTorch 2.1):
// PyTorch 1.13 and 2.0 (torch/optim/adamw.py, _multi_tensor_adamw, non-capturable, no amsgrad) write
//
//   exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
//   torch._foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
//   denom = torch._foreach_add(exp_avg_sq_sqrt, eps)          # a second list, exp_avg_sq_sqrt still alive
//   torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)
//
// where 2.1+ writes `torch._foreach_add_(exp_avg_sq_sqrt, eps)` in place. So at the update, 1.13 holds one
// more list of temporaries, each the size of its parameter: the step's peak rises by exactly the stepped
// parameters' bytes. Sizes worked by hand below.
#include <catch2/catch.hpp>

#include <algorithm>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// The tiny Llama of graph_test_util.h (vocab 1000, d 64, 2 layers, d_ff 172, untied head): embed_tokens
// 64,000 elements; per layer q, k, v, o 4 x 64 x 64 = 16,384, gate/up/down 3 x 64 x 172 = 33,024, two norms
// 128: 49,536, twice 99,072; final norm 64; lm_head 64,000. 227,136 elements in 21 tensors, fp32: 4 B each.
constexpr Bytes kParamBytes = 227'136 * 4;  // 908,544
constexpr int kTensors = 21;

OpGraph two_steps(AdamForeachDenom denom, Checkpointing checkpointing) {
  TrainingOptions o = test::small_options();  // batch 2, seq 32, 2 steps, fp32, adamw foreach
  o.adam_foreach_denom = denom;
  o.checkpointing = checkpointing;
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

// The most bytes allocated at once during step `step`'s optimizer.step().
std::int64_t optimizer_peak(const OpGraph& g, int step) {
  const AllocationSchedule s = build_allocation_schedule(g);
  test::check_schedule_invariants(g, s);
  const std::size_t begin = s.phase_begin(step, Phase::kOptimizer)->event_index;
  const std::size_t end = s.phase_begin(step, Phase::kZeroGrad)->event_index;
  std::int64_t peak = 0;
  for (std::size_t i = begin; i < end; ++i) {
    peak = std::max(peak, s.live_bytes_after[i]);
  }
  return peak;
}

}  // namespace

TEST_CASE("adam foreach denom: PyTorch 1.13's out-of-place denom is one more parameter-sized list per step",
          "[quick][graph]") {
  const OpGraph in_place = two_steps(AdamForeachDenom::kInPlace, Checkpointing::kNone);
  const OpGraph out_of_place = two_steps(AdamForeachDenom::kOutOfPlace, Checkpointing::kNone);
  CHECK(in_place.tensors().size() + 2 * kTensors == out_of_place.tensors().size());
  Bytes denom_bytes = 0;
  int denoms = 0;
  for (const Tensor& t : out_of_place.tensors()) {
    if (t.name.ends_with(".denom")) {
      denom_bytes += t.size_bytes;
      ++denoms;
    }
  }
  CHECK(denoms == 2 * kTensors);  // 21 per step, two steps
  CHECK(denom_bytes == 2 * kParamBytes);
}

TEST_CASE("adam foreach denom: the optimizer step's peak rises by exactly the parameters' bytes",
          "[quick][graph]") {
  for (Checkpointing c : {Checkpointing::kNone, Checkpointing::kFull}) {
    const OpGraph in_place = two_steps(AdamForeachDenom::kInPlace, c);
    const OpGraph out_of_place = two_steps(AdamForeachDenom::kOutOfPlace, c);
    for (int step : {1, 2}) {
      INFO("checkpointing " << static_cast<int>(c) << ", step " << step);
      CHECK(optimizer_peak(out_of_place, step) - optimizer_peak(in_place, step) ==
            static_cast<std::int64_t>(kParamBytes));
    }
  }
}
