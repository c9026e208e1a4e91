#include "sim/compile/torch_compile.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/compile/aot_partitioner.h"
#include "sim/compile/inductor_memory.h"

namespace vramsim {
namespace {

using inductor::Buffer;
using inductor::GraphPlan;
using inductor::Kernel;

// Inductor's lowering thresholds (torch/_inductor/config.py).
constexpr std::size_t kRealizeReadsThreshold = 4;     // realize_reads_threshold: a value with several users
constexpr std::size_t kRealizeAccReadsThreshold = 8;  // realize_acc_reads_threshold: any value

bool is_reduction(std::string_view k) {
  for (std::string_view r :
       {"sum", "mean", "amax", "max", "min", "argmax", "any", "var", "var_mean", "std", "linalg_vector_norm",
        "_softmax", "_log_softmax", "native_layer_norm", "nll_loss_forward"}) {
    if (k == r) {
      return true;
    }
  }
  return false;
}

void merge(std::vector<int>& into, const std::vector<int>& from) {
  for (int x : from) {
    if (std::find(into.begin(), into.end(), x) == into.end()) {
      into.push_back(x);
    }
  }
}

// max-autotune's select_algorithm at compile time: for each matmul shape not tuned yet, example inputs and an
// output are made (AlgorithmSelectorCache.benchmark_example_value) and every choice is benchmarked with
// Triton's flush buffer; one shape after another, so the largest set is what coexists.
void add_matmul_autotuning(GraphPlan& plan, const std::vector<std::vector<Bytes>>& matmuls,
                           InductorProcess& process, const std::string& name) {
  if (!autotunes_matmuls(process.mode) || process.autotuned_before) {
    return;
  }
  std::vector<Bytes> largest;
  Bytes largest_sum = 0;
  for (const std::vector<Bytes>& sizes : matmuls) {
    std::string signature = "mm";
    Bytes sum = 0;
    for (Bytes b : sizes) {
      signature += fmt::format(":{}", b);
      sum += b;
    }
    if (process.tuned.insert(signature).second && sum > largest_sum) {
      largest = sizes;
      largest_sum = sum;
    }
  }
  if (largest.empty()) {
    return;
  }
  Kernel k;
  k.name = name + ".select_algorithm";
  k.kind = "autotune_select_algorithm";
  k.scratch_bytes = largest;
  k.scratch_bytes.push_back(kTritonBenchmarkFlushBytes);
  plan.kernels.insert(plan.kernels.begin(), std::move(k));
}

bool is_matmul(std::string_view k) { return k == "mm" || k == "addmm" || k == "bmm" || k == "_scaled_mm"; }

// One value of the captured graph: an op's output or a graph input (views are their base's value).
struct Value {
  VarId var = kNoVar;
  int op = -1;  // the captured op that makes it; -1: a graph input (primal)
  Bytes size_bytes = 0;
  DType dtype = DType::kFloat32;
  int layer = -1;
  bool requires_grad = false;
};

struct CompiledGraph {
  std::string name;
  std::vector<CapturedOp> ops;
  std::vector<Value> values;
  std::vector<std::vector<int>> op_inputs;   // per op, aligned with call.inputs
  std::vector<std::vector<int>> op_outputs;  // per op, aligned with call.outputs (empty for views)
  // Ops whose outputs are an earlier op's (views; duplicates removed by common-subexpression elimination)
  std::vector<bool> aliases;
  int output = -1;
  std::vector<bool> saved;
  std::vector<int> saved_list;   // forward order
  std::vector<int> grad_inputs;  // primals that get gradients: the CompiledFunction's inputs

