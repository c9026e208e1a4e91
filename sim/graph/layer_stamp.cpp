#include "sim/graph/layer_stamp.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace vramsim {

namespace {

std::atomic<bool> g_stamping{true};
std::atomic<std::uint64_t> g_stamped{0};

// The fields of Op, Tensor and EagerTape::Var that the template encodes: a new field must be added to the
// encoding (and to these sizes), or stamping would drop it.
static_assert(sizeof(Op) == 120, "Op changed: encode its new field in LayerStamp::Template");
static_assert(sizeof(Tensor) == 104, "Tensor changed: encode its new field in LayerStamp::Template");

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

// A layer number: the layer being run, or the value itself.
struct LayerCode {
  bool current = false;
  int value = -1;
  bool operator==(const LayerCode&) const = default;
};

LayerCode encode_layer(int value, int layer) {
  return value == layer ? LayerCode{true, -1} : LayerCode{false, value};
}
int decode_layer(const LayerCode& c, int layer) { return c.current ? layer : c.value; }

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
    Shape shape;
    DType dtype = DType::kFloat32;
    bool requires_grad = false;
    bool is_parameter = false;
    bool view = false;
    MemoryOrder order = MemoryOrder::kContiguous;
    NameCode name;
    bool operator==(const VarCode&) const = default;
  };
  std::vector<OpCode> ops;
  std::vector<TensorCode> tensors;
  std::vector<EdgeCode> edges;
  std::vector<VarCode> vars;
  std::uint32_t output = 0;  // relative variable
  Ref current_op;            // the tape's current op at the region's end
  std::size_t externals = 0;
  bool operator==(const Template&) const = default;
};

// What a region must leave as it found it (or only append to).
struct LayerStamp::Before {
  std::size_t ops = 0, tensors = 0, edges = 0, vars = 0;
  std::vector<int> refs;
  std::vector<bool> freed;
  // per tensor: category, layer, persistent, record_stream, graph_pool
  std::vector<std::tuple<TensorCategory, int, bool, StreamId, bool>> tensor_fields;
  // per variable: storage, grad, node, requires_grad, order
  std::vector<std::tuple<TensorId, TensorId, int, bool, MemoryOrder>> var_fields;
  OpId current_op = kNoOp;
  std::tuple<Bytes, OpId, OpId, Bytes> current_op_fields{};
  // the tape's other state, by size or value
  std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::uint64_t,
             std::size_t, std::size_t, Bytes, std::size_t, int, int, int, Phase, StreamId, bool>
      tape_state{};
};

void set_layer_stamping(bool on) { g_stamping.store(on); }
bool layer_stamping() { return g_stamping.load(); }
std::uint64_t layers_stamped() { return g_stamped.load(); }

LayerStamp::LayerStamp(EagerTape& tape) : m_tape(tape) {}
LayerStamp::~LayerStamp() = default;

void LayerStamp::reset() { m_classes.clear(); }

void LayerStamp::discard(int key) {
  Class& c = m_classes[key];
  c.last = nullptr;
  c.verified = false;
  c.recorded = kMaxRecorded;
}

bool LayerStamp::eligible() const {
  const EagerTape& t = m_tape;
  return layer_stamping() && !t.m_grad_enabled && !t.m_capturing && !t.m_before_parameter_use &&
         t.m_sac.policy == nullptr;
}

LayerStamp::Before LayerStamp::snapshot() const {
  const EagerTape& t = m_tape;
  const OpGraph& g = t.m_graph;
  Before b;
  b.ops = g.op_count();
  b.tensors = g.tensors().size();
  b.edges = g.edges().size();
  b.vars = t.m_vars.size();
  b.refs = t.m_refs;
  b.freed = t.m_freed;
  b.tensor_fields.reserve(b.tensors);
  for (const Tensor& x : g.tensors()) {
    b.tensor_fields.emplace_back(x.category, x.layer, x.persistent, x.record_stream, x.graph_pool);
  }
  b.var_fields.reserve(b.vars);
  for (const EagerTape::Var& v : t.m_vars) {
    b.var_fields.emplace_back(v.storage, v.grad, v.node, v.requires_grad, v.order);
  }
  b.current_op = t.m_current_op;
  if (b.current_op != kNoOp) {
    const Op& op = g.op(b.current_op);
    b.current_op_fields = {op.bytes_moved, op.host_waits_for, op.stream_waits_for, op.comm_bytes};
  }
  b.tape_state = {t.m_nodes.size(),
                  t.m_grad_buffer.size(),
                  t.m_pending_parameter_uses.size(),
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
                  t.m_grad_enabled};
  return b;
}

