#include "sim/graph/eager_tape.h"

#include <algorithm>
#include <bit>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/container/small_vector.hpp>

#include "sim/core/assert.h"
#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/training/selective_checkpoint.h"

namespace vramsim {

namespace {

[[noreturn]] void too_large(const Shape& shape, std::string_view what) {
  throw InputError(fmt::format("a tensor of shape [{}] {}: lower --batch, --seq or the model's dimensions",
                               fmt::join(shape, ", "), what));
}

}  // namespace

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    const std::optional<std::int64_t> product = checked_mul(n, d);
    if (!product) {
      too_large(shape, "has more elements than fit in 64 bits");
    }
    n = *product;
  }
  return n;
}

Bytes storage_bytes(std::int64_t elements, DType dtype, const Shape& shape) {
  const std::optional<Bytes> bytes = checked_mul(static_cast<Bytes>(elements), dtype_size_bytes(dtype));
  if (elements < 0 || !bytes || *bytes > kMaxTensorBytes) {
    too_large(shape, "would take more than 2^50 bytes (1 PiB), the most vramsim models");
  }
  return *bytes;
}

Bytes tensor_bytes(const Shape& shape, DType dtype) { return storage_bytes(numel(shape), dtype, shape); }

namespace {

// a + b with one allocation: libstdc++'s operator+(const std::string&, const char*) copies `a` at its own
// length and then grows the copy for `b`, two allocations for a name past the small-string buffer (issue 40:
// ".backward" and ".grad" appended to every backward node's and gradient's name).
std::string joined(const std::string& a, std::string_view b) {
  std::string out;
  out.reserve(a.size() + b.size());
  out.append(a).append(b);
  return out;
}

// Note [Backward FLOPs]: a matmul's backward computes two products of the forward's size (dX = dY·Wᵀ and
// dW = Xᵀ·dY), so 2x; FlashAttention's backward recomputes the scores and does four GEMMs to the forward's
// two, 2.5x in the FlashAttention-2 paper's accounting; elementwise and reduction backwards do about the
// forward's arithmetic. Only the time axis uses these (roofline estimates), never memory.
// `kind` as a string_view: its comparisons check the length first and are inlined, where std::string's
// operator==(const char*) called compare() (issue 40: five calls per backward node).
double backward_flops(std::string_view kind, double forward_flops) {
  if (kind == "mm" || kind == "addmm" || kind == "bmm" || kind == "_scaled_mm" || kind == "te._Linear") {
    return 2.0 * forward_flops;
  }
  if (kind == "_scaled_dot_product_flash_attention") {
    return 2.5 * forward_flops;
  }
  return forward_flops;
}

}  // namespace

EagerTape::EagerTape(OpGraph& graph) : m_graph(graph) {}

// ---- raw storage and references ---------------------------------------------------------------------------

OpId EagerTape::begin_op(std::string name, std::string kind, double flops) {
  Op op;
  op.name = std::move(name);
  op.kind = std::move(kind);
  op.step = m_step;
  op.micro_batch = m_micro_batch;
  op.layer = m_layer;
  op.phase = m_phase;
  op.flops = flops;
  op.stream = m_stream;
  m_current_op = m_graph.add_op(std::move(op));
  return m_current_op;
}

TensorId EagerTape::new_storage(std::string name, Bytes size_bytes, DType dtype, TensorCategory category) {
  SIM_ASSERT(m_current_op != kNoOp);
  Tensor t;
  t.name = std::move(name);
  t.size_bytes = size_bytes;
  t.dtype = dtype;
  t.category = category;
  t.producer = m_current_op;
  t.layer = m_layer;
  const TensorId id = m_graph.add_tensor(std::move(t));
  m_refs.push_back(0);
  m_freed.push_back(false);
  m_graph.op(m_current_op).bytes_moved += size_bytes;
  return id;
}

TensorId EagerTape::allocate(std::string name, Bytes size_bytes, DType dtype, TensorCategory category) {
  const TensorId s = new_storage(std::move(name), size_bytes, dtype, category);
  ref(s);
  return s;
}

void EagerTape::release(TensorId storage) { unref(storage); }

// A free inside a kernel (CUB's temporary storage after the sort) must reach the allocator before the
// kernel's next allocation, and the op graph frees at op boundaries: the rest of the kernel continues as a
// second op of the same name, kind and layer (no FLOPs of its own).
void EagerTape::run_scratch(const std::vector<ScratchStep>& steps, const std::string& name,
                            std::vector<TensorId>& live) {
  std::vector<TensorId> by_step(steps.size(), kNoTensor);
  bool freed = false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const ScratchStep& step = steps[i];
    if (step.alloc_bytes == 0) {
      const auto j = static_cast<std::size_t>(step.free_step);
      SIM_ASSERT(j < i && by_step[j] != kNoTensor);
      unref(by_step[j]);
      by_step[j] = kNoTensor;
      freed = true;
      continue;
    }
    if (freed) {
      const Op& current = m_graph.op(m_current_op);
      const std::string op_name = current.name;
      const std::string op_kind = current.kind;
      const int layer = current.layer;
      begin_op(op_name, op_kind);
      m_graph.op(m_current_op).layer = layer;
      freed = false;
    }
    by_step[i] = allocate(name, step.alloc_bytes, DType::kUInt8, TensorCategory::kTemporary);
  }
  for (TensorId t : by_step) {
    if (t != kNoTensor) {
      live.push_back(t);
    }
  }
}

void EagerTape::use(TensorId storage) {
  SIM_ASSERT(!m_freed.at(storage));
  m_graph.add_consumer(storage, m_current_op, EdgeKind::kData);
  m_graph.op(m_current_op).bytes_moved += m_graph.tensor(storage).size_bytes;
}

void EagerTape::use_once(TensorId storage) {
  const Tensor::Consumers& consumers = m_graph.tensor(storage).consumers;
  if (consumers.empty() || consumers.back() != m_current_op) {
    use(storage);
  }
}

void EagerTape::wait_for(TensorId storage) {
  SIM_ASSERT(!m_freed.at(storage));
  m_graph.add_consumer(storage, m_current_op, EdgeKind::kLifetime);
}

void EagerTape::ref(TensorId s) {
  SIM_ASSERT(!m_freed.at(s));
  ++m_refs[s];
}

void EagerTape::unref(TensorId s) {
  SIM_ASSERT(m_refs.at(s) > 0);
  if (--m_refs[s] == 0) {
    free_if_unreferenced(s);
  }
}