  bool primal(int v) const { return values[static_cast<std::size_t>(v)].op < 0; }
  const CapturedOp& op_of(int v) const {
    return ops[static_cast<std::size_t>(values[static_cast<std::size_t>(v)].op)];
  }
  aot::OpTraits traits(int v) const {
    return primal(v) ? aot::OpTraits{} : aot::op_traits(op_of(v).call.kind);
  }
};

CompiledGraph build_graph(const EagerTape& tape, std::string name, std::vector<CapturedOp> ops, VarId out) {
  CompiledGraph g;
  g.name = std::move(name);
  g.ops = std::move(ops);
  std::unordered_map<VarId, int> value_of;
  std::unordered_map<std::string, int> seen;  // CSE: op key -> the first op
  const auto add_value = [&](VarId var, int op) {
    Value v;
    v.var = var;
    v.op = op;
    v.size_bytes = tensor_bytes(tape.shape(var), tape.dtype(var));
    v.dtype = tape.dtype(var);
    v.layer = op >= 0 ? g.ops[static_cast<std::size_t>(op)].layer : -1;
    v.requires_grad = tape.requires_grad(var);
    g.values.push_back(v);
    value_of[var] = static_cast<int>(g.values.size() - 1);
    return static_cast<int>(g.values.size() - 1);
  };
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const CapturedOp& op = g.ops[i];
    std::vector<int> ins;
    for (VarId in : op.call.inputs) {
      const auto it = value_of.find(in);
      ins.push_back(it != value_of.end() ? it->second : add_value(in, -1));
    }
    std::vector<int> outs;
    bool alias = op.view;
    if (op.view) {
      value_of[op.outputs.at(0)] = ins.at(0);
    } else {
      // fx_graph_cse (partitioners.py, config.cse): the same op on the same values is computed once, as the
      // three projections' autocast casts of one input are
      std::string key = op.call.kind;
      for (int v : ins) {
        key += fmt::format(",{}", v);
      }
      for (const OutputSpec& o : op.call.outputs) {
        key += fmt::format("|{}:{}", numel(o.shape), static_cast<int>(o.dtype));
      }
      const auto [it, fresh] = seen.try_emplace(key, static_cast<int>(i));
      const bool pure = !aot::op_traits(op.call.kind).random && !op.call.inputs.empty();
      if (!fresh && pure && g.ops[static_cast<std::size_t>(it->second)].must_recompute == op.must_recompute) {
        const std::vector<int>& first = g.op_outputs[static_cast<std::size_t>(it->second)];
        for (std::size_t k = 0; k < op.outputs.size() && k < first.size(); ++k) {
          value_of[op.outputs[k]] = first[k];
        }
        alias = true;
      } else {
        for (VarId o : op.outputs) {
          outs.push_back(add_value(o, static_cast<int>(i)));
        }
      }
    }
    g.aliases.push_back(alias);
    g.op_inputs.push_back(std::move(ins));
    g.op_outputs.push_back(std::move(outs));
  }
  const auto it = value_of.find(out);
  SIM_ASSERT(it != value_of.end() && !g.primal(it->second));
  g.output = it->second;
  g.saved.assign(g.values.size(), false);
  return g;
}

// AOTAutograd's partition of the captured graph: which values the forward saves.
void partition(CompiledGraph& g) {
  std::vector<aot::JointNode> nodes(g.values.size());
  bool any_backward = false;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    aot::JointNode& n = nodes[v];
    if (g.primal(static_cast<int>(v))) {
      n.kind = "placeholder";
      n.primal = true;
    } else {
      const CapturedOp& op = g.op_of(static_cast<int>(v));
      n.kind = op.call.kind;
      n.inputs = g.op_inputs[static_cast<std::size_t>(g.values[v].op)];
      n.must_recompute = op.must_recompute;
      n.must_save = op.must_save;
    }
    n.size_bytes = g.values[v].size_bytes;
  }
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const CapturedOp& op = g.ops[i];
    if (!op.needs_grad || g.aliases[i]) {
      continue;
    }
    any_backward = true;
    const aot::OpTraits t = aot::op_traits(op.call.kind);
    const auto mark = [&](int v) {
      nodes[static_cast<std::size_t>(v)].backward_use = true;
      if (!t.fusible || t.compute_intensive) {
        nodes[static_cast<std::size_t>(v)].backward_fusible = false;
      }
    };
    for (int k : op.call.saved.inputs) {
      mark(g.op_inputs[i].at(static_cast<std::size_t>(k)));
    }
    for (int k : op.call.saved.outputs) {
      mark(g.op_outputs[i].at(static_cast<std::size_t>(k)));
    }
  }
  nodes[static_cast<std::size_t>(g.output)].forward_output = true;
  if (!any_backward) {
    return;  // no backward: the default partitioner, nothing saved
  }
  for (int v : aot::min_cut_rematerialization(nodes).saved) {
    g.saved[static_cast<std::size_t>(v)] = true;
    g.saved_list.push_back(v);
  }
}

