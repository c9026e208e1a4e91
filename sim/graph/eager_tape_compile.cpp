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
      m_capture_sac->must_save(dispatch_mode_op(c.kind),
                               ++m_capture_sac_occurrences[std::string(dispatch_mode_op(c.kind))])) {
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
    const VarId v = new_var(kNoTensor, intern_shape(o.shape), o.dtype, name);
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
  node.inputs.assign(inputs.begin(), inputs.end());
  for (TensorId s : saved) {
    if (m_offload != ActivationOffload::kNone && offload_pack(node, s)) {
      // The forward's list of saved outputs goes when the Function returns: the device tensor lives on only
      // in torchtune's forward stash (save_on_cpu keeps none).
      node.function_slots.push_back(-static_cast<int>(node.packed.size()));
      unref(s);
    } else {
      node.function_slots.push_back(static_cast<int>(node.saved.size()));
      node.saved.push_back(s);
    }
  }
  node.function_backward = std::move(backward);
  add_node(std::move(node), outputs);
}

// CompiledFunction.backward reads ctx.saved_tensors first: every packed tensor is unpacked before the graph
// runs (torchtune's on its side stream, already in `unpacked`; save_on_cpu's copied back here).
void EagerTape::execute_function(std::size_t index, const std::vector<VarId>& grads_out,
                                 std::vector<TensorId> unpacked) {
  Node& node = m_nodes[index];
  std::vector<TensorId> incoming;
  for (VarId g : grads_out) {
    incoming.push_back(g == kNoVar ? kNoTensor : m_vars[g].storage);  // the reference goes with it
  }
  const bool torchtune = node.offload == ActivationOffload::kTorchtuneStreams;
  if (!torchtune && !node.packed.empty()) {
    begin_op(node_name(node) + ".unpack_from_cpu", "_to_copy");
    for (TensorId p : node.packed) {
      const Tensor& t = m_graph.tensor(p);
      const std::string unpacked_name = t.name + ".unpacked";  // copies: allocate() grows the graph
      const Bytes bytes = t.size_bytes;
      const DType dtype = t.dtype;
      unpacked.push_back(allocate(unpacked_name, bytes, dtype, TensorCategory::kActivation));
    }
  }
  SIM_ASSERT(unpacked.size() == node.packed.size());
  std::vector<TensorId> saved;  // in ctx.save_for_backward's order, one reference each for the backward
  for (int k : node.function_slots) {
    if (k >= 0) {
      saved.push_back(node.saved[static_cast<std::size_t>(k)]);
      continue;
    }
    const TensorId s = unpacked[static_cast<std::size_t>(-k - 1)];
    if (torchtune) {
      ref(s);  // torchtune's backward stash keeps its own until the next unpacking node's hook
    }
    saved.push_back(s);
  }
  const FunctionBackward backward = node.function_backward;
  const std::vector<VarId> inputs(node.inputs.begin(), node.inputs.end());
  const std::string name = node_name(node);
  node.saved.clear();
  node.function_slots.clear();
  node.done = true;
  release_packed(node);  // unpacking drops the host copy (torchtune: `del self.tracker[id]`)
  const std::vector<TensorId> grads = backward(incoming, std::move(saved));  // `node` not used from here
  if (torchtune) {
    after_torchtune_unpack(std::move(unpacked));  // the hook torchtune registered on this node
  }
  SIM_ASSERT(grads.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (grads[i] == kNoTensor) {
      continue;
    }
    const Var x = m_vars[inputs[i]];
    const VarId g = new_var(grads[i], x.shape, x.dtype, var_name(inputs[i]) + ".grad");
    disown(grads[i]);
    deliver(inputs[i], g);
  }
  release_parameter_uses(index);
}

}  // namespace vramsim
