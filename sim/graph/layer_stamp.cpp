#include "sim/graph/layer_stamp.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/core/assert.h"

namespace vramsim {

namespace {

std::atomic<bool> g_stamping{true};
std::atomic<std::uint64_t> g_stamped{0};

// The fields of Op, Tensor and EagerTape::Var that the template encodes: a new field must be added to the
// encoding (and to these sizes), or stamping would drop it. The sizes are those of a 64-bit libstdc++ build
// (the CLI's and CI's); a 32-bit target such as the WebAssembly page lays the same fields out smaller.
#if defined(__GLIBCXX__) && UINTPTR_MAX == UINT64_MAX
static_assert(sizeof(Op) == 120, "Op changed: encode its new field in LayerStamp::Template");
static_assert(sizeof(Tensor) == 120, "Tensor changed: encode its new field in LayerStamp::Template");
#endif

// A name with the layer's "layers.<l>." cut out: head + "layers.<l>." + tail when `layered`.
struct NameCode {
  std::string head;
  std::string tail;
  bool layered = false;
  bool operator==(const NameCode&) const = default;
};

std::string layer_token(int layer) { return "layers." + std::to_string(layer) + "."; }

NameCode encode_name(const std::string& name, const std::string& token) {
  NameCode c;
  const std::size_t pos = name.find(token);
  if (pos == std::string::npos) {
    c.head = name;
    return c;
  }
  c.head = name.substr(0, pos);
  c.tail = name.substr(pos + token.size());
  c.layered = true;
  return c;
}

std::string decode_name(const NameCode& c, const std::string& token) {
  if (!c.layered) {
    return c.head;
  }
  std::string out;
  out.reserve(c.head.size() + token.size() + c.tail.size());
  out += c.head;
  out += token;
  out += c.tail;
  return out;
}

// An id in the region: relative to the region's start (kInternal), an index into the externals
// (kExternal), or the value itself (kLiteral: ids that are not the region's, kNo* included).
struct Ref {
  enum class Kind : std::uint8_t { kInternal, kExternal, kLiteral };
  Kind kind = Kind::kLiteral;
  std::uint32_t value = 0;
  bool operator==(const Ref&) const = default;
};

// A layer number: relative to the layer being run (a tensor of the previous layer is -1), or -1 itself
// (outside the layers).
struct LayerCode {
  bool relative = false;
  int value = -1;
  bool operator==(const LayerCode&) const = default;
};

LayerCode encode_layer(int value, int layer) {
  return value >= 0 ? LayerCode{true, value - layer} : LayerCode{false, value};
}
int decode_layer(const LayerCode& c, int layer) { return c.relative ? layer + c.value : c.value; }

// A backward rule, compared field by field (its structs have no operator==).
bool same_steps(const std::vector<ScratchStep>& a, const std::vector<ScratchStep>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const ScratchStep& x, const ScratchStep& y) {
    return x.alloc_bytes == y.alloc_bytes && x.free_step == y.free_step;
  });
}
bool same_rule(const BackwardRule& a, const BackwardRule& b) {
  const auto same_grad = [](const GradRule& x, const GradRule& y) {
    return x.kind == y.kind && x.sum_to_input == y.sum_to_input && x.view == y.view && x.layout == y.layout;
  };
  return std::equal(a.grads.begin(), a.grads.end(), b.grads.begin(), b.grads.end(), same_grad) &&
         a.temp_bytes == b.temp_bytes && a.order == b.order &&
         same_steps(a.scratch_before_grads, b.scratch_before_grads) &&
         same_steps(a.scratch_after_grads, b.scratch_after_grads) &&
         same_steps(a.scratch_after_grads_strided, b.scratch_after_grads_strided);
}
struct RuleCode {
  BackwardRule rule;
  bool operator==(const RuleCode& o) const { return same_rule(rule, o.rule); }
};
static_assert(sizeof(GradRule) == 4, "GradRule changed: compare its new field in same_rule");
static_assert(sizeof(ScratchStep) == 16, "ScratchStep changed: compare its new field in same_steps");

}  // namespace

// An external variable as the region's code sees it: requires_grad, is_parameter, has a grad_fn, view,
// dtype, gradient dtype, shape (kNoVar: all defaults).
using VarState = std::tuple<bool, bool, bool, bool, DType, std::optional<DType>, Shape>;