// ---- the forward graph ------------------------------------------------------------------------------------

class ForwardLowering {
 public:
  ForwardLowering(const CompiledGraph& g, const EagerTape& tape, InductorProcess& process)
      : m_g(g),
        m_tape(tape),
        m_process(process),
        m_buffer(g.values.size(), -1),
        m_reads(g.values.size()),
        m_reduction(g.values.size(), false) {}

  // The plan and, per value, its buffer (-1: fused away).
  GraphPlan lower() {
    decide_materialized();
    m_plan.graph_pool = uses_cudagraphs(m_process.mode);
    if (m_plan.graph_pool) {
      copy_static_inputs();
    }
    std::vector<std::vector<Bytes>> matmuls;
    for (std::size_t i = 0; i < m_g.ops.size(); ++i) {
      lower_op(i);
      if (is_matmul(m_g.ops[i].call.kind)) {
        std::vector<Bytes> sizes;
        for (int u : m_g.op_inputs[i]) {
          sizes.push_back(m_g.values[static_cast<std::size_t>(u)].size_bytes);
        }
        for (int v : m_g.op_outputs[i]) {
          sizes.push_back(m_g.values[static_cast<std::size_t>(v)].size_bytes);
        }
        matmuls.push_back(std::move(sizes));
      }
    }
    add_matmul_autotuning(m_plan, matmuls, m_process, m_g.name);
    return std::move(m_plan);
  }
  int buffer_of(int v) const { return m_buffer[static_cast<std::size_t>(v)]; }