void EagerTape::free_if_unreferenced(TensorId s) {
  if (m_refs.at(s) != 0 || m_freed[s]) {
    return;
  }
  m_freed[s] = true;
  m_graph.add_consumer(s, m_current_op, EdgeKind::kLifetime);
}

// ---- variables --------------------------------------------------------------------------------------------

std::size_t EagerTape::ShapeHash::operator()(const Shape& s) const noexcept {
  std::size_t h = s.size();
  for (const std::int64_t d : s) {
    h = h * 1000003u ^ static_cast<std::size_t>(d);
  }
  return h;
}

const Shape* EagerTape::intern_shape(const Shape& shape) {
  if (shape.empty()) {
    return &kNoShape;
  }
  return &*m_shapes.insert(shape).first;  // no copy when it is there
}

VarId EagerTape::new_var(TensorId storage, const Shape* shape, DType dtype, std::string name) {
  Var v;
  v.storage = storage;
  v.shape = shape;
  v.dtype = dtype;
  v.name = std::move(name);
  m_vars.push_back(std::move(v));
  return static_cast<VarId>(m_vars.size() - 1);
}

VarId EagerTape::new_var_named_as_storage(TensorId storage, const Shape* shape, DType dtype) {
  const VarId v = new_var(storage, shape, dtype, std::string());
  m_vars[v].name_is_storage = true;
  return v;
}

VarId EagerTape::new_var_named_as(TensorId storage, const Shape* shape, DType dtype, VarId like) {
  const Var& l = m_vars[like];
  if (l.name_is_storage && l.storage == storage && !m_renamed.contains(storage)) {
    return new_var_named_as_storage(storage, shape, dtype);
  }
  return new_var(storage, shape, dtype, var_name(like));  // copied before m_vars grows
}

const std::string& EagerTape::var_name(VarId id) const {
  const Var& v = m_vars[id];
  if (!v.name_is_storage) {
    return v.name;
  }
  if (!m_renamed.empty()) {
    const auto it = m_renamed.find(v.storage);
    if (it != m_renamed.end() && id < it->second.vars_before) {
      return it->second.name;
    }
  }
  return m_graph.tensor(v.storage).name;
}

VarId EagerTape::parameter(const std::string& name, const Shape& shape, DType dtype,
                           std::int64_t resident_numel) {
  const std::int64_t n = resident_numel >= 0 ? resident_numel : numel(shape);
  const TensorId s = allocate(name, storage_bytes(n, dtype, shape), dtype, TensorCategory::kParameter);
  const VarId v = new_var_named_as_storage(s, intern_shape(shape), dtype);
  m_vars[v].requires_grad = true;
  m_vars[v].is_parameter = true;
  m_parameter_of_storage[s] = v;
  return v;
}

VarId EagerTape::input(const std::string& name, const Shape& shape, DType dtype) {
  const TensorId s = allocate(name, tensor_bytes(shape, dtype), dtype, TensorCategory::kInput);
  return new_var_named_as_storage(s, intern_shape(shape), dtype);
}

VarId EagerTape::received(const std::string& name, const std::string& kind, const Shape& shape, DType dtype) {
  begin_op(name, kind);
  const TensorId s = allocate(name, tensor_bytes(shape, dtype), dtype, TensorCategory::kTemporary);
  const VarId v = new_var_named_as_storage(s, intern_shape(shape), dtype);
  m_vars[v].requires_grad = true;
  return v;
}

VarId EagerTape::constant(const std::string& name, const std::string& kind, const Shape& shape, DType dtype) {
  if (m_capturing) {
    OpCall c;
    c.name = name;
    c.kind = kind;
    c.outputs = {OutputSpec{"", shape, dtype, false}};
    return capture(c).at(0);
  }
  begin_op(name, kind);
  const TensorId s = allocate(name, tensor_bytes(shape, dtype), dtype, TensorCategory::kTemporary);
  return new_var_named_as_storage(s, intern_shape(shape), dtype);
}

VarId EagerTape::view(VarId base, const Shape& shape, const std::string& name, GradRule base_grad) {
  SIM_ASSERT(numel(shape) <= numel(*m_vars[base].shape) || base_grad.kind == GradRule::Kind::kPassThrough);
  if (m_capturing) {
    OpCall c;
    c.name = name;
    c.kind = "view";
    c.inputs = {base};
    c.outputs = {OutputSpec{"", shape, m_vars[base].dtype, true}};
    c.backward.grads = {base_grad};
    return capture(c, true).at(0);
  }
  const TensorId base_storage = m_vars[base].storage;
  const bool base_requires_grad = m_vars[base].requires_grad;
  const VarId v = new_var(base_storage, intern_shape(shape), m_vars[base].dtype, name);
  ref(base_storage);
  if (m_grad_enabled && base_requires_grad) {
    Node& node = m_nodes.emplace_back();  // in place (register_node): a Node is large
    node.name = name;
    node.kind = "view";
    node.layer = m_layer;
    node.inputs = {base};
    node.rule.grads = {base_grad};
    register_node(m_nodes.size() - 1, {v});
  }
  return v;
}

VarId EagerTape::inplace(const std::string& name, const std::string& kind, VarId target,
                         const std::vector<VarId>& inputs, const BackwardRule& rule) {
  if (m_capturing) {  // functionalized: a new value of the target's shape
    OpCall c;
    c.name = name;
    c.kind = kind;
    c.inputs = {target};
    c.inputs.insert(c.inputs.end(), inputs.begin(), inputs.end());
    c.outputs = {OutputSpec{"", *m_vars[target].shape, m_vars[target].dtype, true}};
    c.backward = rule;
    return capture(c).at(0);
  }
  const OpId op = begin_op(name, kind);
  const Var& t = m_vars[target];
  use(t.storage);
  bool needs_grad = t.requires_grad;
  for (VarId in : inputs) {
    use(m_vars[in].storage);
    needs_grad = needs_grad || m_vars[in].requires_grad;
  }
  const TensorId storage = t.storage;
  const VarId v = new_var_named_as(t.storage, t.shape, t.dtype, target);
  ref(storage);
  if (needs_grad && m_grad_enabled) {
    Node& node = m_nodes.emplace_back();  // in place (register_node): a Node is large
    node.name_op = op;                    // named `name`
    node.kind = kind;
    node.layer = m_layer;
    node.inputs = {target};
    node.inputs.insert(node.inputs.end(), inputs.begin(), inputs.end());
    node.rule = rule;
    register_node(m_nodes.size() - 1, {v});
  }
  return v;
}

void EagerTape::hold(VarId v) {
  if (m_vars[v].storage != kNoTensor) {
    ref(m_vars[v].storage);
  }
}