namespace {
template <typename Vars>
std::vector<VarState> var_states(const Vars& all, const std::vector<VarId>& vars) {
  std::vector<VarState> out;
  out.reserve(vars.size());
  for (const VarId v : vars) {
    if (v == kNoVar) {
      out.emplace_back();
      continue;
    }
    const auto& x = all[v];
    out.emplace_back(x.requires_grad, x.is_parameter, x.node >= 0, x.view, x.dtype, x.grad_dtype, *x.shape);
  }
  return out;
}

// var_states(all, vars) == states, without copying the shapes (issue 40: one copy per stamped layer and
// external).
template <typename Vars>
bool same_var_states(const Vars& all, const std::vector<VarId>& vars, const std::vector<VarState>& states) {
  if (vars.size() != states.size()) {
    return false;
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (vars[i] == kNoVar) {
      if (states[i] != VarState{}) {
        return false;
      }
      continue;
    }
    const auto& x = all[vars[i]];
    const auto& [requires_grad, is_parameter, has_node, view, dtype, grad_dtype, shape] = states[i];
    if (x.requires_grad != requires_grad || x.is_parameter != is_parameter || (x.node >= 0) != has_node ||
        x.view != view || x.dtype != dtype || x.grad_dtype != grad_dtype || *x.shape != shape) {
      return false;
    }
  }
  return true;
}
}  // namespace

struct LayerStamp::Template {
  struct OpCode {
    NameCode name;
    std::string kind;
    int step = 0;
    int micro_batch = 0;
    LayerCode layer;
    Phase phase = Phase::kForward;
    double flops = 0.0;
    Bytes bytes_moved = 0;
    StreamId stream = 0;
    Ref host_waits_for;
    Ref stream_waits_for;
    Bytes comm_bytes = 0;
    bool operator==(const OpCode&) const = default;
  };
  struct TensorCode {
    NameCode name;
    Bytes size_bytes = 0;
    DType dtype = DType::kFloat32;
    TensorCategory category = TensorCategory::kTemporary;
    std::uint32_t producer = 0;         // relative op
    bool consumed_by_producer = false;  // consumers[0] == producer (a consumer without an edge)
    bool persistent = false;
    LayerCode layer;
    StreamId record_stream = kNoRecordStream;
    bool graph_pool = false;
    int refs = 0;  // the tape's reference count at the region's end
    bool freed = false;
    bool operator==(const TensorCode&) const = default;
  };
  struct EdgeCode {
    Ref tensor;            // kInternal or kExternal
    std::uint32_t op = 0;  // relative consumer op
    EdgeKind kind = EdgeKind::kData;
    bool operator==(const EdgeCode&) const = default;
  };
  struct VarCode {
    Ref storage;
    const Shape* shape =
        nullptr;  // interned by the tape (Note [Interned shapes]): equal pointers, equal shapes
    DType dtype = DType::kFloat32;
    std::optional<DType> grad_dtype;
    bool requires_grad = false;
    bool is_parameter = false;
    bool view = false;
    MemoryOrder order = MemoryOrder::kContiguous;
    Ref node;                      // kInternal (relative node) or kLiteral -1
    NameCode name;                 // empty when name_is_storage
    bool name_is_storage = false;  // Note [Names shared with the graph] (eager_tape.h)
    bool operator==(const VarCode&) const = default;
  };
  // An autograd node the region recorded (grad mode on).
  struct NodeCode {
    NameCode name;  // empty when named by an op
    Ref name_op;    // the op whose name is the node's (kInternal), or kLiteral kNoOp
    std::string kind;
    LayerCode layer;
    double flops = 0.0;
    std::vector<Ref> inputs;  // variables: kInternal or kExternal
    std::vector<Ref> outputs;
    std::vector<Ref> saved;  // storages
    ActivationOffload offload = ActivationOffload::kNone;
    RuleCode rule;
    bool done = false;
    bool operator==(const NodeCode&) const = default;
  };
  // A tensor that existed before the region and whose fields the region changed (autograd saving the
  // layer's input): the state it must be in, and the state it is left in.
  struct ExternalChange {
    std::uint32_t index = 0;  // into the externals
    int refs_delta = 0;
    bool fields_changed = false;  // else `before` and `after` are not kept (and not checked)
    std::tuple<TensorCategory, LayerCode, bool, StreamId, bool> before{}, after{};
    bool operator==(const ExternalChange&) const = default;
  };
  std::vector<OpCode> ops;
  std::vector<TensorCode> tensors;
  std::vector<EdgeCode> edges;
  std::vector<VarCode> vars;
  std::vector<NodeCode> nodes;
  std::vector<ExternalChange> changes;
  // What the region saw of its external variables at its start: the code takes other roads for an input
  // that does not require grad (a first layer over frozen embeddings) or a frozen weight.
  std::vector<VarState> external_states;
  std::uint32_t output = 0;  // relative variable
  Ref current_op;            // the tape's current op at the region's end
  // Inside a checkpoint's replay: the last op that saved a tensor, and whether it saved its own output (the
  // tape's early-stop tracking, EagerTape::save), as the region left it.
  Ref replay_last_save;
  bool replay_saved_output = false;
  std::size_t externals = 0;
  bool operator==(const Template&) const = default;
};

// What a region must leave as it found it (or only append to, or change only in its externals).
using TensorFields = std::tuple<TensorCategory, int, bool, StreamId, bool>;
using VarFields = std::tuple<TensorId, TensorId, int, bool, MemoryOrder>;