 private:
  void decide_materialized() {
    const std::size_t n = m_g.values.size();
    m_materialized.assign(n, false);
    std::vector<int> users(n, 0);
    for (std::size_t i = 0; i < m_g.ops.size(); ++i) {
      if (m_g.aliases[i]) {
        continue;
      }
      const aot::OpTraits t = aot::op_traits(m_g.ops[i].call.kind);
      for (int u : m_g.op_inputs[i]) {
        ++users[static_cast<std::size_t>(u)];
        if (!t.fusible) {
          m_materialized[static_cast<std::size_t>(u)] = true;  // an extern kernel reads it from memory
        }
      }
    }
    for (std::size_t v = 0; v < n; ++v) {
      const int vi = static_cast<int>(v);
      if (m_g.primal(vi)) {
        m_materialized[v] = false;
        continue;
      }
      if (!m_g.traits(vi).fusible || m_g.saved[v] || vi == m_g.output) {
        m_materialized[v] = true;
      }
    }
    // What each fused value re-reads, in forward order; too many reads realize it.
    for (std::size_t v = 0; v < n; ++v) {
      const int vi = static_cast<int>(v);
      if (m_g.primal(vi)) {
        continue;
      }
      const std::size_t op = static_cast<std::size_t>(m_g.values[v].op);
      std::vector<int> reads;
      bool reduction = is_reduction(m_g.ops[op].call.kind);
      for (int u : m_g.op_inputs[op]) {
        merge(reads, source_reads(u));
        reduction = reduction || (!stored(u) && m_reduction[static_cast<std::size_t>(u)]);
      }
      m_reads[v] = std::move(reads);
      m_reduction[v] = reduction;
      if (!m_materialized[v] && (m_reads[v].size() > kRealizeAccReadsThreshold ||
                                 (users[v] > 1 && m_reads[v].size() > kRealizeReadsThreshold))) {
        m_materialized[v] = true;
      }
    }
  }
  // cudagraph trees copy every input that is neither a parameter or buffer nor already in the graph's pool
  // into a static buffer of the pool, kept for the replays.
  void copy_static_inputs() {
    for (std::size_t v = 0; v < m_g.values.size(); ++v) {
      const int vi = static_cast<int>(v);
      if (!m_g.primal(vi)) {
        continue;
      }
      const TensorId s = m_tape.storage(m_g.values[v].var);
      const TensorCategory c = m_tape.category_of(s);
      if (m_tape.in_graph_pool(s) || c == TensorCategory::kParameter || c == TensorCategory::kInput) {
        continue;
      }
      Kernel k;
      k.name = m_g.name + ".static_input_copy";
      k.kind = "copy_";
      k.reads = {buffer(vi)};
      Buffer copy;
      copy.name = m_tape.name(m_g.values[v].var) + ".static_input";
      copy.size_bytes = m_g.values[v].size_bytes;
      copy.dtype = m_g.values[v].dtype;
      copy.layer = m_g.values[v].layer;
      copy.graph_output = true;  // the graph's, for good
      m_plan.buffers.push_back(std::move(copy));
      k.writes = {static_cast<int>(m_plan.buffers.size() - 1)};
      m_buffer[v] = k.writes[0];
      m_plan.kernels.push_back(std::move(k));
    }
  }
  bool stored(int v) const { return m_g.primal(v) || m_materialized[static_cast<std::size_t>(v)]; }
  // The stored values a kernel reading `v` reads.
  std::vector<int> source_reads(int v) const {
    return stored(v) ? std::vector<int>{v} : m_reads[static_cast<std::size_t>(v)];
  }
  int buffer(int v) {
    int& b = m_buffer[static_cast<std::size_t>(v)];
    if (b >= 0) {
      return b;
    }
    const Value& val = m_g.values[static_cast<std::size_t>(v)];
    Buffer buf;
    buf.name = m_tape.name(val.var);
    buf.size_bytes = val.size_bytes;
    buf.dtype = val.dtype;
    buf.layer = val.layer;
    if (m_g.primal(v)) {
      buf.storage = m_tape.storage(val.var);
    } else {
      buf.category =
          m_g.saved[static_cast<std::size_t>(v)] ? TensorCategory::kActivation : TensorCategory::kTemporary;
      buf.graph_output = m_g.saved[static_cast<std::size_t>(v)] || v == m_g.output;
    }
    m_plan.buffers.push_back(std::move(buf));
    b = static_cast<int>(m_plan.buffers.size() - 1);
    return b;
  }
  void lower_op(std::size_t i) {
    const CapturedOp& op = m_g.ops[i];
    if (m_g.aliases[i]) {
      return;
    }
    Kernel k;
    for (int v : m_g.op_outputs[i]) {
      if (m_materialized[static_cast<std::size_t>(v)]) {
        k.writes.push_back(buffer(v));
      }
    }
    if (k.writes.empty()) {
      return;  // fused into the kernels that read it
    }
    if (op.workspace_bytes > 0) {  // held by the cuBLAS handle until the process ends
      Buffer ws;
      ws.name = "cublas_workspace.main_thread";
      ws.size_bytes = op.workspace_bytes;
      ws.dtype = DType::kUInt8;
      ws.category = TensorCategory::kWorkspace;
      ws.graph_output = true;
      m_plan.buffers.push_back(std::move(ws));
      k.writes.push_back(static_cast<int>(m_plan.buffers.size() - 1));
    }
    const aot::OpTraits t = aot::op_traits(op.call.kind);
    k.name = op.call.name;
    k.kind = t.fusible ? "triton_" + op.call.kind : op.call.kind;
    k.flops = op.call.flops;
    k.layer = op.layer;
    k.in_place_ok = t.fusible;
    std::vector<int> reads;
    bool reduction = is_reduction(op.call.kind);
    for (int u : m_g.op_inputs[i]) {
      merge(reads, source_reads(u));
      reduction = reduction || (!stored(u) && m_reduction[static_cast<std::size_t>(u)]);
    }
    std::string signature = op.call.kind;
    for (int r : reads) {
      k.reads.push_back(buffer(r));
      signature += fmt::format(":{}", m_g.values[static_cast<std::size_t>(r)].size_bytes);
    }
    if (!t.fusible) {
      k.scratch_bytes = op.call.scratch_bytes;
    } else if (reduction && !m_process.autotuned_before && m_process.tuned.insert(signature).second) {
      k.scratch_bytes.push_back(kTritonBenchmarkFlushBytes);  // autotune_to_one_config's do_bench
    }
    m_plan.kernels.push_back(std::move(k));
  }

