// DDP's gradient_as_bucket_view (torch/nn/parallel/distributed.py; the Reducer's mark_variable_ready_dense):
// each .grad becomes a view of its all-reduce bucket, so a rank holds its gradients once, in the buckets.
// Expected bytes by hand below.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// The tiny Llama of graph_test_util.h in fp32: 227,136 parameter elements (test_deepspeed_zero_step.cpp
// counts them), 908,544 B, every one requiring grad; DDP buckets them all (one 1 MiB first bucket holds
// them).
constexpr Bytes kParamBytes = 227'136 * 4;

OpGraph ddp(bool bucket_view, bool set_to_none) {
  TrainingOptions o = test::small_options();
  o.optimizer_impl = OptimizerImpl::kFused;
  o.zero_grad_set_to_none = set_to_none;
  o.data_parallel.scheme = "ddp";
  o.data_parallel.world_size = 2;
  o.data_parallel.ddp_gradient_as_bucket_view = bucket_view;
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

}  // namespace

TEST_CASE("ddp gradient_as_bucket_view: the buckets are the gradients", "[quick][graph]") {
  // zero_grad(set_to_none=False): the gradients stay. Default: .grad tensors plus buckets, each 908,544 B;
  // with the view: the buckets alone, and they are the gradients.
  const OpGraph copies = ddp(false, false);
  CHECK(test::persistent_bytes(copies, TensorCategory::kGradient) == kParamBytes);
  CHECK(test::persistent_bytes(copies, TensorCategory::kCommunication) == kParamBytes);
  const OpGraph views = ddp(true, false);
  CHECK(test::persistent_bytes(views, TensorCategory::kGradient) == kParamBytes);
  CHECK(test::persistent_bytes(views, TensorCategory::kCommunication) == 0);
  test::check_schedule_invariants(views, build_allocation_schedule(views));
}

TEST_CASE("ddp gradient_as_bucket_view: the step begins with one copy of the gradients, not two",
          "[quick][graph]") {
  // zero_grad(set_to_none=True): where step 2's optimizer begins, the default holds .grad tensors and buckets
  // (2 x 908,544 B); the view holds the buckets only. Everything else alive there is the same.
  const AllocationSchedule copies = build_allocation_schedule(ddp(false, true));
  const AllocationSchedule views = build_allocation_schedule(ddp(true, true));
  CHECK(*copies.live_bytes_at(2, Phase::kOptimizer) - *views.live_bytes_at(2, Phase::kOptimizer) ==
        static_cast<std::int64_t>(kParamBytes));
  // zero_grad drops the views; the Reducer keeps its buckets.
  CHECK(test::persistent_bytes(ddp(true, true), TensorCategory::kGradient) == kParamBytes);
}