// Note [Only live tensors can change]
// A region may change tensors that existed before it (references, the fields autograd's saving sets), and
// encode() must see every such change. A freed tensor cannot change: EagerTape::ref() and unref() assert
// that it is not freed and has references, it was freed with none, and nothing un-frees it. So a snapshot
// keeps the live tensors only (tens of thousands of tensors in a long step, a few thousand live): the
// tape's freed flags are walked once, incrementally (LiveIndex), instead of copying every tensor's state
// at every recorded layer, which made recording quadratic in the step's length (issue 40: 22 % of a
// 16-micro-batch plan). The variables compared are the region's externals (every variable the layer's
// code is handed; the others are not reachable from it). With expensive_checks() (sim/core/assert.h) the
// whole tape is also copied and compared as before, and both verdicts must agree (LayerStamp::encode).
struct LayerStamp::Before {
  std::size_t ops = 0, tensors = 0, edges = 0, vars = 0, nodes = 0;
  std::vector<TensorId> live;  // tensors not freed, in id order
  std::vector<int> live_refs;  // their references, as `live`
  std::vector<TensorFields>
      live_fields;  // per live tensor: category, layer, persistent, record_stream, graph_pool
  std::vector<VarFields>
      external_var_fields;  // per external variable: storage, grad, node, requires_grad, order
  std::unordered_map<VarId, int> pending_parameter_uses;
  OpId current_op = kNoOp;
  std::tuple<Bytes, OpId, OpId, Bytes> current_op_fields{};
  // the tape's other state, by size or value
  std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::uint64_t, std::size_t, std::size_t,
             Bytes, std::size_t, int, int, int, Phase, StreamId, bool, ActivationOffload>
      tape_state{};
  // the whole tape, as the snapshot kept it before Note [Only live tensors can change]; filled only under
  // expensive_checks()
  std::vector<int> refs;
  std::vector<bool> freed;
  std::vector<TensorFields> tensor_fields;
  std::vector<VarFields> var_fields;
};

namespace {

// The live tensors of one LayerStamp's tape, brought up to date at each snapshot: the tensors added since
// the last one are appended, those freed since are dropped (ids only grow, a freed tensor stays freed).
// Kept beside the LayerStamp (per thread: a stamp is made, used and destroyed by one thread).
struct LiveIndex {
  std::size_t scanned = 0;
  std::vector<TensorId> live;
};
thread_local std::unordered_map<const LayerStamp*, LiveIndex> t_live_index;

TensorFields tensor_fields_of(const Tensor& x) {
  return {x.category, x.layer, x.persistent, x.record_stream, x.graph_pool};
}

template <typename Vars>
std::vector<VarFields> var_fields_of(const Vars& all, const std::vector<VarId>& vars) {
  std::vector<VarFields> out;
  out.reserve(vars.size());
  for (const VarId id : vars) {
    if (id == kNoVar) {
      out.emplace_back();
      continue;
    }
    const auto& v = all[id];
    out.emplace_back(v.storage, v.grad, v.node, v.requires_grad, v.order);
  }
  return out;
}

}  // namespace

void set_layer_stamping(bool on) { g_stamping.store(on); }
bool layer_stamping() { return g_stamping.load(); }
std::uint64_t layers_stamped() { return g_stamped.load(); }

LayerStamp::LayerStamp(EagerTape& tape) : m_tape(tape) { t_live_index.erase(this); }
LayerStamp::~LayerStamp() { t_live_index.erase(this); }

void LayerStamp::reset() { m_classes.clear(); }

// A layer's forward under no_grad, its forward with autograd and its recomputation in backward are
// different regions, and so are the regions of different steps and micro-batches (a pipeline schedule
// interleaves micro-batches): never stamped from one another.
LayerStamp::ClassKey LayerStamp::class_key(int key) const {
  return {key, m_tape.m_grad_enabled, m_tape.m_phase, m_tape.m_step, m_tape.m_micro_batch};
}

void LayerStamp::discard(int key) {
  Class& c = m_classes[class_key(key)];
  c.last = nullptr;
  c.verified = false;
  c.recorded = kMaxRecorded;
}

bool LayerStamp::eligible() const {
  const EagerTape& t = m_tape;
  return layer_stamping() && !t.m_capturing && !t.m_before_parameter_use && t.m_sac.policy == nullptr &&
         (!t.m_grad_enabled || t.m_offload == ActivationOffload::kNone);
}

