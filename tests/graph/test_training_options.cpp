// The CLI strings of the training options, and their validation.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/training/training_options.h"

using namespace vramsim;
using Catch::Matchers::Contains;

TEST_CASE("training options parse the documented strings", "[quick][graph]") {
  CHECK(parse_precision("amp-bf16") == Precision::kAmpBf16);
  CHECK(parse_precision("bf16") == Precision::kBf16);
  CHECK(parse_optimizer("adamw") == OptimizerKind::kAdamW);
  CHECK(parse_optimizer("adamw-8bit") == OptimizerKind::kAdamW8bit);
  CHECK(parse_optimizer("sgd-momentum") == OptimizerKind::kSgdMomentum);
  CHECK(parse_optimizer("adamw-fused") == OptimizerKind::kAdamW);
  CHECK(parse_optimizer_impl("adamw-fused", OptimizerImpl::kForeach) == OptimizerImpl::kFused);
  CHECK(parse_optimizer_impl("sgd-momentum-for-loop", OptimizerImpl::kForeach) == OptimizerImpl::kForLoop);
  CHECK(parse_optimizer_impl("adam", OptimizerImpl::kForeach) == OptimizerImpl::kForeach);
  CHECK(parse_checkpointing("selective") == Checkpointing::kSelective);
  CHECK(parse_attention("flash") == AttentionKind::kSdpaFlash);
  for (Precision p : {Precision::kFp32, Precision::kAmpFp16, Precision::kAmpBf16, Precision::kBf16}) {
    CHECK(parse_precision(precision_name(p)) == p);
  }
}

TEST_CASE("training options reject unknown values with the option name", "[quick][graph]") {
  CHECK_THROWS_WITH(parse_precision("fp8"),
                    Contains("--precision") && Contains("fp8") && Contains("amp-bf16"));
  CHECK_THROWS_WITH(parse_optimizer("lion"), Contains("--optimizer") && Contains("lion"));
  CHECK_THROWS_WITH(parse_optimizer_impl("adamw-turbo", OptimizerImpl::kForeach), Contains("adamw-turbo"));
  CHECK_THROWS_WITH(parse_checkpointing("some"), Contains("--checkpointing"));
  CHECK_THROWS_WITH(parse_attention("sparse"), Contains("--attention"));
  TrainingOptions o;
  o.batch = 0;
  CHECK_THROWS_WITH(validate(o), Contains("--batch"));
  o = {};
  o.dropout = 1.0;
  CHECK_THROWS_WITH(validate(o), Contains("--dropout"));
  o = {};
  o.steps = 0;
  CHECK_THROWS_AS(validate(o), InputError);
}