void EagerTape::drop(VarId v) {
  if (m_vars[v].storage != kNoTensor) {
    unref(m_vars[v].storage);
  }
}

void EagerTape::save(Node& node, TensorId s) {
  if (m_replaying) {  // the early stop counts every saved tensor, packed or kept (stop_recomputation_early)
    if (m_replay_last_save != m_current_op) {
      m_replay_last_save = m_current_op;
      m_replay_saved_output = false;
    }
    m_replay_saved_output = m_replay_saved_output || m_graph.tensor(s).producer == m_current_op;
  }
  // torch.utils.checkpoint saves its inputs with _NoopSaveInputs.apply(...).save_for_backward before it
  // enters its own _checkpoint_hook (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator), so
  // the outer saved-tensor hooks pack them like any saved tensor: a checkpointed layer's input is offloaded.
  if (m_offload != ActivationOffload::kNone && offload_pack(node, s)) {
    return;
  }
  ref(s);
  node.saved.push_back(s);
  Tensor& t = m_graph.tensor(s);
  if (t.category == TensorCategory::kTemporary) {
    t.category = TensorCategory::kActivation;
    t.layer = m_layer;  // an activation belongs to the layer whose backward needs it
  }
}

int EagerTape::add_node(Node&& node, const std::vector<VarId>& outputs) {
  m_nodes.push_back(std::move(node));
  return register_node(m_nodes.size() - 1, outputs);
}

int EagerTape::register_node(std::size_t at, const std::vector<VarId>& outputs) {
  Node& node = m_nodes[at];
  node.outputs.assign(outputs.begin(), outputs.end());
  for (VarId in : node.inputs) {  // an edge to the parameter's AccumulateGrad
    if (m_vars[in].is_parameter && m_vars[in].requires_grad) {
      ++m_pending_parameter_uses[in];
      node.counts_parameter_uses = true;
    }
  }
  const int index = static_cast<int>(at);
  for (VarId o : outputs) {
    m_vars[o].requires_grad = true;
    m_vars[o].node = index;
  }
  return index;
}

std::vector<VarId> EagerTape::op(const OpCall& c) {
  if (m_capturing) {
    return capture(c);
  }
  const std::vector<VarId> params = parameters_read(c.inputs);
  if (!params.empty()) {
    m_before_parameter_use(params, true);
  }
  const bool sac_saved = m_sac.policy != nullptr &&
                         m_sac.policy->must_save(dispatch_mode_op(c.kind),
                                                 ++m_sac.occurrences[std::string(dispatch_mode_op(c.kind))]);
  std::vector<VarId> outs = sac_saved && m_sac.replay ? take_cached_outputs(c) : run_op(c, sac_saved);
  if (!params.empty()) {
    m_after_parameter_use(params, true);
  }
  return outs;
}

template <typename Ids>
std::vector<VarId> EagerTape::parameters_read(const Ids& inputs) const {
  std::vector<VarId> params;
  if (!m_before_parameter_use) {
    return params;
  }
  for (VarId in : inputs) {
    const auto it = m_parameter_of_storage.find(m_vars[in].storage);
    if (it != m_parameter_of_storage.end() &&
        std::find(params.begin(), params.end(), it->second) == params.end()) {
      params.push_back(it->second);
    }
  }
  return params;
}

std::vector<VarId> EagerTape::run_op(const OpCall& c, bool sac_saved) {
  begin_op(c.name, c.kind, c.flops);
  for (VarId in : c.inputs) {
    use(m_vars[in].storage);
  }
  std::vector<VarId> outs;
  outs.reserve(c.outputs.size());
  for (const OutputSpec& o : c.outputs) {
    std::string name = o.suffix.empty() ? c.name : c.name + "." + o.suffix;
    const TensorId s =
        allocate(std::move(name), tensor_bytes(o.shape, o.dtype), o.dtype, TensorCategory::kTemporary);
    outs.push_back(new_var_named_as_storage(s, intern_shape(o.shape), o.dtype));
    m_vars.back().order = o.order;
    m_vars.back().grad_dtype = o.grad_dtype;
  }
  run_reduce_staging(c.reduce_staging, c.name);
  std::vector<TensorId> scratch;
  for (Bytes b : c.scratch_bytes) {
    scratch.push_back(allocate(joined(c.name, ".scratch"), b, DType::kUInt8, TensorCategory::kTemporary));
  }
  add_op_node(c, outs);
  for (TensorId s : scratch) {
    unref(s);
  }
  if (sac_saved) {  // the region's forward: the policy's cache keeps the outputs for the replay
    std::vector<TensorId> cached;
    for (VarId o : outs) {
      const TensorId storage = m_vars[o].storage;
      ref(storage);
      cached.push_back(storage);
      // Kept for the backward like a saved tensor: an activation of this layer in the bill.
      Tensor& t = m_graph.tensor(storage);
      if (t.category == TensorCategory::kTemporary) {
        t.category = TensorCategory::kActivation;
        t.layer = m_layer;
      }
    }
    m_sac.cache.push_back(std::move(cached));
  }
  return outs;
}

std::vector<VarId> EagerTape::take_cached_outputs(const OpCall& c) {
  SIM_ASSERT(m_sac.next < m_sac.cache.size());
  std::vector<TensorId> cached = std::move(m_sac.cache[m_sac.next++]);
  SIM_ASSERT(cached.size() == c.outputs.size());
  begin_op(joined(c.name, ".cached"), "sac_cached");  // no kernel runs
  for (VarId in : c.inputs) {
    use(m_vars[in].storage);
  }
  std::vector<VarId> outs;
  for (std::size_t i = 0; i < cached.size(); ++i) {
    const OutputSpec& o = c.outputs[i];
    // The cache's reference becomes the output's.
    outs.push_back(new_var(cached[i], intern_shape(o.shape), o.dtype,
                           o.suffix.empty() ? c.name : c.name + "." + o.suffix));
    m_vars.back().grad_dtype = o.grad_dtype;
  }
  add_op_node(c, outs);
  return outs;
}