LayerStamp::Before LayerStamp::snapshot() const {
  const EagerTape& t = m_tape;
  const OpGraph& g = t.m_graph;
  Before b;
  b.ops = g.op_count();
  b.tensors = g.tensors().size();
  b.edges = g.edges().size();
  b.vars = t.m_vars.size();
  b.nodes = t.m_nodes.size();
  LiveIndex& index = t_live_index[this];
  SIM_ASSERT(index.scanned <= b.tensors);
  std::erase_if(index.live, [&](TensorId id) { return t.m_freed[id]; });
  for (std::size_t i = index.scanned; i < b.tensors; ++i) {
    if (!t.m_freed[i]) {
      index.live.push_back(static_cast<TensorId>(i));
    }
  }
  index.scanned = b.tensors;
  b.live = index.live;
  b.live_refs.reserve(b.live.size());
  b.live_fields.reserve(b.live.size());
  for (const TensorId id : b.live) {
    b.live_refs.push_back(t.m_refs[id]);
    b.live_fields.push_back(tensor_fields_of(g.tensor(id)));
  }
  if (expensive_checks()) {
    b.refs = t.m_refs;
    b.freed = t.m_freed;
    b.tensor_fields.reserve(b.tensors);
    for (const Tensor& x : g.tensors()) {
      b.tensor_fields.push_back(tensor_fields_of(x));
    }
    b.var_fields.reserve(b.vars);
    for (std::size_t i = 0; i < t.m_vars.size(); ++i) {
      const EagerTape::Var& v = t.m_vars[i];
      b.var_fields.emplace_back(v.storage, v.grad, v.node, v.requires_grad, v.order);
    }
  }
  b.pending_parameter_uses = t.m_pending_parameter_uses;
  b.current_op = t.m_current_op;
  if (b.current_op != kNoOp) {
    const Op& op = g.op(b.current_op);
    b.current_op_fields = {op.bytes_moved, op.host_waits_for, op.stream_waits_for, op.comm_bytes};
  }
  b.tape_state = {t.m_grad_buffer.size(),
                  t.m_parameter_of_storage.size(),
                  t.m_sac.cache.size(),
                  t.m_sac.occurrences.size(),
                  t.m_pack_id,
                  t.m_fwd_stash.size(),
                  t.m_bwd_stash.size(),
                  t.m_backward_workspace_bytes,
                  t.m_captured.size(),
                  t.m_step,
                  t.m_micro_batch,
                  t.m_layer,
                  t.m_phase,
                  t.m_stream,
                  t.m_grad_enabled,
                  t.m_offload};
  return b;
}

namespace {

using Template = LayerStamp::Template;

// The tape's ids as a template's Refs, for the region recorded from `ops`, `tensors` and `vars` on (the
// tape's sizes when it began): the region's own ids relative to its start, the externals by their index.
// `ok` turns false at a tensor or variable that is neither: such a region is not reproducible for another
// layer.
struct Encoder {
  std::size_t ops = 0, tensors = 0, vars = 0;
  const std::vector<TensorId>& externals;
  const std::vector<VarId>& external_vars;
  bool ok = true;

  std::ptrdiff_t external_index(TensorId id) const {
    const auto it = std::find(externals.begin(), externals.end(), id);
    return it == externals.end() ? -1 : it - externals.begin();
  }
  Ref op(OpId id) const {
    return id != kNoOp && id >= ops ? Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(id - ops)}
                                    : Ref{Ref::Kind::kLiteral, id};
  }
  Ref tensor(TensorId id) {
    if (id != kNoTensor && id >= tensors) {
      return Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(id - tensors)};
    }
    const std::ptrdiff_t e = id != kNoTensor ? external_index(id) : -1;
    if (e >= 0) {
      return Ref{Ref::Kind::kExternal, static_cast<std::uint32_t>(e)};
    }
    ok = ok && id == kNoTensor;
    return Ref{Ref::Kind::kLiteral, id};
  }
  Ref var(VarId id) {
    if (id >= vars) {
      return Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(id - vars)};
    }
    const auto it = std::find(external_vars.begin(), external_vars.end(), id);
    if (it != external_vars.end()) {
      return Ref{Ref::Kind::kExternal, static_cast<std::uint32_t>(it - external_vars.begin())};
    }
    ok = false;
    return Ref{Ref::Kind::kLiteral, id};
  }
};

// Encoder's inverse: a template's Refs as the tape's ids, for a region appended from `ops`, `tensors`,
// `vars` and `nodes` on, with this layer's externals.
struct Rebase {
  std::size_t ops = 0, tensors = 0, vars = 0, nodes = 0;
  const std::vector<TensorId>& externals;
  const std::vector<VarId>& external_vars;

  OpId op(const Ref& r) const {
    return r.kind == Ref::Kind::kInternal ? static_cast<OpId>(ops + r.value) : static_cast<OpId>(r.value);
  }
  TensorId tensor(const Ref& r) const {
    switch (r.kind) {
      case Ref::Kind::kInternal:
        return static_cast<TensorId>(tensors + r.value);
      case Ref::Kind::kExternal:
        return externals[r.value];
      case Ref::Kind::kLiteral:
        break;
    }
    return static_cast<TensorId>(r.value);
  }
  VarId var(const Ref& r) const {
    return r.kind == Ref::Kind::kInternal ? static_cast<VarId>(vars + r.value) : external_vars[r.value];
  }
  int node(const Ref& r) const {
    return r.kind == Ref::Kind::kInternal ? static_cast<int>(nodes + r.value) : -1;
  }
};