std::unique_ptr<LayerStamp::Template> LayerStamp::encode(const Before& before, int layer,
                                                         const std::vector<TensorId>& externals,
                                                         VarId output) const {
  const EagerTape& t = m_tape;
  const OpGraph& g = t.m_graph;
  // The region must have changed nothing that existed before it (but the consumers of its externals).
  const Before after = snapshot();
  if (after.tape_state != before.tape_state || after.ops == before.ops || output == kNoVar ||
      output < before.vars || !std::equal(before.refs.begin(), before.refs.end(), after.refs.begin()) ||
      !std::equal(before.freed.begin(), before.freed.end(), after.freed.begin()) ||
      !std::equal(before.tensor_fields.begin(), before.tensor_fields.end(), after.tensor_fields.begin()) ||
      !std::equal(before.var_fields.begin(), before.var_fields.end(), after.var_fields.begin())) {
    return nullptr;
  }
  if (before.current_op != kNoOp) {
    const Op& op = g.op(before.current_op);
    if (std::tuple<Bytes, OpId, OpId, Bytes>{op.bytes_moved, op.host_waits_for, op.stream_waits_for,
                                             op.comm_bytes} != before.current_op_fields) {
      return nullptr;
    }
  }
  const auto op_ref = [&](OpId id) {
    return id != kNoOp && id >= before.ops
               ? Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(id - before.ops)}
               : Ref{Ref::Kind::kLiteral, id};
  };
  bool ok = true;
  const auto tensor_ref = [&](TensorId id) {
    if (id != kNoTensor && id >= before.tensors) {
      return Ref{Ref::Kind::kInternal, static_cast<std::uint32_t>(id - before.tensors)};
    }
    for (std::size_t i = 0; i < externals.size(); ++i) {
      if (externals[i] == id && id != kNoTensor) {
        return Ref{Ref::Kind::kExternal, static_cast<std::uint32_t>(i)};
      }
    }
    if (id != kNoTensor) {
      ok = false;  // a tensor the caller did not name: not reproducible for another layer
    }
    return Ref{Ref::Kind::kLiteral, id};
  };
  const std::string token = layer_token(layer);
  auto out = std::make_unique<Template>();
  out->externals = externals.size();
  out->ops.reserve(after.ops - before.ops);
  for (std::size_t i = before.ops; i < after.ops; ++i) {
    const Op& op = g.op(static_cast<OpId>(i));
    out->ops.push_back(Template::OpCode{encode_name(op.name, token), op.kind, op.step, op.micro_batch,
                                        encode_layer(op.layer, layer), op.phase, op.flops, op.bytes_moved,
                                        op.stream, op_ref(op.host_waits_for), op_ref(op.stream_waits_for),
                                        op.comm_bytes});
  }
  out->tensors.reserve(after.tensors - before.tensors);
  for (std::size_t i = before.tensors; i < after.tensors; ++i) {
    const Tensor& x = g.tensor(static_cast<TensorId>(i));
    if (x.producer < before.ops) {
      return nullptr;  // allocated by an op before the region
    }
    out->tensors.push_back(Template::TensorCode{encode_name(x.name, token), x.size_bytes, x.dtype, x.category,
                                                static_cast<std::uint32_t>(x.producer - before.ops),
                                                !x.consumers.empty() && x.consumers[0] == x.producer,
                                                x.persistent, encode_layer(x.layer, layer), x.record_stream,
                                                x.graph_pool, t.m_refs[i], t.m_freed[i]});
  }
  out->edges.reserve(after.edges - before.edges);
  for (std::size_t i = before.edges; i < after.edges; ++i) {
    const OpGraph::Edge& e = g.edges()[i];
    if (e.target < before.ops) {
      return nullptr;
    }
    out->edges.push_back(Template::EdgeCode{tensor_ref(e.dependency.tensor),
                                            static_cast<std::uint32_t>(e.target - before.ops),
                                            e.dependency.kind});
  }
  out->vars.reserve(after.vars - before.vars);
  for (std::size_t i = before.vars; i < after.vars; ++i) {
    const EagerTape::Var& v = t.m_vars[i];
    if (v.node != -1 || v.grad != kNoTensor) {
      return nullptr;
    }
    out->vars.push_back(Template::VarCode{tensor_ref(v.storage), v.shape, v.dtype, v.requires_grad,
                                          v.is_parameter, v.view, v.order, encode_name(v.name, token)});
  }
  out->output = static_cast<std::uint32_t>(output - before.vars);
  out->current_op = op_ref(t.m_current_op);
  if (!ok) {
    return nullptr;
  }
  return out;
}

