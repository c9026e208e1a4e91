// The min-cut partitioner (sim/compile/aot_partitioner.h) on small hand-built forward graphs. Every expected
// saved set is worked out by hand below from the rules of torch/_functorch/partitioners.py (solve_min_cut,
// get_default_op_list): which nodes are banned from recomputation and what each candidate cut costs,
// size * 1.1^dist_from_bw, doubled for a node all of whose users fuse with it.
#include <catch2/catch.hpp>

#include "sim/compile/aot_partitioner.h"

using namespace vramsim;
using aot::JointNode;

namespace {

JointNode primal(Bytes size, bool backward_fusible = false) {
  JointNode n;
  n.kind = "placeholder";
  n.primal = true;
  n.size_bytes = size;
  n.backward_use = true;
  n.backward_fusible = backward_fusible;
  return n;
}

JointNode op(std::string_view kind, Bytes size, std::vector<int> inputs) {
  JointNode n;
  n.kind = kind;
  n.size_bytes = size;
  n.inputs = std::move(inputs);
  return n;
}

}  // namespace

TEST_CASE("aot partitioner: op classes follow get_default_op_list", "[quick][graph]") {
  CHECK(aot::op_traits("mm").compute_intensive);
  CHECK_FALSE(aot::op_traits("mm").recomputable);
  CHECK(aot::op_traits("_scaled_dot_product_flash_attention").compute_intensive);
  CHECK(aot::op_traits("native_dropout").random);
  CHECK_FALSE(aot::op_traits("native_dropout").recomputable);
  CHECK(aot::op_traits("native_dropout").fusible);  // fusible_ops = recomputable | random
  CHECK(aot::op_traits("sigmoid").recomputable);
  CHECK(aot::op_traits("amax").recomputable);
  CHECK(aot::op_traits("index").recomputable);  // "Natalia said that we should allow recomputing indexing"
  CHECK_FALSE(aot::op_traits("topk").recomputable);
  CHECK_FALSE(aot::op_traits("cat").fusible);
}

// x @ w1 -> h; s = sigmoid(h); t = h * s; y = t @ w2 (a SiLU MLP, 4000-byte activations).
//   * h = mm: not on the allowlist -> banned. t feeds mm2, whose backward (an mm) reads it: materialized in
//     the backward -> banned. s: recomputable, its backward users (sigmoid's and mul's formulas) fuse ->
//     free.
//   * backward reads x, w1 (mm1), h and s (mul), s (sigmoid: its output), t, w2 (mm2).
//   * s must reach the backward: save s itself, 4000 * 1.1^1 * 2 (every user fuses: not materialized) =
//     8800, or cut below it at h, 4000 * 1.1 = 4400 (materialized: sigmoid cannot fuse into an mm). h wins
//     and s is recomputed from it: saved = {x, w1, h, t, w2}.
TEST_CASE("aot partitioner: saves the matmul output, recomputes the pointwise chain", "[quick][graph]") {
  std::vector<JointNode> g;
  g.push_back(primal(1000));              // 0 x
  g.push_back(primal(2000));              // 1 w1
  g.push_back(op("mm", 4000, {0, 1}));    // 2 h
  g.push_back(op("sigmoid", 4000, {2}));  // 3 s
  g.push_back(op("mul", 4000, {2, 3}));   // 4 t
  g.push_back(primal(2000));              // 5 w2
  g.push_back(op("mm", 1000, {4, 5}));    // 6 y
  g[2].backward_use = true;               // mul's backward reads h
  g[3].backward_use = true;               // sigmoid's and mul's backward read s
  g[4].backward_use = true;               // mm2's backward reads t
  g[4].backward_fusible = false;
  g[6].forward_output = true;
  const aot::Partition p = aot::min_cut_rematerialization(g);
  CHECK(p.saved == std::vector<int>{0, 1, 2, 4, 5});
  CHECK(p.banned == std::vector<int>{0, 1, 2, 4, 5, 6});
}

// RMSNorm: sq = x * x (4000), ms = mean(sq) (40), r = rsqrt(ms + eps) (40), y = x * r (4000), out = y @ w.
//   * ms: 40 * 4 < 4000 (ban_if_reduction) -> banned. r: 40 * 4 < 40 is false, recomputable -> free.
//   * y feeds mm (materialized in backward) -> banned and saved.
//   * r reaches the backward (mul's formula): save r, 40 * 1.1^1 * 2 = 88, or ms, 40 * 1.1^2 * 2 = 96 (the
//     mean's only user, rsqrt, fuses): r. saved = {x, r, y, w}; sq is never needed.
TEST_CASE("aot partitioner: a normalization saves its small statistic, not the squares", "[quick][graph]") {
  std::vector<JointNode> g;
  g.push_back(primal(4000, true));       // 0 x (read by mul's formula)
  g.push_back(op("mul", 4000, {0, 0}));  // 1 sq
  g.push_back(op("mean", 40, {1}));      // 2 ms
  g.push_back(op("rsqrt", 40, {2}));     // 3 r
  g.push_back(op("mul", 4000, {0, 3}));  // 4 y
  g.push_back(primal(1000));             // 5 w
  g.push_back(op("mm", 1000, {4, 5}));   // 6 out
  g[3].backward_use = true;
  g[4].backward_use = true;
  g[4].backward_fusible = false;
  g[6].forward_output = true;
  const aot::Partition p = aot::min_cut_rematerialization(g);
  CHECK(p.saved == std::vector<int>{0, 3, 4, 5});
  CHECK(std::find(p.banned.begin(), p.banned.end(), 2) != p.banned.end());
  CHECK(std::find(p.banned.begin(), p.banned.end(), 3) == p.banned.end());
}

// Dropout: its mask is random, so it is never recomputed; a pointwise op after it is.
//   mask = native_dropout(h) (banned: random ops are not on the allowlist), out = h * mask; the backward
//   reads the mask (mul's formula for h). The mask is banned and needed: saved = {mask}. h is a primal the
//   backward does not read: not saved.
TEST_CASE("aot partitioner: random ops are saved, never recomputed", "[quick][graph]") {
  std::vector<JointNode> g;
  g.push_back(primal(4000));                     // 0 h
  g.push_back(op("native_dropout", 4000, {0}));  // 1 mask
  g.push_back(op("mul", 4000, {0, 1}));          // 2 out
  g[1].backward_use = true;
  g[0].backward_use = false;
  g[2].forward_output = true;
  const aot::Partition p = aot::min_cut_rematerialization(g);
  CHECK(p.saved == std::vector<int>{1});
}

// Activation checkpointing's tags: every op inside the region is recomputed, only its input is saved.
//   x -> a = sin(x) (tagged) -> b = mul(a, a) (tagged): the backward reads a; a is must_recompute, so the
//   cut has to be at x: saved = {x}.
TEST_CASE("aot partitioner: must-recompute tags push the cut to the region's input", "[quick][graph]") {
  std::vector<JointNode> g;
  g.push_back(primal(4000, true));       // 0 x
  g.push_back(op("sin", 4000, {0}));     // 1 a
  g.push_back(op("mul", 4000, {1, 1}));  // 2 b
  g[1].backward_use = true;
  g[1].must_recompute = true;
  g[2].must_recompute = true;
  g[2].forward_output = true;
  const aot::Partition p = aot::min_cut_rematerialization(g);
  CHECK(p.saved == std::vector<int>{0});
}