// Each record of the region and its code, both ways: the encoder and the decoder of a kind stand together
// so that a field added to one is seen missing from the other (and the static_asserts above name them).

Template::OpCode encode_op(const Op& op, const std::string& token, int layer, const Encoder& refs) {
  return Template::OpCode{encode_name(op.name, token),
                          op.kind,
                          op.step,
                          op.micro_batch,
                          encode_layer(op.layer, layer),
                          op.phase,
                          op.flops,
                          op.bytes_moved,
                          op.stream,
                          refs.op(op.host_waits_for),
                          refs.op(op.stream_waits_for),
                          op.comm_bytes};
}

Op decode_op(const Template::OpCode& c, const std::string& token, int layer, const Rebase& at) {
  Op op;
  op.name = decode_name(c.name, token);
  op.kind = c.kind;
  op.step = c.step;
  op.micro_batch = c.micro_batch;
  op.layer = decode_layer(c.layer, layer);
  op.phase = c.phase;
  op.flops = c.flops;
  op.bytes_moved = c.bytes_moved;
  op.stream = c.stream;
  op.host_waits_for = at.op(c.host_waits_for);
  op.stream_waits_for = at.op(c.stream_waits_for);
  op.comm_bytes = c.comm_bytes;
  return op;
}

// `refs` and `freed`: the tape's reference count and freed flag of the tensor at the region's end.
Template::TensorCode encode_tensor(const Tensor& x, const std::string& token, int layer, std::size_t first_op,
                                   int refs, bool freed) {
  return Template::TensorCode{encode_name(x.name, token),
                              x.size_bytes,
                              x.dtype,
                              x.category,
                              static_cast<std::uint32_t>(x.producer - first_op),
                              !x.consumers.empty() && x.consumers[0] == x.producer,
                              x.persistent,
                              encode_layer(x.layer, layer),
                              x.record_stream,
                              x.graph_pool,
                              refs,
                              freed};
}

// `consumers`: how many the region's edges give it (room made at once, past the four kept in place).
Tensor decode_tensor(const Template::TensorCode& c, const std::string& token, int layer, const Rebase& at,
                     std::size_t consumers) {
  Tensor x;
  x.name = decode_name(c.name, token);
  x.size_bytes = c.size_bytes;
  x.dtype = c.dtype;
  x.category = c.category;
  x.producer = static_cast<OpId>(at.ops + c.producer);
  x.consumers.reserve(consumers + (c.consumed_by_producer ? 1 : 0));
  if (c.consumed_by_producer) {
    x.consumers.push_back(x.producer);
  }
  x.persistent = c.persistent;
  x.layer = decode_layer(c.layer, layer);
  x.record_stream = c.record_stream;
  x.graph_pool = c.graph_pool;
  return x;
}

// EagerTape::Var and EagerTape::Node are the tape's private types (LayerStamp is its friend): the
// functions that code them are templates on them, as var_states is.
template <typename Var>
Template::VarCode encode_var(const Var& v, const std::string& token, std::size_t first_node, Encoder& refs) {
  const Ref node = v.node == -1 ? Ref{Ref::Kind::kLiteral, static_cast<std::uint32_t>(-1)}
                                : Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(v.node - first_node)};
  return Template::VarCode{refs.tensor(v.storage),
                           v.shape,
                           v.dtype,
                           v.grad_dtype,
                           v.requires_grad,
                           v.is_parameter,
                           v.view,
                           v.order,
                           node,
                           encode_name(v.name, token),
                           v.name_is_storage};
}

template <typename Var>
Var decode_var(const Template::VarCode& c, const std::string& token, const Rebase& at) {
  Var v;
  v.storage = at.tensor(c.storage);
  v.shape = c.shape;
  v.dtype = c.dtype;
  v.grad_dtype = c.grad_dtype;
  v.requires_grad = c.requires_grad;
  v.is_parameter = c.is_parameter;
  v.view = c.view;
  v.order = c.order;
  v.node = at.node(c.node);
  v.name_is_storage = c.name_is_storage;
  if (!c.name_is_storage) {
    v.name = decode_name(c.name, token);
  }
  return v;
}