void EagerTape::add_op_node(const OpCall& c, const std::vector<VarId>& outs) {
  bool needs_grad = false;
  for (VarId in : c.inputs) {
    needs_grad = needs_grad || m_vars[in].requires_grad;
  }
  if (!needs_grad || !m_grad_enabled) {
    return;
  }
  // In place (register_node below): a Node is large. save() adds no node, so it is still the last.
  Node& node = m_nodes.emplace_back();
  const std::size_t index = m_nodes.size() - 1;
  if (m_current_op != kNoOp && m_graph.op(m_current_op).name == c.name) {
    node.name_op = m_current_op;  // run_op's op (take_cached_outputs' has another name)
  } else {
    node.name = c.name;
  }
  node.kind = c.kind;
  node.layer = m_layer;
  node.flops = c.flops;
  node.inputs.assign(c.inputs.begin(), c.inputs.end());
  node.rule = c.backward;
  for (int i : c.saved.inputs) {
    save(node, m_vars[c.inputs.at(static_cast<std::size_t>(i))].storage);
  }
  for (int i : c.saved.outputs) {
    save(node, m_vars[outs.at(static_cast<std::size_t>(i))].storage);
  }
  std::vector<VarId> differentiable;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (c.outputs[i].differentiable) {
      differentiable.push_back(outs[i]);
    }
  }
  SIM_ASSERT(index == m_nodes.size() - 1);
  register_node(index, differentiable);
}

// ---- autograd engine --------------------------------------------------------------------------------------

// The kernel's staging buffer and semaphores: allocated in that order, freed (semaphores first) once it has
// launched.
void EagerTape::run_reduce_staging(const ReduceStaging& staging, const std::string& name) {
  if (staging.buffer_bytes == 0) {
    return;
  }
  const TensorId buffer = allocate(joined(name, ".reduce_buffer"), staging.buffer_bytes, DType::kUInt8,
                                   TensorCategory::kTemporary);
  const TensorId semaphores = allocate(joined(name, ".reduce_semaphores"), staging.semaphore_bytes,
                                       DType::kUInt8, TensorCategory::kTemporary);
  unref(semaphores);
  unref(buffer);
}

ReduceStaging EagerTape::last_dim_reduce_staging(VarId v, Bytes acc_bytes) const {
  const Var& x = m_vars[v];
  if (x.shape->empty()) {
    return {};
  }
  Shape out = *x.shape;
  out.back() = 1;
  return cuda_reduce_staging(*x.shape, out, x.dtype, m_device, x.order, acc_bytes);
}

VarId EagerTape::new_grad(VarId like, std::string name) {
  const Var& v = m_vars[like];
  const DType dtype = v.grad_dtype.value_or(v.dtype);
  const TensorId s =
      new_storage(std::move(name), tensor_bytes(*v.shape, dtype), dtype, TensorCategory::kTemporary);
  return new_var_named_as_storage(s, v.shape, dtype);
}

// at::sum_to(full, input.sizes()): a new tensor of the input's shape, made by a CUDA reduction whose staging
// buffers (cuda_reduce.h) live for the kernel only. Takes over `full`'s reference and releases it.
VarId EagerTape::sum_to(VarId full, VarId input) {
  const Var& f = m_vars[full];
  const Var& x = m_vars[input];
  const VarId reduced = new_grad(input, joined(var_name(input), ".grad"));
  ref(m_vars[reduced].storage);
  run_reduce_staging(cuda_reduce_staging(*f.shape, *x.shape, f.dtype, m_device, f.order),
                     joined(var_name(input), ".grad"));
  unref(f.storage);
  return reduced;
}

void EagerTape::disown(TensorId s) {
  SIM_ASSERT(m_refs.at(s) > 0);
  --m_refs[s];
}

VarId EagerTape::take_grad(VarId output) {
  auto it = m_grad_buffer.find(output);
  if (it == m_grad_buffer.end()) {
    return kNoVar;
  }
  const VarId g = it->second;
  m_grad_buffer.erase(it);
  return g;  // the buffer's reference now belongs to the caller
}

void EagerTape::accumulate_grad(VarId param, VarId g) {
  store_grad(param, g);
  if (m_post_accumulate_grad) {
    m_post_accumulate_grad(param);
  }
}

void EagerTape::store_grad(VarId param, VarId g) {
  Var& p = m_vars[param];
  const Var& gv = m_vars[g];
  use(gv.storage);
  if (p.grad == kNoTensor) {
    const Tensor& gt = m_graph.tensor(gv.storage);
    const Bytes want = tensor_bytes(*p.shape, p.dtype);
    if (m_refs[gv.storage] == 0 && gv.dtype == p.dtype && gt.size_bytes == want) {
      p.grad = gv.storage;  // AccumulateGrad steals a gradient nobody else references
      m_graph.tensor(p.grad).category = TensorCategory::kGradient;
      std::string renamed = joined(var_name(param), ".grad");
      m_renamed[p.grad] = Renamed{std::move(m_graph.tensor(p.grad).name), m_vars.size()};
      m_graph.tensor(p.grad).name = std::move(renamed);
      m_graph.tensor(p.grad).layer = m_graph.tensor(p.storage).layer;
      ref(p.grad);
      return;
    }
    p.grad = allocate(joined(var_name(param), ".grad"), want, p.dtype, TensorCategory::kGradient);  // clone
    m_graph.tensor(p.grad).layer = m_graph.tensor(p.storage).layer;
  } else {
    use(p.grad);  // param.grad += new_grad, in place
  }
  free_if_unreferenced(gv.storage);
}

void EagerTape::deliver(VarId input, VarId g) {
  const Var& x = m_vars[input];
  if (!x.requires_grad) {
    free_if_unreferenced(m_vars[g].storage);
    return;
  }
  if (x.is_parameter) {
    deliver_to_parameter(input, g);
    return;
  }
  add_to_input_buffer(input, g);
}

void EagerTape::deliver_to_parameter(VarId param, VarId g) {
  if (m_pending_parameter_uses.count(param) == 0 && m_grad_buffer.count(param) == 0) {
    accumulate_grad(param, g);  // no other node sends it one (a node made outside the counted graph)
    return;
  }
  add_to_input_buffer(param, g);  // AccumulateGrad runs when the last sender has run
}

void EagerTape::release_parameter_uses(std::size_t index) {
  if (!m_nodes[index].counts_parameter_uses) {
    return;
  }
  m_nodes[index].counts_parameter_uses = false;
  const NodeIds inputs = m_nodes[index].inputs;  // copies: the hooks may add nodes
  for (VarId in : inputs) {
    const auto pending = m_pending_parameter_uses.find(in);
    if (pending == m_pending_parameter_uses.end() || --pending->second > 0) {
      continue;
    }
    m_pending_parameter_uses.erase(pending);
    const auto buffered = m_grad_buffer.find(in);
    if (buffered == m_grad_buffer.end()) {
      continue;  // no gradient reached it
    }
    const VarId g = buffered->second;
    m_grad_buffer.erase(buffered);
    disown(m_vars[g].storage);  // the input buffer's tensor moves into AccumulateGrad
    accumulate_grad(in, g);
  }
}

