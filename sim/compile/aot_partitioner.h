// AOTAutograd's min-cut rematerialization partitioner, the default partitioner of torch.compile's Inductor
// backend (torch/_functorch/partitioners.py: min_cut_rematerialization_partition, solve_min_cut,
// get_default_op_list). Given the forward half of a joint forward+backward graph it decides which forward
// values are saved for the backward; every other value the backward reads is recomputed there from the
// saved ones.
//
// The rules, as PyTorch states them (functorch config defaults: ban_recompute_used_far_apart,
// ban_recompute_long_fusible_chains, ban_recompute_materialized_backward, ban_recompute_not_in_allowlist,
// ban_recompute_reductions all True, recompute_views False, activation_memory_budget 1.0):
//   * a node may be recomputed only if its op is on the recomputable allowlist (pointwise, views, cheap
//     reductions, indexing, factory ops); matmuls, attention kernels, convolutions and random ops never are;
//   * nor when the backward must materialize it anyway (a backward user it cannot fuse into: a matmul's
//     backward reads its inputs from memory), nor when its output is 4x smaller than its inputs (saving a
//     reduction's result is cheap), nor a fusible user of a value past that value's first unfusible use,
//     nor the node where a chain of fusible ops runs 100 nodes long;
//   * the primals (graph inputs) are never recomputed;
//   * among the cuts left, the smallest: each node costs its size in bytes times 1.1^(distance to the
//     backward, 1..100), doubled when it would not otherwise be materialized (all its users fuse with it).
// The cut is a minimum s-t cut (Boost.Graph's push-relabel max flow) on the graph that splits each node into
// node_in -> node_out with that capacity.
//
// Cost: O(V^2 sqrt(E)) for the max flow on V = 2 * nodes; a 32-layer model is a few thousand nodes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sim/core/types.h"

namespace vramsim::aot {

// What get_default_op_list says about an op, for the op kinds the tape records (aten names, before
// Inductor's decompositions; a composite such as _softmax or native_layer_norm takes the class of the ops it
// decomposes into).
struct OpTraits {
  bool view = false;               // view ops: aliases, no memory of their own
  bool recomputable = false;       // on the allowlist (recomputable_ops)
  bool fusible = false;            // recomputable or random: Inductor can fuse it into a kernel
  bool random = false;             // native_dropout, rand_like, randn_like
  bool compute_intensive = false;  // mm, bmm, addmm, convolution, the SDPA kernels, _scaled_mm
};
OpTraits op_traits(std::string_view aten_kind);

// One value of the forward graph, in forward (topological) order.
struct JointNode {
  std::string_view kind;         // the op that makes it ("placeholder" for a primal)
  Bytes size_bytes = 0;          // _size_of: all its outputs together
  std::vector<int> inputs;       // producers, earlier indices
  bool primal = false;           // a graph input (parameter or activation entering the graph)
  bool forward_output = false;   // returned by the forward graph (besides what is saved)
  bool backward_use = false;     // the backward reads it
  bool backward_fusible = true;  // every backward user can fuse with it (pointwise formulas)
  bool must_recompute = false;   // activation checkpointing's PREFER_RECOMPUTE / MUST_RECOMPUTE tag
  bool must_save = false;        // CheckpointPolicy.MUST_SAVE (selective checkpointing)
};

struct Partition {
  std::vector<int> saved;   // the forward values the backward receives, in forward order
  std::vector<int> banned;  // nodes banned from recomputation, in forward order
};

// solve_min_cut with the default options. Throws InputError when no finite cut exists (a value the backward
// needs that may neither be saved nor recomputed).
Partition min_cut_rematerialization(const std::vector<JointNode>& nodes);

}  // namespace vramsim::aot