// The region's autograd nodes, plain op nodes only (false otherwise). add_node's parameter-use counts are
// replayed on `expected` (the map before the region), for the caller to compare with the map after it.
template <typename Node, typename Var>
bool encode_nodes(const ChunkedVector<Node>& nodes, std::size_t first_node, const ChunkedVector<Var>& vars,
                  const std::string& token, int layer, Encoder& refs,
                  std::unordered_map<VarId, int>& expected, std::vector<Template::NodeCode>& out) {
  for (std::size_t i = first_node; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!n.packed.empty() || n.checkpoint_body || n.function_backward || !n.function_slots.empty() ||
        n.sac != nullptr || !n.sac_cache.empty()) {
      return false;
    }
    if (n.name_op != kNoOp && refs.op(n.name_op).kind != Ref::Kind::kInternal) {
      return false;  // named by an op before the region: not this layer's to stamp
    }
    Template::NodeCode c{encode_name(n.name, token),
                         refs.op(n.name_op),
                         n.kind,
                         encode_layer(n.layer, layer),
                         n.flops,
                         {},
                         {},
                         {},
                         n.offload,
                         RuleCode{n.rule},
                         n.done};
    bool counts = false;
    for (const VarId in : n.inputs) {
      c.inputs.push_back(refs.var(in));
      if (vars[in].is_parameter && vars[in].requires_grad) {
        ++expected[in];
        counts = true;
      }
    }
    for (const VarId o : n.outputs) {
      c.outputs.push_back(refs.var(o));
    }
    for (const TensorId sv : n.saved) {
      c.saved.push_back(refs.tensor(sv));
    }
    if (counts != n.counts_parameter_uses) {
      return false;
    }
    out.push_back(std::move(c));
  }
  return true;
}

// Fills `n` from `c` and `outputs` (cleared first: the caller's, reused node after node) with its output
// variables (add_node takes them apart; `n.outputs` has room for them, so add_node's copy allocates nothing).
template <typename Node>
void decode_node(const Template::NodeCode& c, const std::string& token, int layer, const Rebase& at, Node& n,
                 std::vector<VarId>& outputs) {
  n.name_op = at.op(c.name_op);
  if (n.name_op == kNoOp) {
    n.name = decode_name(c.name, token);
  }
  n.kind = c.kind;
  n.layer = decode_layer(c.layer, layer);
  n.flops = c.flops;
  n.inputs.reserve(c.inputs.size());
  for (const Ref& r : c.inputs) {
    n.inputs.push_back(at.var(r));
  }
  outputs.clear();
  for (const Ref& r : c.outputs) {
    outputs.push_back(at.var(r));
  }
  n.outputs.reserve(outputs.size());
  n.saved.reserve(c.saved.size());
  for (const Ref& r : c.saved) {
    n.saved.push_back(at.tensor(r));
  }
  n.offload = c.offload;
  n.rule = c.rule.rule;
  n.done = c.done;
}

// One change of a tensor that existed before the region, as ExternalChange records it (false when the tensor
// is not an external: such a region is not reproducible for another layer).
bool encode_change(TensorId id, int refs_before, int refs_after, const TensorFields& before,
                   const TensorFields& after, int layer, const Encoder& refs,
                   std::vector<Template::ExternalChange>& out) {
  if (refs_before == refs_after && before == after) {
    return true;
  }
  const std::ptrdiff_t e = refs.external_index(id);
  if (e < 0) {
    return false;
  }
  const auto code = [&](const TensorFields& f) {
    return std::tuple<TensorCategory, LayerCode, bool, StreamId, bool>{
        std::get<0>(f), encode_layer(std::get<1>(f), layer), std::get<2>(f), std::get<3>(f), std::get<4>(f)};
  };
  Template::ExternalChange c{static_cast<std::uint32_t>(e), refs_after - refs_before, false, {}, {}};
  if (before != after) {
    c.fields_changed = true;
    c.before = code(before);
    c.after = code(after);
  }
  out.push_back(c);
  return true;
}

