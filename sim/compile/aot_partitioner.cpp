#include "sim/compile/aot_partitioner.h"

#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <cmath>
#include <queue>
#include <string>
#include <utility>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim::aot {
namespace {

bool in(std::string_view kind, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), kind) != list.end();
}

}  // namespace

OpTraits op_traits(std::string_view k) {
  OpTraits t;
  // view ops (recomputable_view_ops), as the tape names them
  if (in(k, {"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "alias", "slice", "select", "t",
             "expand", "as_strided", "permute", "transpose"})) {
    t.view = t.recomputable = t.fusible = true;
    return t;
  }
  if (in(k, {"native_dropout", "rand_like", "randn_like", "bernoulli"})) {
    t.random = t.fusible = true;
    return t;
  }
  if (in(k, {"mm", "addmm", "bmm", "convolution", "convolution_backward", "_scaled_mm",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
             "_efficient_attention_forward", "upsample_bilinear2d"})) {
    t.compute_intensive = true;
    return t;
  }
  // default_recomputable_ops and the pointwise-tagged ops, plus the composites Inductor decomposes into them
  // before partitioning (_softmax, _log_softmax, native_layer_norm, linalg_vector_norm, embedding -> index,
  // nll_loss_forward -> gather, masked_fill -> where, contiguous -> clone).
  if (in(k, {"add",
             "sub",
             "rsub",
             "div",
             "mul",
             "neg",
             "pow",
             "sqrt",
             "rsqrt",
             "reciprocal",
             "exp",
             "log",
             "sigmoid",
             "silu",
             "gelu",
             "tanh",
             "relu",
             "abs",
             "where",
             "masked_fill",
             "clamp",
             "lerp",
             "addcmul",
             "eq",
             "ne",
             "lt",
             "le",
             "gt",
             "ge",
             "bitwise_not",
             "logical_not",
             "cos",
             "sin",
             "erf",
             "maximum",
             "minimum",
             "_to_copy",
             "to",
             "type_as",
             "clone",
             "contiguous",
             "copy_",
             "fill_",
             "sum",
             "mean",
             "amax",
             "max",
             "min",
             "var",
             "var_mean",
             "std",
             "argmax",
             "any",
             "cumsum_free",
             "linalg_vector_norm",
             "_softmax",
             "_log_softmax",
             "native_layer_norm",
             "rms_norm",
             "nll_loss_forward",
             "index",
             "gather",
             "embedding",
             "arange",
             "ones",
             "zeros",
             "zeros_like",
             "ones_like",
             "full",
             "full_like",
             "empty",
             "empty_like",
             "triu",
             "tril",
             "scalar_tensor",
             "iota",
             "new_zeros"})) {
    t.recomputable = t.fusible = true;
    return t;
  }
  return t;  // cat, topk, sort, scatter, index_put, collectives, anything unknown: neither
}

namespace {

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, std::int64_t,
                    boost::property<boost::edge_residual_capacity_t, std::int64_t,
                                    boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

// math.inf in the partitioner: more than any sum of finite capacities can reach (node weights are sizes of
// at most 2^50 bytes times 1.1^100 < 2^14, times 2).
constexpr std::int64_t kInf = std::int64_t{1} << 62;
constexpr int kFar = 1000000000;  // int(1e9): dist_from_bw of a node no backward path reaches

class MinCut {
 public:
  explicit MinCut(std::size_t vertices) : m_graph(vertices) {}
  void edge(std::size_t from, std::size_t to, std::int64_t capacity) {
    auto capacity_map = boost::get(boost::edge_capacity, m_graph);
    auto reverse_map = boost::get(boost::edge_reverse, m_graph);
    const auto e = boost::add_edge(from, to, m_graph).first;
    const auto r = boost::add_edge(to, from, m_graph).first;
    capacity_map[e] = capacity;
    capacity_map[r] = 0;
    reverse_map[e] = r;
    reverse_map[r] = e;
  }
  // The vertices on the source side of a minimum cut (reachable from `source` in the residual graph).
  std::vector<bool> source_side(std::size_t source, std::size_t sink) {
    const std::int64_t flow = boost::push_relabel_max_flow(m_graph, source, sink);
    if (flow >= kInf) {
      throw InputError(
          "torch.compile partitioner: a value the backward needs can be neither saved nor "
          "recomputed");
    }
    auto residual = boost::get(boost::edge_residual_capacity, m_graph);
    std::vector<bool> seen(boost::num_vertices(m_graph), false);
    std::queue<std::size_t> q;
    q.push(source);
    seen[source] = true;
    while (!q.empty()) {
      const std::size_t u = q.front();
      q.pop();
      for (auto [e, end] = boost::out_edges(u, m_graph); e != end; ++e) {
        const std::size_t v = boost::target(*e, m_graph);
        if (!seen[v] && residual[*e] > 0) {
          seen[v] = true;
          q.push(v);
        }
      }
    }
    return seen;
  }

