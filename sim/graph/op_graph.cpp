#include "sim/graph/op_graph.h"

#include "sim/core/assert.h"

namespace vramsim {

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return "setup";
    case Phase::kForward:
      return "forward";
    case Phase::kLoss:
      return "loss";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kZeroGrad:
      return "zero_grad";
  }
  return "?";
}

std::string_view category_name(TensorCategory c) {
  switch (c) {
    case TensorCategory::kParameter:
      return "parameter";
    case TensorCategory::kGradient:
      return "gradient";
    case TensorCategory::kOptimizerState:
      return "optimizer_state";
    case TensorCategory::kActivation:
      return "activation";
    case TensorCategory::kTemporary:
      return "temporary";
    case TensorCategory::kWorkspace:
      return "workspace";
    case TensorCategory::kInput:
      return "input";
    case TensorCategory::kCommunication:
      return "communication";
    case TensorCategory::kKvCache:
      return "kv_cache";
  }
  return "?";
}

OpId OpGraph::add_op(Op op) {
  m_ops.push_back(std::move(op));
  return static_cast<OpId>(m_ops.size() - 1);
}

TensorId OpGraph::add_tensor(Tensor t) {
  SIM_ASSERT(t.producer < op_count());
  t.id = static_cast<TensorId>(m_tensors.size());
  m_tensors.push_back(std::move(t));
  return m_tensors.back().id;
}

void OpGraph::add_consumer(TensorId tensor, OpId op, EdgeKind kind) {
  Tensor& t = m_tensors.at(tensor);
  SIM_ASSERT(op < op_count() && op >= t.producer);
  SIM_ASSERT(t.consumers.empty() || op >= t.consumers.back());
  if (!t.consumers.empty() && t.consumers.back() == op) {
    return;
  }
  t.consumers.push_back(op);
  if (op != t.producer) {
    m_edges.push_back(Edge{t.producer, op, DependencyEdge{tensor, kind}});
  }
}

void OpGraph::reserve(std::size_t ops, std::size_t tensors) {
  m_ops.reserve(m_ops.size() + ops);
  m_tensors.reserve(m_tensors.size() + tensors);
}

OpAdjacency OpGraph::dependency_graph() const {
  OpAdjacency g(m_ops.size());
  for (std::size_t i = 0; i < m_ops.size(); ++i) {
    g[i] = m_ops[i];
  }
  for (const Edge& e : m_edges) {
    boost::add_edge(e.source, e.target, e.dependency, g);
  }
  return g;
}

}  // namespace vramsim