  const CompiledGraph& m_g;
  const EagerTape& m_tape;
  InductorProcess& m_process;
  GraphPlan m_plan;
  std::vector<int> m_buffer;
  std::vector<bool> m_materialized;
  std::vector<std::vector<int>> m_reads;
  std::vector<bool> m_reduction;
};

// ---- the backward graph -----------------------------------------------------------------------------------

class BackwardLowering {
 public:
  BackwardLowering(const CompiledGraph& g, const std::vector<TensorId>& saved, TensorId grad_out,
                   Bytes workspace_bytes, bool copy_tangent)
      : m_g(g),
        m_workspace_bytes(workspace_bytes),
        m_saved_buffer(g.values.size(), -1),
        m_recomputed(g.values.size()),
        m_recompute_done(g.values.size(), false),
        m_grad(g.values.size()),
        m_grad_set(g.values.size(), false),
        m_result(g.values.size(), -1) {
    for (std::size_t k = 0; k < g.saved_list.size(); ++k) {
      Buffer b;
      b.storage = saved[k];
      b.owned = true;
      m_saved_buffer[static_cast<std::size_t>(g.saved_list[k])] = add(std::move(b));
    }
    Buffer b;
    b.storage = grad_out;
    b.owned = true;
    int tangent = add(std::move(b));
    if (copy_tangent) {  // cudagraph trees: the eager loss's gradient is copied into a static input
      Buffer copy;
      copy.name = g.name + ".tangent.static_input";
      copy.size_bytes = g.values[static_cast<std::size_t>(g.output)].size_bytes;
      copy.dtype = g.values[static_cast<std::size_t>(g.output)].dtype;
      copy.graph_output = true;
      Kernel k;
      k.name = copy.name;
      k.kind = "copy_";
      k.reads = {tangent};
      tangent = add(std::move(copy));
      k.writes = {tangent};
      m_plan.kernels.push_back(std::move(k));
    }
    m_grad[static_cast<std::size_t>(g.output)] = {tangent};
    m_grad_set[static_cast<std::size_t>(g.output)] = true;
    m_grad_buffer.push_back(tangent);
  }

  GraphPlan lower() {
    std::vector<int> first_user(m_g.values.size(), -1);
    for (std::size_t i = m_g.ops.size(); i-- > 0;) {
      if (!m_g.aliases[i] && m_g.ops[i].needs_grad) {
        for (int u : m_g.op_inputs[i]) {
          first_user[static_cast<std::size_t>(u)] = static_cast<int>(i);
        }
      }
    }
    for (std::size_t i = m_g.ops.size(); i-- > 0;) {
      const CapturedOp& op = m_g.ops[i];
      if (m_g.aliases[i] || !op.needs_grad) {
        continue;
      }
      lower_op(i);
      for (int u : m_g.op_inputs[i]) {
        if (m_g.primal(u) && first_user[static_cast<std::size_t>(u)] == static_cast<int>(i)) {
          finalize(u);
        }
      }
    }
    return std::move(m_plan);
  }
  // The buffer holding primal `v`'s gradient (-1: none).
  int result(int v) const { return m_result[static_cast<std::size_t>(v)]; }
  Bytes unused_workspace_bytes() const { return m_workspace_bytes; }
  // Sizes of the buffers each matmul kernel reads and writes (max-autotune benchmarks them).
  const std::vector<std::vector<Bytes>>& matmuls() const { return m_matmuls; }