 private:
  FlowGraph m_graph;
};

struct Analysis {
  const std::vector<JointNode>& nodes;
  std::vector<OpTraits> traits;
  std::vector<std::vector<int>> users;  // forward users
  std::vector<int> dist_from_bw;

  explicit Analysis(const std::vector<JointNode>& n) : nodes(n), traits(n.size()), users(n.size()) {
    for (std::size_t i = 0; i < n.size(); ++i) {
      traits[i] = n[i].primal ? OpTraits{} : op_traits(n[i].kind);
      for (int p : n[i].inputs) {
        SIM_ASSERT(p >= 0 && static_cast<std::size_t>(p) < i);
        users[static_cast<std::size_t>(p)].push_back(static_cast<int>(i));
      }
    }
    // dist_from_bw: backward nodes are at 0, the output node at 1e9; a forward node one more than its
    // nearest user.
    dist_from_bw.assign(n.size(), kFar);
    for (std::size_t k = n.size(); k-- > 0;) {
      int d = n[k].backward_use ? 1 : kFar;
      if (n[k].forward_output) {
        d = std::min(d, kFar + 1);
      }
      for (int u : users[k]) {
        d = std::min(d, dist_from_bw[static_cast<std::size_t>(u)] + 1);
      }
      dist_from_bw[k] = d;
    }
  }

  bool fusible(int a, int b) const {  // is_fusible(a, b); cat takes a fused producer ("memory fusion")
    const auto& kb = nodes[static_cast<std::size_t>(b)].kind;
    if (kb == "cat") {
      return true;
    }
    return traits[static_cast<std::size_t>(a)].fusible && traits[static_cast<std::size_t>(b)].fusible;
  }
  // is_materialized_backwards: some backward user cannot fuse with it (looking through its views).
  bool materialized_backwards(int n) const {
    if (traits[static_cast<std::size_t>(n)].view) {
      return false;
    }
    std::vector<int> todo{n};
    while (!todo.empty()) {
      const int cur = todo.back();
      todo.pop_back();
      const JointNode& c = nodes[static_cast<std::size_t>(cur)];
      if (c.backward_use && (!c.backward_fusible || !traits[static_cast<std::size_t>(cur)].fusible)) {
        return true;
      }
      for (int u : users[static_cast<std::size_t>(cur)]) {
        if (traits[static_cast<std::size_t>(u)].view) {
          todo.push_back(u);
        }
      }
    }
    return false;
  }
  bool should_ban(int n) const {
    const JointNode& node = nodes[static_cast<std::size_t>(n)];
    const OpTraits& t = traits[static_cast<std::size_t>(n)];
    if (node.primal) {
      return false;  // not a call_function
    }
    if (node.must_save) {
      return true;
    }
    if (!t.recomputable) {
      return true;  // ban_if_not_in_allowlist
    }
    if (materialized_backwards(n)) {
      return true;
    }
    // ban_if_reduction: output_size * 4 < input_tensors_size
    Bytes inputs = 0;
    for (int p : node.inputs) {
      inputs += nodes[static_cast<std::size_t>(p)].size_bytes;
    }
    return node.size_bytes * 4 < inputs;
  }
  bool materialized(int n) const {  // is_materialized
    const JointNode& node = nodes[static_cast<std::size_t>(n)];
    if (node.primal) {
      return true;
    }
    if (node.backward_use && (!node.backward_fusible || !traits[static_cast<std::size_t>(n)].fusible)) {
      return true;
    }
    for (int u : users[static_cast<std::size_t>(n)]) {
      if (!fusible(n, u)) {
        return true;
      }
    }
    return false;
  }
  std::int64_t weight(int n) const {  // get_node_weight
    const double scale = std::pow(1.1, std::max(std::min(dist_from_bw[static_cast<std::size_t>(n)], 100), 1));
    const auto mem =
        static_cast<std::int64_t>(static_cast<double>(nodes[static_cast<std::size_t>(n)].size_bytes) * scale);
    return materialized(n) ? mem : mem * 2;
  }
};

// ban_if_used_far_apart: a fusible user of a value that runs after the value's first unfusible use (in
// forward order) is banned; recomputing both uses would not fuse them.
void ban_used_far_apart(const Analysis& a, std::vector<bool>& banned) {
  const auto& nodes = a.nodes;
  for (std::size_t used = 0; used < nodes.size(); ++used) {
    const std::vector<int>& fw_users = a.users[used];
    if (fw_users.empty()) {
      continue;
    }
    const int max_order = *std::max_element(fw_users.begin(), fw_users.end());
    // find_first_unfusible: walk users in forward order from the direct users, up to max_order
    using Item = std::tuple<int, int, bool>;  // order, node, reached through a fusible edge
    std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
    for (int u : fw_users) {
      heap.emplace(u, u, true);
    }
    int first_unfusible = max_order;
    while (!heap.empty()) {
      const auto [order, n, is_fusible] = heap.top();
      heap.pop();
      if (!is_fusible) {
        first_unfusible = order;
        break;
      }
      for (int u : a.users[static_cast<std::size_t>(n)]) {
        if (u <= max_order) {
          heap.emplace(u, u, a.fusible(n, u));
        }
      }
    }
    for (int u : fw_users) {
      if (u > first_unfusible && a.fusible(static_cast<int>(used), u) &&
          !a.traits[static_cast<std::size_t>(u)].view) {
        banned[static_cast<std::size_t>(u)] = true;
      }
    }
  }
}

// ban_if_long_fusible_chains: from each node, follow fusible users in forward order; a node reached more than
// 100 nodes later with nothing else pending is banned.
void ban_long_fusible_chains(const Analysis& a, std::vector<bool>& banned) {
  const auto& nodes = a.nodes;
  std::vector<bool> visited(nodes.size(), false);
  for (std::size_t start = 0; start < nodes.size(); ++start) {
    std::priority_queue<int, std::vector<int>, std::greater<>> fusible;
    fusible.push(static_cast<int>(start));
    while (!fusible.empty()) {
      const int cur = fusible.top();
      fusible.pop();
      if (visited[static_cast<std::size_t>(cur)]) {
        continue;
      }
      visited[static_cast<std::size_t>(cur)] = true;
      if (cur > static_cast<int>(start) + 100 && fusible.empty()) {
        if (!a.traits[static_cast<std::size_t>(cur)].view &&
            !nodes[static_cast<std::size_t>(cur)].must_recompute) {
          banned[static_cast<std::size_t>(cur)] = true;
        }
        break;
      }
      for (int u : a.users[static_cast<std::size_t>(cur)]) {
        if (a.fusible(cur, u) && !banned[static_cast<std::size_t>(u)]) {
          fusible.push(u);
        }
      }
    }
  }
}

}  // namespace

