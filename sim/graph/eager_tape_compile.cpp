// The tape's torch.compile side (torch_compile.h): capturing ops instead of running them (Dynamo's trace),
// and the autograd node of a compiled graph (AOTAutograd's CompiledFunction).
#include "sim/graph/eager_tape.h"

#include "sim/core/assert.h"
#include "sim/training/selective_checkpoint.h"

namespace vramsim {

void EagerTape::begin_capture() {
  SIM_ASSERT(!m_capturing);
  m_capturing = true;
  m_captured.clear();
}

std::vector<CapturedOp> EagerTape::end_capture() {
  SIM_ASSERT(m_capturing);
  m_capturing = false;
  return std::move(m_captured);
}

std::vector<VarId> EagerTape::capture(const OpCall& c, bool view) {
  CapturedOp op;
  op.call = c;
  op.view = view;
  op.must_recompute = m_capture_recompute;
  if (m_capture_sac != nullptr && !view &&
      m_capture_sac->must_save(c.kind, ++m_capture_sac_occurrences[c.kind])) {
    op.must_recompute = false;
    op.must_save = true;
  }
  op.layer = m_layer;
  bool needs_grad = false;
  for (VarId in : c.inputs) {
    needs_grad = needs_grad || m_vars[in].requires_grad;
  }
  op.needs_grad = needs_grad && m_grad_enabled;
  for (const OutputSpec& o : c.outputs) {
    const std::string name = o.suffix.empty() ? c.name : c.name + "." + o.suffix;
    // no storage, views too: Python references to captured values are not counted (a view of a parameter
    // is the parameter's value to the compiled graph)
    const VarId v = new_var(kNoTensor, o.shape, o.dtype, name);
    m_vars[v].requires_grad = op.needs_grad && o.differentiable;
    op.outputs.push_back(v);
  }
  m_captured.push_back(op);
  return m_captured.back().outputs;
}

void EagerTape::function_node(const std::string& name, const std::vector<VarId>& inputs,
                              const std::vector<VarId>& outputs, std::vector<TensorId> saved,
                              FunctionBackward backward) {
  Node node;
  node.name = name;
  node.kind = "CompiledFunction";
  node.layer = m_layer;
  node.inputs = inputs;
  node.saved = std::move(saved);
  node.function_backward = std::move(backward);
  add_node(std::move(node), outputs);
}

void EagerTape::execute_function(Node& node, const std::vector<VarId>& grads_out) {
  std::vector<TensorId> incoming;
  for (VarId g : grads_out) {
    incoming.push_back(g == kNoVar ? kNoTensor : m_vars[g].storage);  // the reference goes with it
  }
  const FunctionBackward backward = node.function_backward;
  const std::vector<VarId> inputs = node.inputs;
  const std::string name = node.name;
  std::vector<TensorId> saved = std::move(node.saved);
  node.saved.clear();
  node.done = true;
  const std::vector<TensorId> grads = backward(incoming, std::move(saved));
  SIM_ASSERT(grads.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (grads[i] == kNoTensor) {
      continue;
    }
    const Var x = m_vars[inputs[i]];
    const VarId g = new_var(grads[i], x.shape, x.dtype, x.name + ".grad");
    disown(grads[i]);
    deliver(inputs[i], g);
  }
}

}  // namespace vramsim