 private:
  int add(Buffer b) {
    m_plan.buffers.push_back(std::move(b));
    return static_cast<int>(m_plan.buffers.size() - 1);
  }
  int new_buffer(const std::string& name, int like, int layer) {
    const Value& v = m_g.values[static_cast<std::size_t>(like)];
    Buffer b;
    b.name = name;
    b.size_bytes = v.size_bytes;
    b.dtype = v.dtype;
    b.layer = layer;
    const int id = add(std::move(b));
    m_grad_buffer.push_back(id);
    return id;
  }
  // The buffers a kernel reading forward value `v` reads: its saved copy, or what it is recomputed from.
  std::vector<int> need(int v) {
    const std::size_t vi = static_cast<std::size_t>(v);
    if (m_saved_buffer[vi] >= 0) {
      return {m_saved_buffer[vi]};
    }
    if (m_recompute_done[vi]) {
      return m_recomputed[vi];
    }
    SIM_ASSERT(!m_g.primal(v));  // the partitioner saves every primal the backward reads
    const CapturedOp& op = m_g.op_of(v);
    std::vector<int> reads;
    for (int u : m_g.op_inputs[static_cast<std::size_t>(m_g.values[vi].op)]) {
      merge(reads, need(u));
    }
    if (!aot::op_traits(op.call.kind).fusible) {  // a checkpointed matmul: run again into a buffer
      Kernel k;
      k.name = op.call.name + ".recompute";
      k.kind = op.call.kind;
      k.flops = op.call.flops;
      k.layer = op.layer;
      for (int r : reads) {
        k.reads.push_back(r);
      }
      const int b = new_buffer(op.call.name + ".recomputed", v, op.layer);
      k.writes = {b};
      m_plan.kernels.push_back(std::move(k));
      reads = {b};
    }
    m_recomputed[vi] = reads;
    m_recompute_done[vi] = true;
    return reads;
  }
  bool is_grad_buffer(int b) const {
    return std::find(m_grad_buffer.begin(), m_grad_buffer.end(), b) != m_grad_buffer.end();
  }
  // A triton kernel computing `reads` into a new buffer shaped like value `like`.
  int realize(const std::vector<int>& reads, int like, const std::string& name, int layer) {
    if (reads.size() == 1 && is_grad_buffer(reads[0]) &&
        m_plan.buffers[static_cast<std::size_t>(reads[0])].size_bytes ==
            m_g.values[static_cast<std::size_t>(like)].size_bytes) {
      return reads[0];
    }
    Kernel k;
    k.name = name;
    k.kind = "triton_backward";
    k.layer = layer;
    k.in_place_ok = true;
    k.reads = reads;
    const int b = new_buffer(name, like, layer);
    k.writes = {b};
    m_plan.kernels.push_back(std::move(k));
    return b;
  }
  void accumulate(int u, const std::vector<int>& reads, int layer) {
    const std::size_t ui = static_cast<std::size_t>(u);
    merge(m_grad[ui], reads);
    m_grad_set[ui] = true;
    if (m_grad[ui].size() > kRealizeAccReadsThreshold) {  // a sum re-reading too many buffers is realized
      m_grad[ui] = {realize(m_grad[ui], u, m_g.name + ".grad_sum", layer)};
    }
  }
  void lower_op(std::size_t i) {
    const CapturedOp& op = m_g.ops[i];
    std::vector<int> grad_out;
    std::vector<int> outs_with_grad;
    for (int v : m_g.op_outputs[i]) {
      if (m_grad_set[static_cast<std::size_t>(v)]) {
        merge(grad_out, m_grad[static_cast<std::size_t>(v)]);
        outs_with_grad.push_back(v);
      }
    }
    if (outs_with_grad.empty()) {
      return;
    }
    std::vector<int> saved_reads;
    for (int k : op.call.saved.inputs) {
      merge(saved_reads, need(m_g.op_inputs[i].at(static_cast<std::size_t>(k))));
    }
    for (int k : op.call.saved.outputs) {
      merge(saved_reads, need(m_g.op_outputs[i].at(static_cast<std::size_t>(k))));
    }
    std::vector<int> targets;  // inputs that get a gradient
    for (std::size_t k = 0; k < m_g.op_inputs[i].size(); ++k) {
      const int u = m_g.op_inputs[i][k];
      const GradRule rule = k < op.call.backward.grads.size() ? op.call.backward.grads[k] : GradRule{};
      if (m_g.values[static_cast<std::size_t>(u)].requires_grad && rule.kind != GradRule::Kind::kNone &&
          std::find(targets.begin(), targets.end(), u) == targets.end()) {
        targets.push_back(u);
      }
    }
    const aot::OpTraits t = aot::op_traits(op.call.kind);
    if (t.fusible) {
      std::vector<int> contribution = grad_out;
      merge(contribution, saved_reads);
      for (int u : targets) {
        accumulate(u, contribution, op.layer);
      }
    } else {
      // an extern kernel reads its incoming gradient from memory, and writes its input gradients
      Kernel k;
      k.name = op.call.name + ".backward";
      k.kind = op.call.kind + "_backward";
      k.flops = 2.0 * op.call.flops;
      k.layer = op.layer;
      for (int v : outs_with_grad) {
        merge(k.reads,
              {realize(m_grad[static_cast<std::size_t>(v)], v, op.call.name + ".grad_output", op.layer)});
      }
      merge(k.reads, saved_reads);
      k.scratch_bytes = op.call.backward.temp_bytes;
      if (m_workspace_bytes > 0 &&
          (op.call.kind == "mm" || op.call.kind == "addmm" || op.call.kind == "bmm")) {
        Buffer ws;  // the autograd thread's first cuBLAS call
        ws.name = "cublas_workspace.autograd_thread";
        ws.size_bytes = std::exchange(m_workspace_bytes, 0);
        ws.dtype = DType::kUInt8;
        ws.category = TensorCategory::kWorkspace;
        ws.graph_output = true;
        k.writes.push_back(add(std::move(ws)));
      }
      std::vector<std::pair<int, int>> made;
      for (int u : targets) {
        const int b = new_buffer(m_g.name + "." + std::to_string(u) + ".grad", u, op.layer);
        k.writes.push_back(b);
        made.emplace_back(u, b);
      }
      if (is_matmul(op.call.kind)) {
        std::vector<Bytes> sizes;
        for (int b : k.reads) {
          sizes.push_back(m_plan.buffers[static_cast<std::size_t>(b)].size_bytes);
        }
        for (int b : k.writes) {
          sizes.push_back(m_plan.buffers[static_cast<std::size_t>(b)].size_bytes);
        }
        m_matmuls.push_back(std::move(sizes));
      }
      m_plan.kernels.push_back(std::move(k));
      for (const auto& [u, b] : made) {
        accumulate(u, {b}, op.layer);
      }
    }
    for (int v : outs_with_grad) {
      m_grad[static_cast<std::size_t>(v)].clear();
      m_grad_set[static_cast<std::size_t>(v)] = false;
    }
  }
  void finalize(int u) {
    const std::size_t ui = static_cast<std::size_t>(u);
    if (!m_grad_set[ui] || m_result[ui] >= 0) {
      return;
    }
    const int b = realize(m_grad[ui], u, m_g.name + ".grad_input", m_g.values[ui].layer);
    m_plan.buffers[static_cast<std::size_t>(b)].graph_output = true;
    m_result[ui] = b;
  }