Partition min_cut_rematerialization(const std::vector<JointNode>& nodes) {
  const Analysis a(nodes);
  const std::size_t n = nodes.size();
  const std::size_t source = 2 * n;
  const std::size_t sink = 2 * n + 1;
  auto in_v = [](std::size_t i) { return 2 * i; };
  auto out_v = [](std::size_t i) { return 2 * i + 1; };

  std::vector<bool> banned(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes[i].must_recompute) {
      continue;
    }
    if (!a.traits[i].view && (nodes[i].primal || a.should_ban(static_cast<int>(i)))) {
      banned[i] = true;
    }
  }
  ban_used_far_apart(a, banned);
  ban_long_fusible_chains(a, banned);

  MinCut cut(2 * n + 2);
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes[i].must_recompute) {
      // the user's tag: X_in joins the sink's side, so X is recomputed
      cut.edge(in_v(i), sink, kInf);
      continue;
    }
    if (banned[i]) {
      cut.edge(source, in_v(i), kInf);
    }
    if (nodes[i].backward_use) {
      cut.edge(out_v(i), sink, kInf);
    }
    cut.edge(in_v(i), out_v(i), a.weight(static_cast<int>(i)));
    for (int u : a.users[i]) {
      cut.edge(out_v(i), in_v(static_cast<std::size_t>(u)), kInf);
    }
  }
  const std::vector<bool> reach = cut.source_side(source, sink);
  Partition p;
  for (std::size_t i = 0; i < n; ++i) {
    if (!nodes[i].must_recompute && reach[in_v(i)] && !reach[out_v(i)]) {
      p.saved.push_back(static_cast<int>(i));
    }
    if (banned[i]) {
      p.banned.push_back(static_cast<int>(i));
    }
  }
  return p;
}

}  // namespace vramsim::aot
