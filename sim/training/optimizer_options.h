// Settings of torch.optim's implementations that changed between PyTorch versions. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/predict/request_args.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// The foreach Adam / AdamW step's `denom` (torch/optim/adam.py and adamw.py, _multi_tensor_adam(w), the
// non-capturable path without amsgrad):
//   in-place     : PyTorch >= 2.1: `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`, then
//                  `torch._foreach_div_` and `torch._foreach_add_(exp_avg_sq_sqrt, eps)` in place: one list
//                  of temporaries as large as the stepped parameters ("[foreach][Adam] Minimize use of
//                  intermediates to decrease peak memory", pytorch/pytorch#104780, and the same for AdamW,
//                  #104898, July 2023, for issue #97712).
//   out-of-place : before those PRs (PyTorch 1.13, 2.0): `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`,
//                  a second such list, made while the first is alive; both die when the step returns.
enum class AdamForeachDenom : std::uint8_t { kInPlace, kOutOfPlace };

}  // namespace vramsim
