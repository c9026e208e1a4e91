// The bounds `vramsim plan` prunes by before any simulation (plan.h): the model states every rank holds at
// least. The bounds on speed (a family's fastest configuration, a block's largest micro-batch) are the
// search's (Note [Bounds on speed], plan_search.cpp).
#include <optional>
#include <string>

#include <fmt/format.h>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/plan/plan.h"
#include "sim/training/training_options.h"

namespace vramsim {

std::int64_t model_states_lower_bound(const PlanRequest& r, const PlanConfig& c) {
  if (!c.adapters.empty() || !c.offload.empty()) {
    return 0;
  }
  ModelConfig m = load_model(r.model);
  if (!r.model_code.empty()) {
    m.code = std::string(layer_code(r.model_code).name());
  }
  const std::int64_t per_rank = tensor_parallel_rank(m, c.tp).parameter_count() / c.pp;
  const std::int64_t p = c.precision == "bf16" ? 2 : 4;  // parameters; gradients alike
  std::int64_t o = 2;                                    // adamw-8bit: two uint8 moments
  if (c.optimizer == "adamw") {
    // two fp32 moments (+ fp32 master weights under bf16 where the framework keeps them; FSDP keeps fp32
    // shards and gradient shards instead, the same 16 bytes in all); two bf16 moments where torch.optim
    // steps the bf16 parameters (training_options.h: MasterWeights)
    const std::string scheme = !c.fsdp.empty() ? "fsdp2-full-shard" : (c.zero > 0 ? "zero" : "ddp");
    const bool master = default_master_weights(scheme, c.tp, c.pp) == MasterWeights::kFp32;
    o = c.precision != "bf16" ? 8 : (master ? 12 : 4);
  }
  const std::int64_t n = sharding_degree(r, c);
  // at most 16 B x 2^46 parameters (hf_config.cpp's kMaxParameters): far inside int64, checked all the same
  const auto bytes_of = [&](std::int64_t per_parameter) {
    const std::optional<std::int64_t> b = checked_mul(per_parameter, per_rank);
    if (!b) {
      throw InputError(
          fmt::format("{}: {} parameters a rank: the model states' bytes overflow", r.model, per_rank));
    }
    return *b;
  };
  std::int64_t bytes = 0;
  if (!c.fsdp.empty() || c.zero == 3) {
    bytes = bytes_of(p + p + o) / n;
  } else if (c.zero == 2) {
    bytes = bytes_of(p) + bytes_of(p + o) / n;
  } else if (c.zero == 1) {
    bytes = bytes_of(p + p) + bytes_of(o) / n;
  } else {
    bytes = bytes_of(p + p + o);
  }
  return bytes;
}

}  // namespace vramsim