void EagerTape::add_to_input_buffer(VarId input, VarId g) {
  auto it = m_grad_buffer.find(input);
  if (it == m_grad_buffer.end()) {
    ref(m_vars[g].storage);
    m_grad_buffer[input] = g;
  } else {
    // InputBuffer::accumulate: reuse whichever side nobody else references, else allocate the sum.
    const VarId old = it->second;
    const TensorId old_s = m_vars[old].storage;
    const TensorId new_s = m_vars[g].storage;
    use(old_s);
    use(new_s);
    if (m_refs[old_s] == 1 && !m_vars[old].view) {
      free_if_unreferenced(new_s);
    } else if (m_refs[new_s] == 0 && !m_vars[g].view) {
      ref(new_s);
      it->second = g;
      unref(old_s);
    } else {
      const VarId sum = new_grad(input, joined(var_name(input), ".grad_sum"));
      m_vars[sum].order = m_vars[old].order;  // old_var + var: laid out as its first operand
      ref(m_vars[sum].storage);
      it->second = sum;
      unref(old_s);
      free_if_unreferenced(new_s);  // a view nobody else holds goes once the sum is made
    }
  }
}

namespace {
// The rule for input i (missing entries mean kAlloc).
template <typename NodeT>
GradRule grad_rule(const NodeT& node, std::size_t i) {
  return i < node.rule.grads.size() ? node.rule.grads[i] : GradRule{};
}
}  // namespace

void EagerTape::execute(std::size_t index) {
  // A checkpoint node's parameters are read by the ops and nodes of its replay, which run the hooks.
  std::vector<VarId> params =
      m_nodes[index].checkpoint_body ? std::vector<VarId>{} : parameters_read(m_nodes[index].inputs);
  bool reached = false;  // a gradient reached the node (else it does not run and reads nothing)
  for (std::size_t i = 0; !params.empty() && !reached && i < m_nodes[index].outputs.size(); ++i) {
    reached = m_grad_buffer.count(m_nodes[index].outputs[i]) != 0;
  }
  if (!reached) {
    params.clear();
  }
  if (!params.empty()) {
    m_before_parameter_use(params, false);
  }
  execute_node(index);
  if (!params.empty()) {
    m_after_parameter_use(params, false);
  }
}

void EagerTape::execute_node(std::size_t index) {
  Node& node = m_nodes[index];
  // A node has a few outputs and inputs: their gradients are kept in place, not on the heap (issue 40: two
  // allocations per node run).
  boost::container::small_vector<VarId, 4> grads_out;
  VarId primary = kNoVar;
  for (VarId o : node.outputs) {
    const VarId g = take_grad(o);
    grads_out.push_back(g);
    if (primary == kNoVar) {
      primary = g;
    }
  }
  if (primary == kNoVar) {
    release_parameter_uses(index);
    return;  // no gradient reached this node
  }
  const bool torchtune_unpack = node.offload == ActivationOffload::kTorchtuneStreams && !node.packed.empty();
  std::vector<TensorId> unpacked;  // unpack_from_cpu: packed.to(device, non_blocking=True)
  if (torchtune_unpack) {
    unpacked = unpack_torchtune(node);
  }
  if (node.function_backward) {
    execute_function(index, std::vector<VarId>(grads_out.begin(), grads_out.end()), std::move(unpacked));
    return;
  }
  begin_op(joined(node_name(node), ".backward"), joined(node.kind, "_backward"),
           backward_flops(node.kind, node.flops));
  m_graph.op(m_current_op).layer = node.layer;
  if (node.checkpoint_body) {
    execute_checkpoint(index, primary, std::move(unpacked));
    return;
  }
  for (VarId g : grads_out) {
    if (g != kNoVar) {
      use(m_vars[g].storage);
    }
  }
  for (TensorId s : node.saved) {
    use(s);
  }
  for (TensorId s : unpacked) {
    use(s);
  }
  for (TensorId s : torchtune_unpack ? std::vector<TensorId>{} : node.packed) {
    const std::string name =
        joined(m_graph.tensor(s).name, ".unpacked");  // copies: allocate() grows the graph
    const Bytes bytes = m_graph.tensor(s).size_bytes;
    const DType dtype = m_graph.tensor(s).dtype;
    unpacked.push_back(allocate(name, bytes, dtype, TensorCategory::kActivation));
  }
  std::vector<TensorId> temps;
  for (Bytes b : node.rule.temp_bytes) {
    temps.push_back(
        allocate(joined(node_name(node), ".backward.scratch"), b, DType::kUInt8, TensorCategory::kTemporary));
  }
  if (!node.rule.scratch_before_grads.empty()) {  // the name is built only for a rule with scratch (issue 40)
    run_scratch(node.rule.scratch_before_grads, joined(node_name(node), ".backward.scratch"), temps);
  }
  // The formulas, in the generated code's order; each result holds one reference (the returned list's).
  boost::container::small_vector<VarId, 4> computed(node.inputs.size(), kNoVar);
  const auto compute = [&](std::size_t i) {
    const VarId in = node.inputs[i];
    const GradRule rule = grad_rule(node, i);
    if (!m_vars[in].requires_grad || rule.kind == GradRule::Kind::kNone) {
      return;
    }
    const Var& p = m_vars[primary];
    const Var& x = m_vars[in];
    VarId g;
    if (rule.kind == GradRule::Kind::kPassThrough) {
      g = new_var_named_as(p.storage, rule.sum_to_input ? p.shape : x.shape,
                           rule.sum_to_input ? p.dtype : x.dtype, primary);
    } else if (rule.sum_to_input) {
      const TensorId s = new_storage(joined(var_name(in), ".grad_unreduced"), tensor_bytes(*p.shape, p.dtype),
                                     p.dtype, TensorCategory::kTemporary);
      g = new_var_named_as_storage(s, p.shape, p.dtype);
    } else {
      g = new_grad(in, joined(var_name(in), ".grad"));
    }
    // The backward of a view op is a view of the incoming gradient.
    m_vars[g].view =
        rule.view || (rule.kind == GradRule::Kind::kPassThrough && std::string_view(node.kind) == "view");
    if (rule.kind == GradRule::Kind::kPassThrough || rule.layout == GradRule::Layout::kLikeGrad) {
      m_vars[g].order = *m_vars[g].shape == *p.shape ? p.order : MemoryOrder::kContiguous;
    } else if (rule.layout == GradRule::Layout::kLastDimOutermost) {
      m_vars[g].order = MemoryOrder::kLastDimOutermost;
    }
    ref(m_vars[g].storage);
    computed[i] = g;
    if (m_backward_workspace_bytes > 0 && (node.kind == "mm" || node.kind == "addmm" || node.kind == "bmm")) {
      allocate("cublas_workspace.autograd_thread", m_backward_workspace_bytes, DType::kUInt8,
               TensorCategory::kWorkspace);  // referenced by the cuBLAS handle until the process ends
      m_backward_workspace_bytes = 0;
    }
  };
  if (node.rule.order.empty()) {
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      compute(i);
    }
  } else {
    SIM_ASSERT(node.rule.order.size() == node.inputs.size());
    for (int i : node.rule.order) {
      compute(static_cast<std::size_t>(i));
    }
  }
  const bool strided_grad = m_vars[primary].order != MemoryOrder::kContiguous;
  const std::vector<ScratchStep>& scratch_after =
      strided_grad && !node.rule.scratch_after_grads_strided.empty() ? node.rule.scratch_after_grads_strided
                                                                     : node.rule.scratch_after_grads;
  if (!scratch_after.empty()) {
    run_scratch(scratch_after, joined(node_name(node), ".backward.scratch"), temps);
  }
  for (TensorId s : temps) {
    unref(s);
  }
  // Engine::validate_outputs: broadcast gradients summed to their input's shape, in input order.
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    const GradRule rule = grad_rule(node, i);
    if (computed[i] != kNoVar && rule.sum_to_input) {
      computed[i] = sum_to(computed[i], node.inputs[i]);
    }
  }
  for (VarId g : grads_out) {
    if (g != kNoVar) {
      unref(m_vars[g].storage);
    }
  }
  for (TensorId s : node.saved) {
    unref(s);
  }
  if (torchtune_unpack) {
    after_torchtune_unpack(std::move(unpacked));  // the node's hook
  } else {
    for (TensorId s : unpacked) {
      unref(s);
    }
  }
  release_packed(node);
  // The outputs go to the next nodes' input buffers (or AccumulateGrad), in input order.
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    if (computed[i] != kNoVar) {
      disown(m_vars[computed[i]].storage);
      deliver(node.inputs[i], computed[i]);
    }
  }
  node.saved.clear();
  node.done = true;
  release_parameter_uses(index);
}