  const CompiledGraph& m_g;
  Bytes m_workspace_bytes;
  GraphPlan m_plan;
  std::vector<int> m_saved_buffer;
  std::vector<std::vector<int>> m_recomputed;
  std::vector<bool> m_recompute_done;
  std::vector<std::vector<int>> m_grad;  // per value: the buffers its gradient is computed from
  std::vector<bool> m_grad_set;
  std::vector<int> m_grad_buffer;  // buffers that hold a gradient (the tangent's too)
  std::vector<int> m_result;
  std::vector<std::vector<Bytes>> m_matmuls;
};

std::vector<TensorId> run_backward(EagerTape& tape, const CompiledGraph& g, InductorProcess& process,
                                   const std::vector<TensorId>& grads_out, std::vector<TensorId> saved) {
  std::vector<TensorId> grads(g.grad_inputs.size(), kNoTensor);
  if (grads_out.empty() || grads_out[0] == kNoTensor) {
    for (TensorId s : saved) {
      tape.release(s);
    }
    return grads;
  }
  const bool cudagraphs = uses_cudagraphs(process.mode);
  BackwardLowering lowering(g, saved, grads_out[0], tape.take_backward_workspace_bytes(),
                            cudagraphs && !tape.in_graph_pool(grads_out[0]));
  GraphPlan plan = lowering.lower();
  plan.graph_pool = cudagraphs;
  add_matmul_autotuning(plan, lowering.matmuls(), process, g.name + ".backward");  // compiled at first use
  tape.set_backward_workspace_bytes(lowering.unused_workspace_bytes());
  if (plan.kernels.empty()) {
    tape.begin_op(g.name + ".backward", "CompiledFunctionBackward");
    for (const Buffer& b : plan.buffers) {
      tape.release(b.storage);
    }
    return grads;
  }
  const std::vector<TensorId> storage = inductor::emit(tape, plan);
  for (std::size_t k = 0; k < g.grad_inputs.size(); ++k) {
    const int b = lowering.result(g.grad_inputs[k]);
    grads[k] = b >= 0 ? storage[static_cast<std::size_t>(b)] : kNoTensor;
  }
  return grads;
}

}  // namespace

