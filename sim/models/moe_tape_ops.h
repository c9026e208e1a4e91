// Tape ops the mixture-of-experts layers of Megatron-Core (megatron_moe.cpp) and torchtitan
// (torchtitan_moe.cpp) share: a plain op with saved inputs, a grouped GEMM over the local experts and the
// expert-parallel all-to-all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/graph/eager_tape.h"

namespace vramsim {

// One op with `inputs`, one output [out] of `dtype`, saving the inputs at `saved`; every input gets a new
// gradient unless `no_grad` lists it.
VarId moe_op(EagerTape& t, const std::string& name, const char* kind, std::vector<VarId> inputs,
             const Shape& out, DType dtype, std::vector<int> saved, const std::vector<int>& no_grad = {},
             double flops = 0.0);

// A grouped GEMM of x [R, in] with each local expert's weights (Megatron's TEGroupedMLP linear_fc1 /
// linear_fc2, torchtitan's torch._grouped_mm): saves x and the weights; output [R, out_features].
VarId grouped_gemm(EagerTape& t, const std::string& name, VarId x, const std::vector<VarId>& weights,
                   std::int64_t out_features);

// all_to_all_single over the expert-parallel group (Megatron's _AllToAll, torchtitan's
// all_to_all_single_autograd): a new [rows, ...] tensor; its backward is the reverse all-to-all (a new
// tensor).
VarId expert_all_to_all(EagerTape& t, const std::string& name, VarId x, std::int64_t rows);

}  // namespace vramsim