// Note [Checkpoint backward]: torch.utils.checkpoint's backward detaches the saved input into a fresh leaf
// that requires grad, replays the body with grad on (its intermediates are saved as usual), runs backward
// over that replayed graph from the incoming gradient, and hands the leaf's gradient on as the input's
// gradient.
//
// An input packed by saved-tensor hooks (save_on_cpu, torchtune's OffloadActivations) comes back as a GPU
// copy before the replay: save_on_cpu's unpack allocates it here; torchtune's (`unpacked`, in the node's pack
// order) was made on its side stream or is the forward stash's own tensor.
void EagerTape::execute_checkpoint(std::size_t index, VarId grad_out, std::vector<TensorId> unpacked) {
  const std::vector<VarId> inputs(m_nodes[index].inputs.begin(), m_nodes[index].inputs.end());
  const CheckpointBody body = m_nodes[index].checkpoint_body;
  const std::string name = node_name(m_nodes[index]);
  const bool torchtune_unpack = m_nodes[index].offload == ActivationOffload::kTorchtuneStreams;
  const std::vector<TensorId> packed = m_nodes[index].packed;
  if (!torchtune_unpack) {
    for (TensorId p : packed) {
      const Tensor& t = m_graph.tensor(p);
      const std::string unpacked_name = joined(t.name, ".unpacked");  // copies: allocate() grows the graph
      const Bytes bytes = t.size_bytes;
      const DType dtype = t.dtype;
      unpacked.push_back(allocate(unpacked_name, bytes, dtype, TensorCategory::kActivation));
    }
  }
  SIM_ASSERT(unpacked.size() == packed.size());
  std::vector<VarId> leaves;
  for (VarId in : inputs) {
    TensorId s = m_vars[in].storage;
    const auto was_packed = std::find(packed.begin(), packed.end(), s);
    if (was_packed != packed.end()) {
      s = unpacked[static_cast<std::size_t>(was_packed - packed.begin())];
    }
    use(s);
    const VarId x = new_var(s, m_vars[in].shape, m_vars[in].dtype, joined(name, ".input"));
    ref(s);
    m_vars[x].requires_grad = m_vars[in].requires_grad;
    m_vars[x].grad_dtype = m_vars[in].grad_dtype;
    leaves.push_back(x);
  }
  const bool was_enabled = m_grad_enabled;
  m_grad_enabled = true;
  const std::size_t begin = m_nodes.size();
  m_sac = SacRegion{m_nodes[index].sac, true, {}, std::move(m_nodes[index].sac_cache), 0};
  m_nodes[index].sac_cache.clear();
  const CheckpointRecompute recompute = m_nodes[index].recompute;
  const auto ops_begin = static_cast<OpId>(m_graph.op_count());
  const auto tensors_begin = static_cast<TensorId>(m_graph.tensors().size());
  m_replaying = true;
  m_replay_last_save = kNoOp;
  const VarId y = body(leaves);
  m_replaying = false;
  SIM_ASSERT(m_sac.next == m_sac.cache.size());  // the policy decided alike in the forward and the replay
  m_sac = SacRegion{};
  if (recompute == CheckpointRecompute::kEarlyStop) {
    stop_recomputation_early(ops_begin, tensors_begin);
  }
  deliver(y, grad_out);
  unref(m_vars[grad_out].storage);  // the checkpoint node's incoming reference
  if (recompute != CheckpointRecompute::kKeepOutputs) {
    drop(y);  // non-reentrant: nothing holds the recomputed output once the recomputation returns
  }
  run_nodes(begin, m_nodes.size());
  release_nodes(begin, m_nodes.size());
  m_grad_enabled = was_enabled;
  if (recompute == CheckpointRecompute::kKeepOutputs) {
    drop(y);  // reentrant: `outputs` lived through the region's backward
  }
  std::vector<VarId> leaf_grads;
  for (VarId x : leaves) {
    leaf_grads.push_back(take_grad(x));  // a leaf's gradient stays in the buffer: no node consumes it
    drop(x);
  }
  for (TensorId s : m_nodes[index].saved) {
    unref(s);
  }
  m_nodes[index].saved.clear();
  if (torchtune_unpack) {
    after_torchtune_unpack(std::move(unpacked));  // the node's hook
  } else {
    for (TensorId s : unpacked) {
      unref(s);
    }
  }
  release_packed(m_nodes[index]);
  m_nodes[index].done = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (leaf_grads[i] == kNoVar) {
      continue;
    }
    const TensorId gs = m_vars[leaf_grads[i]].storage;
    const VarId g = new_var_named_as(gs, m_vars[inputs[i]].shape, m_vars[leaf_grads[i]].dtype, leaf_grads[i]);
    deliver(inputs[i], g);
    unref(gs);
  }
  release_parameter_uses(index);
}