VarId compiled_call(EagerTape& tape, const std::string& name, const std::function<VarId()>& body,
                    InductorProcess& process) {
  tape.begin_capture();
  const VarId out = body();
  auto g = std::make_shared<CompiledGraph>(build_graph(tape, name, tape.end_capture(), out));
  partition(*g);

  ForwardLowering forward(*g, tape, process);
  const GraphPlan plan = forward.lower();
  const std::vector<TensorId> storage = inductor::emit(tape, plan);
  const TensorId out_storage = storage[static_cast<std::size_t>(forward.buffer_of(g->output))];
  tape.bind(out, out_storage);  // the graph's reference becomes the caller's variable's

  std::vector<TensorId> saved;
  for (int v : g->saved_list) {
    const int b = forward.buffer_of(v);
    const TensorId s = b >= 0 ? storage[static_cast<std::size_t>(b)]
                              : tape.storage(g->values[static_cast<std::size_t>(v)].var);
    if (g->primal(v) || v == g->output) {
      tape.retain(s);  // the node's own reference (a graph input, or the output the caller also holds)
    }
    saved.push_back(s);
  }
  std::vector<VarId> inputs;
  for (std::size_t v = 0; v < g->values.size(); ++v) {
    if (g->primal(static_cast<int>(v)) && g->values[v].requires_grad) {
      g->grad_inputs.push_back(static_cast<int>(v));
      inputs.push_back(g->values[v].var);
    }
  }
  if (!tape.requires_grad(out) || !tape.grad_enabled()) {
    for (TensorId s : saved) {
      tape.release(s);
    }
    return out;
  }
  tape.function_node(
      name, inputs, {out}, std::move(saved),
      [&tape, &process, g](const std::vector<TensorId>& grads_out, std::vector<TensorId> saved_storage) {
        return run_backward(tape, *g, process, grads_out, std::move(saved_storage));
      });
  return out;
}

}  // namespace vramsim
