// Tape ops the mixture-of-experts layers of Megatron-Core (megatron_moe.cpp) and torchtitan
// (torchtitan_moe.cpp) share: a plain op with saved inputs, a grouped GEMM over the local experts, the
// expert-parallel all-to-all and Megatron's expert-tensor-parallel all-gather and reduce-scatter.
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

// Megatron's MoEAlltoAllTokenDispatcher under expert tensor parallelism (token_dispatcher.py
// dispatch_postprocess / combine_preprocess), over the expert-tensor-parallel group, the rows split as its
// ranks route (output_split_sizes; equal under the routing model):
//   gather_from_sequence_parallel_region: mappings.py _gather_along_first_dim makes torch.empty([rows, ...])
//     and torch.distributed.all_gather fills the list of its splits, which ProcessGroupNCCL::allgather
//     (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: checkSameSize, newLikeFlat) stages in one flat
//     tensor of the output's size and copies out. Its backward is the reduce-scatter
//     (tensor_parallel_output_grad).
//   reduce_scatter_to_sequence_parallel_region: _reduce_scatter_along_first_dim makes torch.empty of the
//     rank's split and torch.distributed.reduce_scatter reads the list of the input's splits, which
//     ProcessGroupNCCL::reduce_scatter first copies into one flat tensor of the input's size. Its backward is
//     the all-gather.
// Both return a new tensor of `rows` rows; the staging tensor is freed when the op ends.
VarId expert_tensor_all_gather(EagerTape& t, const std::string& name, VarId x, std::int64_t rows);
VarId expert_tensor_reduce_scatter(EagerTape& t, const std::string& name, VarId x, std::int64_t rows);

}  // namespace vramsim