void EagerTape::stop_recomputation_early(OpId ops_begin, TensorId tensors_begin) {
  if (m_replay_last_save == kNoOp) {
    return;  // nothing saved: no tensor to wait for (PyTorch would not even have started the replay)
  }
  // torch/utils/checkpoint.py, _checkpoint_hook's pack_hook during the recomputation: once the count of
  // recomputed tensors reaches the forward's, `raise _StopRecomputationError`. Autograd packs an op's saved
  // inputs before its kernel runs and its saved outputs after, so an op that saved an output ran.
  const OpId stop = m_replay_saved_output ? m_replay_last_save + 1 : m_replay_last_save;
  for (TensorId t = tensors_begin; t < static_cast<TensorId>(m_graph.tensors().size()); ++t) {
    Tensor& x = m_graph.tensor(t);
    // Only what the region's own ops make: collectives a data-parallel hook issued stay as they are.
    const bool computed =
        x.category == TensorCategory::kTemporary || x.category == TensorCategory::kActivation;
    if (x.producer != kNoOp && x.producer >= stop && computed) {
      x.size_bytes = 0;
    }
  }
  for (OpId op = std::max(stop, ops_begin); op < static_cast<OpId>(m_graph.op_count()); ++op) {
    if (m_graph.op(op).comm_bytes == 0) {
      m_graph.op(op).flops = 0.0;
      m_graph.op(op).bytes_moved = 0;
    }
  }
}

void EagerTape::run_nodes(std::size_t begin, std::size_t end, bool layer_hooks) {
  const bool hooks = layer_hooks && m_enter_layer && m_leave_layer;
  bool inside = false;
  int layer = -1;
  for (std::size_t i = end; i-- > begin;) {
    if (m_nodes[i].done) {
      continue;
    }
    if (hooks && (!inside || m_nodes[i].layer != layer)) {
      if (inside) {
        m_leave_layer(layer);
      }
      layer = m_nodes[i].layer;
      inside = true;
      m_enter_layer(layer);
    }
    execute(i);
  }
  if (inside) {
    m_leave_layer(layer);
  }
}

void EagerTape::release_nodes(std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end && i < m_nodes.size(); ++i) {
    Node& n = m_nodes[i];
    for (TensorId s : n.saved) {
      unref(s);
    }
    n.saved.clear();
    for (const std::vector<TensorId>& outputs : n.sac_cache) {
      for (TensorId s : outputs) {
        unref(s);
      }
    }
    n.sac_cache.clear();
    release_packed(n);
    n.done = true;
    n.checkpoint_body = nullptr;
    n.function_backward = nullptr;
    release_parameter_uses(i);
  }
}

// The pack hook; false: the tensor is saved as it is (torchtune keeps parameters and tensors under 1 KiB).
bool EagerTape::offload_pack(Node& node, TensorId s) {
  const Tensor& t = m_graph.tensor(s);
  if (m_offload == ActivationOffload::kTorchtuneStreams) {
    constexpr Bytes kMinOffloadBytes = 1024;       // min_offload_size
    constexpr std::uint64_t kMaxFwdStashSize = 5;  // max_fwd_stash_size
    const std::uint64_t id = ++m_pack_id;          // every saved tensor gets one
    if (t.size_bytes < kMinOffloadBytes || t.category == TensorCategory::kParameter) {
      return false;
    }
    while (!m_fwd_stash.empty() && m_fwd_stash.front().first + kMaxFwdStashSize <= id) {
      unref(m_fwd_stash.front().second);  // s0.wait_event(ev); del self.fwd_stash[id]
      m_fwd_stash.pop_front();
    }
    ref(s);
    m_fwd_stash.emplace_back(id, s);
  }
  use(s);  // packed.copy_(tensor) reads it now
  node.packed.push_back(s);
  node.offload = m_offload;
  m_pinned_host.allocate(t.size_bytes);
  return true;
}

std::vector<TensorId> EagerTape::unpack_torchtune(const Node& node) {
  std::vector<TensorId> unpacked;
  const StreamId stream = m_stream;
  m_stream = kOffloadStream;
  begin_op(joined(node_name(node), ".unpack_from_cpu"), "copy_");
  for (TensorId s : node.packed) {
    const auto stashed = std::find_if(m_fwd_stash.begin(), m_fwd_stash.end(),
                                      [s](const auto& entry) { return entry.second == s; });
    if (stashed != m_fwd_stash.end()) {  // still on the GPU: the stash's tensor is returned
      ref(s);
      unpacked.push_back(s);
      continue;
    }
    const Tensor& t = m_graph.tensor(s);
    unpacked.push_back(
        allocate(joined(t.name, ".unpacked"), t.size_bytes, t.dtype, TensorCategory::kActivation));
  }
  m_stream = stream;
  return unpacked;
}

void EagerTape::after_torchtune_unpack(std::vector<TensorId> unpacked) {
  for (const auto& [id, s] : m_fwd_stash) {
    (void)id;
    unref(s);
  }
  m_fwd_stash.clear();
  for (TensorId s : m_bwd_stash) {
    unref(s);
  }
  m_bwd_stash = std::move(unpacked);
}

void EagerTape::release_offload_stashes() { after_torchtune_unpack({}); }

void EagerTape::release_packed(Node& node) {
  for (TensorId s : node.packed) {
    m_pinned_host.free(m_graph.tensor(s).size_bytes);
  }
  node.packed.clear();
}

void PinnedHostUsage::allocate(Bytes size_bytes) {
  live_bytes += size_bytes;
  peak_bytes = std::max(peak_bytes, live_bytes);
  // CachingHostAllocator::allocate rounds to c10::llvm::PowerOf2Ceil and serves a request from the free
  // blocks of that size first, so it holds, per size, the most blocks ever in use at once.
  const Bytes block = std::bit_ceil(std::max<Bytes>(size_bytes, 1));
  int& live = m_live_blocks[block];
  int& most = m_most_blocks[block];
  ++live;
  if (live > most) {
    ++most;
    reserved_bytes += block;
  }
}

void PinnedHostUsage::free(Bytes size_bytes) {
  live_bytes -= size_bytes;
  --m_live_blocks[std::bit_ceil(std::max<Bytes>(size_bytes, 1))];
}

void EagerTape::backward(VarId loss) {
  std::size_t begin = 0;
  while (begin < m_nodes.size() && m_nodes[begin].done) {
    ++begin;
  }
  backward(loss, begin, m_nodes.size(), "loss.backward.grad_seed", "ones_like");
}