VarId LayerStamp::stamp(const Template& tmpl, int layer, const std::vector<TensorId>& externals) {
  EagerTape& t = m_tape;
  OpGraph& g = t.m_graph;
  const std::string token = layer_token(layer);
  const auto op_id = [&](const Ref& r, std::size_t base) {
    return r.kind == Ref::Kind::kInternal ? static_cast<OpId>(base + r.value) : static_cast<OpId>(r.value);
  };
  const std::size_t ops = g.op_count();
  const std::size_t tensors = g.tensors().size();
  const auto tensor_id = [&](const Ref& r) {
    switch (r.kind) {
      case Ref::Kind::kInternal:
        return static_cast<TensorId>(tensors + r.value);
      case Ref::Kind::kExternal:
        return externals[r.value];
      case Ref::Kind::kLiteral:
        break;
    }
    return static_cast<TensorId>(r.value);
  };
  for (const Template::OpCode& c : tmpl.ops) {
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
    op.host_waits_for = op_id(c.host_waits_for, ops);
    op.stream_waits_for = op_id(c.stream_waits_for, ops);
    op.comm_bytes = c.comm_bytes;
    g.add_op(std::move(op));
  }
  for (const Template::TensorCode& c : tmpl.tensors) {
    Tensor x;
    x.name = decode_name(c.name, token);
    x.size_bytes = c.size_bytes;
    x.dtype = c.dtype;
    x.category = c.category;
    x.producer = static_cast<OpId>(ops + c.producer);
    if (c.consumed_by_producer) {
      x.consumers.push_back(x.producer);
    }
    x.persistent = c.persistent;
    x.layer = decode_layer(c.layer, layer);
    x.record_stream = c.record_stream;
    x.graph_pool = c.graph_pool;
    g.add_tensor(std::move(x));
    t.m_refs.push_back(c.refs);
    t.m_freed.push_back(c.freed);
  }
  for (const Template::EdgeCode& c : tmpl.edges) {
    g.add_consumer(tensor_id(c.tensor), static_cast<OpId>(ops + c.op), c.kind);
  }
  const std::size_t vars = t.m_vars.size();
  for (const Template::VarCode& c : tmpl.vars) {
    EagerTape::Var v;
    v.storage = tensor_id(c.storage);
    v.shape = c.shape;
    v.dtype = c.dtype;
    v.requires_grad = c.requires_grad;
    v.is_parameter = c.is_parameter;
    v.view = c.view;
    v.order = c.order;
    v.name = decode_name(c.name, token);
    t.m_vars.push_back(std::move(v));
  }
  t.m_current_op = op_id(tmpl.current_op, ops);
  g_stamped.fetch_add(1, std::memory_order_relaxed);
  return static_cast<VarId>(vars + tmpl.output);
}

VarId LayerStamp::run(int layer, int key, const std::vector<TensorId>& externals,
                      const std::function<VarId()>& body) {
  if (!eligible()) {
    return body();
  }
  Class& c = m_classes[key];
  if (c.verified && c.last->externals == externals.size()) {
    return stamp(*c.last, layer, externals);
  }
  if (c.recorded >= kMaxRecorded) {  // not periodic in this pass: direct, without the snapshots' cost
    return body();
  }
  const Before before = snapshot();
  const VarId out = body();
  std::unique_ptr<Template> tmpl = encode(before, layer, externals, out);
  ++c.recorded;
  c.verified = tmpl != nullptr && c.last != nullptr && *tmpl == *c.last;
  c.last = std::move(tmpl);
  return out;
}

}  // namespace vramsim