// The tensors that existed before the region and that it changed (their references, the fields autograd's
// saving sets), sorted by external index; false when one of them is not an external. Only the tensors live
// at the region's start can have changed (Note [Only live tensors can change]). `State` is
// LayerStamp::Before.
template <typename State>
bool encode_changes(const State& before, const std::vector<int>& refs_now, const OpGraph& g, int layer,
                    const Encoder& refs, std::vector<Template::ExternalChange>& out) {
  for (std::size_t k = 0; k < before.live.size(); ++k) {
    const TensorId id = before.live[k];
    if (!encode_change(id, before.live_refs[k], refs_now[id], before.live_fields[k],
                       tensor_fields_of(g.tensor(id)), layer, refs, out)) {
      return false;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return true;
}

// encode_changes over every tensor of the tape, as before Note [Only live tensors can change].
template <typename State>
bool encode_changes_whole(const State& before, const State& after, int layer, const Encoder& refs,
                          std::vector<Template::ExternalChange>& out) {
  for (std::size_t i = 0; i < before.tensors; ++i) {
    if (!encode_change(static_cast<TensorId>(i), before.refs[i], after.refs[i], before.tensor_fields[i],
                       after.tensor_fields[i], layer, refs, out)) {
      return false;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return true;
}

// Applies a recorded change to external tensor `id` of the layer being stamped; `refs`: the tape's counts.
void apply_change(const Template::ExternalChange& c, TensorId id, int layer, OpGraph& g,
                  std::vector<int>& refs) {
  refs[id] += c.refs_delta;
  if (!c.fields_changed) {
    return;
  }
  Tensor& x = g.tensor(id);
  x.category = std::get<0>(c.after);
  x.layer = decode_layer(std::get<1>(c.after), layer);
  x.persistent = std::get<2>(c.after);
  x.record_stream = std::get<3>(c.after);
  x.graph_pool = std::get<4>(c.after);
}

}  // namespace

std::unique_ptr<LayerStamp::Template> LayerStamp::encode(const Before& before, int layer,
                                                         const std::vector<VarId>& external_vars,
                                                         VarId output) const {
  const EagerTape& t = m_tape;
  const OpGraph& g = t.m_graph;
  const std::vector<TensorId> externals = storages(external_vars);
  const Before after = snapshot();
  const bool live_unchanged = std::none_of(before.live.begin(), before.live.end(),
                                           [&](TensorId id) { return static_cast<bool>(t.m_freed[id]); });
  const bool externals_unchanged = before.external_var_fields == var_fields_of(t.m_vars, external_vars);
  Encoder refs{before.ops, before.tensors, before.vars, externals, external_vars};
  std::vector<Template::ExternalChange> changes;
  const bool changes_ok =
      live_unchanged && externals_unchanged && encode_changes(before, t.m_refs, g, layer, refs, changes);
  if (expensive_checks()) {
    // The whole tape gives the same verdict and the same changes (Note [Only live tensors can change]).
    std::vector<Template::ExternalChange> whole;
    const bool whole_ok =
        std::equal(before.freed.begin(), before.freed.end(), after.freed.begin()) &&
        std::equal(before.var_fields.begin(), before.var_fields.end(), after.var_fields.begin()) &&
        encode_changes_whole(before, after, layer, refs, whole);
    SIM_ASSERT(whole_ok == changes_ok && (!whole_ok || whole == changes));
  }
  if (after.tape_state != before.tape_state || after.ops == before.ops || output == kNoVar ||
      output < before.vars || !changes_ok) {
    return nullptr;
  }
  if (before.current_op != kNoOp) {
    const Op& op = g.op(before.current_op);
    if (std::tuple<Bytes, OpId, OpId, Bytes>{op.bytes_moved, op.host_waits_for, op.stream_waits_for,
                                             op.comm_bytes} != before.current_op_fields) {
      return nullptr;
    }
  }
  auto out = std::make_unique<Template>();
  out->externals = externals.size();
  out->changes = std::move(changes);
  const std::string token = layer_token(layer);
  for (std::size_t i = before.ops; i < after.ops; ++i) {
    out->ops.push_back(encode_op(g.op(static_cast<OpId>(i)), token, layer, refs));
  }
  for (std::size_t i = before.tensors; i < after.tensors; ++i) {
    const Tensor& x = g.tensor(static_cast<TensorId>(i));
    if (x.producer < before.ops) {
      return nullptr;  // allocated by an op before the region
    }
    out->tensors.push_back(encode_tensor(x, token, layer, before.ops, t.m_refs[i], t.m_freed[i]));
  }
  for (std::size_t i = before.edges; i < after.edges; ++i) {
    const OpGraph::Edge& e = g.edges()[i];
    if (e.target < before.ops) {
      return nullptr;
    }
    out->edges.push_back(Template::EdgeCode{refs.tensor(e.dependency.tensor),
                                            static_cast<std::uint32_t>(e.target - before.ops),
                                            e.dependency.kind});
  }
  for (std::size_t i = before.vars; i < after.vars; ++i) {
    const EagerTape::Var& v = t.m_vars[i];
    if (v.grad != kNoTensor || (v.node != -1 && static_cast<std::size_t>(v.node) < before.nodes)) {
      return nullptr;
    }
    out->vars.push_back(encode_var(v, token, before.nodes, refs));
  }
  std::unordered_map<VarId, int> expected = before.pending_parameter_uses;
  if (!encode_nodes(t.m_nodes, before.nodes, t.m_vars, token, layer, refs, expected, out->nodes) ||
      expected != t.m_pending_parameter_uses) {
    return nullptr;
  }
  out->external_states = var_states(t.m_vars, external_vars);  // as at the start: var_fields unchanged
  out->output = static_cast<std::uint32_t>(output - before.vars);
  out->current_op = refs.op(t.m_current_op);
  out->replay_last_save = refs.op(t.m_replay_last_save);
  out->replay_saved_output = t.m_replay_saved_output;
  if (!refs.ok) {
    return nullptr;
  }
  return out;
}

std::vector<TensorId> LayerStamp::storages(const std::vector<VarId>& vars) const {
  std::vector<TensorId> out;
  out.reserve(vars.size());
  for (const VarId v : vars) {
    out.push_back(v != kNoVar ? m_tape.m_vars[v].storage : kNoTensor);
  }
  return out;
}

bool LayerStamp::applies(const Template& tmpl, int layer, const std::vector<VarId>& external_vars,
                         const std::vector<TensorId>& externals) const {
  const bool same_states = same_var_states(m_tape.m_vars, external_vars, tmpl.external_states);
  SIM_ASSERT(!expensive_checks() ||
             same_states == (var_states(m_tape.m_vars, external_vars) == tmpl.external_states));
  if (tmpl.externals != externals.size() || !same_states) {
    return false;
  }
  for (const Template::ExternalChange& c : tmpl.changes) {
    const TensorId id = externals[c.index];
    if (id == kNoTensor) {
      return false;
    }
    if (m_tape.m_freed[id]) {
      return false;
    }
    if (!c.fields_changed) {
      continue;
    }
    const Tensor& x = m_tape.m_graph.tensor(id);
    if (std::tuple<TensorCategory, LayerCode, bool, StreamId, bool>{x.category, encode_layer(x.layer, layer),
                                                                    x.persistent, x.record_stream,
                                                                    x.graph_pool} != c.before) {
      return false;
    }
  }
  return true;
}

VarId LayerStamp::stamp(const Template& tmpl, int layer, const std::vector<VarId>& external_vars,
                        const std::vector<TensorId>& externals) {
  EagerTape& t = m_tape;
  OpGraph& g = t.m_graph;
  const std::string token = layer_token(layer);
  const Rebase at{g.op_count(),     g.tensors().size(), t.m_vars.size(),
                  t.m_nodes.size(), externals,          external_vars};
  for (const Template::OpCode& c : tmpl.ops) {
    g.add_op(decode_op(c, token, layer, at));
  }
  std::vector<std::uint32_t> consumers(tmpl.tensors.size(), 0);  // per internal tensor, from the edges
  for (const Template::EdgeCode& c : tmpl.edges) {
    if (c.tensor.kind == Ref::Kind::kInternal) {
      ++consumers[c.tensor.value];
    }
  }
  for (std::size_t i = 0; i < tmpl.tensors.size(); ++i) {
    const Template::TensorCode& c = tmpl.tensors[i];
    g.add_tensor(decode_tensor(c, token, layer, at, consumers[i]));
    t.m_refs.push_back(c.refs);
    t.m_freed.push_back(c.freed);
  }
  for (const Template::EdgeCode& c : tmpl.edges) {
    g.add_consumer(at.tensor(c.tensor), static_cast<OpId>(at.ops + c.op), c.kind);
  }
  for (const Template::ExternalChange& c : tmpl.changes) {
    apply_change(c, externals[c.index], layer, g, t.m_refs);
  }
  for (const Template::VarCode& c : tmpl.vars) {
    t.m_vars.push_back(decode_var<EagerTape::Var>(c, token, at));
  }
  std::vector<VarId> outputs;
  for (const Template::NodeCode& c : tmpl.nodes) {
    // In place: no move (a Node is large); register_node adds its parameter-use counts, as add_node does.
    EagerTape::Node& n = t.m_nodes.emplace_back();
    decode_node(c, token, layer, at, n, outputs);
    t.register_node(t.m_nodes.size() - 1, outputs);
  }
  t.m_current_op = at.op(tmpl.current_op);
  if (t.m_replaying) {  // what the direct road's saves would have told EagerTape::save
    t.m_replay_last_save = at.op(tmpl.replay_last_save);
    t.m_replay_saved_output = tmpl.replay_saved_output;
  }
  g_stamped.fetch_add(1, std::memory_order_relaxed);
  return static_cast<VarId>(at.vars + tmpl.output);
}

VarId LayerStamp::run(int layer, int key, const std::vector<VarId>& external_vars,
                      const std::function<VarId()>& body) {
  if (!eligible()) {
    return body();
  }
  Class& c = m_classes[class_key(key)];
  if (c.verified) {
    const std::vector<TensorId> externals = storages(external_vars);
    if (applies(*c.last, layer, external_vars, externals)) {
      return stamp(*c.last, layer, external_vars, externals);
    }
    return body();
  }
  if (c.recorded >= kMaxRecorded) {  // not periodic in this pass: direct, without the snapshots' cost
    return body();
  }
  Before before = snapshot();
  before.external_var_fields = var_fields_of(m_tape.m_vars, external_vars);
  const VarId out = body();
  std::unique_ptr<Template> tmpl = encode(before, layer, external_vars, out);
  ++c.recorded;
  c.verified = tmpl != nullptr && c.last != nullptr && *tmpl == *c.last;
  c.last = std::move(tmpl);
  return out;
}

}  // namespace vramsim