// The engine's dependencies are those of this graph task: the nodes it will run (GraphTask's
// compute_dependencies), not another micro-batch's graph still waiting for its own backward.
void EagerTape::count_parameter_uses(VarId root, std::size_t begin, std::size_t end) {
  SIM_ASSERT(m_vars[root].requires_grad && begin <= end && end <= m_nodes.size());
  m_pending_parameter_uses.clear();
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    Node& n = m_nodes[i];
    n.counts_parameter_uses = i >= begin && i < end && !n.done;
    for (VarId in : n.counts_parameter_uses ? n.inputs : NodeIds{}) {
      if (m_vars[in].is_parameter && m_vars[in].requires_grad) {
        ++m_pending_parameter_uses[in];
      }
    }
  }
}

void EagerTape::backward(VarId root, std::size_t begin, std::size_t end, const std::string& seed_name,
                         const std::string& seed_kind) {
  count_parameter_uses(root, begin, end);
  begin_op(seed_name, seed_kind);
  const VarId seed = new_grad(root, seed_name);
  deliver(root, seed);
  finish_backward(begin, end, kNoVar);
}

TensorId EagerTape::backward_keeping_leaf_grad(VarId root, std::size_t begin, std::size_t end, VarId seed,
                                               VarId leaf) {
  count_parameter_uses(root, begin, end);
  if (seed == kNoVar) {
    begin_op("loss.backward.grad_seed", "ones_like");
    deliver(root, new_grad(root, "loss.backward.grad_seed"));
  } else {  // the caller's reference keeps the seed: the nodes that consume it release theirs only
    begin_op("pipeline.recv_backward", "recv");
    use(m_vars[seed].storage);
    deliver(root, seed);
  }
  return finish_backward(begin, end, leaf);
}

// Runs the nodes [begin, end) and releases them; the gradients no node consumed (outputs of unreached
// nodes, leaves' gradients) are freed, except `leaf`'s, whose reference goes to the caller.
TensorId EagerTape::finish_backward(std::size_t begin, std::size_t end, VarId leaf) {
  run_nodes(begin, end, /*layer_hooks=*/true);
  release_offload_stashes();
  release_nodes(begin, end);
  TensorId kept = kNoTensor;
  for (auto& [var, g] : m_grad_buffer) {
    if (var == leaf && leaf != kNoVar) {
      kept = m_vars[g].storage;
      continue;
    }
    unref(m_vars[g].storage);
  }
  m_grad_buffer.clear();
  return kept;
}

VarId EagerTape::checkpoint(const std::string& name, const std::vector<VarId>& inputs,
                            const CheckpointBody& body, const SelectiveCheckpointPolicy* sac,
                            std::size_t tensor_args) {
  bool any_requires_grad = false;
  for (VarId in : inputs) {
    any_requires_grad = any_requires_grad || m_vars[in].requires_grad;
  }
  if (!m_grad_enabled || (!any_requires_grad && m_capturing)) {
    return body(inputs);
  }
  if (m_capturing) {
    // Dynamo traces through the checkpoint: its ops are tagged for recomputation (a selective policy's saved
    // ops MUST_SAVE), except the last, whose output the partitioner may save (cleanup_recompute_tags).
    const bool outer = m_capture_recompute;
    const SelectiveCheckpointPolicy* outer_sac = m_capture_sac;
    m_capture_recompute = true;
    m_capture_sac = sac;
    m_capture_sac_occurrences.clear();
    const VarId out = body(inputs);
    m_capture_recompute = outer;
    m_capture_sac = outer_sac;
    if (!m_captured.empty()) {
      m_captured.back().must_recompute = outer;
    }
    return out;
  }
  m_grad_enabled = false;
  SIM_ASSERT(m_sac.policy == nullptr);  // checkpointed regions do not nest here
  m_sac = SacRegion{sac, false, {}, {}, 0};
  const auto body_begin = static_cast<OpId>(m_graph.op_count());
  const VarId out = body(inputs);
  std::vector<std::vector<TensorId>> cache = std::move(m_sac.cache);
  m_sac = SacRegion{};
  m_grad_enabled = true;
  // No input requires grad (a first decoder layer over frozen embeddings): the region's own trainable
  // parameters (LoRA adapters) still give it a gradient, and torch.utils.checkpoint still discards what it
  // saves and recomputes it in backward (_checkpoint_without_reentrant_generator packs every saved tensor,
  // whatever the inputs). Without trainable parameters nothing in the region is recorded, checkpointed or
  // not.
  const auto reads_trainable_parameter = [this](OpId since) {
    for (const auto& [storage, param] : m_parameter_of_storage) {
      const Tensor::Consumers& consumers = m_graph.tensor(storage).consumers;
      if (m_vars[param].requires_grad && !consumers.empty() && consumers.back() >= since) {
        return true;
      }
    }
    return false;
  };
  if (!any_requires_grad && !reads_trainable_parameter(body_begin)) {
    for (const std::vector<TensorId>& cached : cache) {
      for (TensorId t : cached) {
        unref(t);
      }
    }
    return out;
  }
  Node node;
  node.name = name;
  node.kind = "checkpoint";
  node.sac = sac;
  node.sac_cache = std::move(cache);
  node.layer = m_layer;
  node.inputs.assign(inputs.begin(), inputs.end());
  node.checkpoint_body = body;
  node.recompute = m_checkpoint_recompute;
  const ActivationOffload hooks = m_offload;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    m_offload = i < tensor_args ? hooks : ActivationOffload::kNone;  // ctx keeps the rest as they are
    save(node, m_vars[inputs[i]].storage);
  }
  m_offload = hooks;
  add_node(std::move(node), {out});
  return out;
}

void EagerTape::set_grad_to_none(VarId param) {
  Var& p = m_vars[param];
  if (p.grad != kNoTensor) {
    use(p.grad);
    unref(p.grad);
    p.grad = kNoTensor;
  }
}

TensorId EagerTape::detach_grad(VarId param) {
  Var& p = m_vars[param];
  const TensorId g = p.grad;
  p.grad = kNoTensor;
  return g;
}

void EagerTape::attach_grad(VarId param, TensorId storage) {
  Var& p = m_vars[param];
  SIM_ASSERT(p.grad == kNoTensor);
  p.grad = storage;
}

void EagerTape::finish() {
  for (TensorId id = 0; id < m_graph.tensors().size(); ++id) {
    if (!m_freed[id]) {
      m_graph.tensor(id).persistent = true;
    }
  }
}

}  // namespace vramsim
