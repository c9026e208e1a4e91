// Shared helpers for the graph tests: small models, the invariants every schedule must satisfy, and the
// peak rise of a trace.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sim/models/model_config.h"
#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/training/training_options.h"

namespace vramsim::test {

// A 2-layer model of the given preset's family and code with small dimensions (fast to build).
// The model run by kkaitlyn111's student code (the test fixture of kkaitlyn111_code.cpp), which most of the
// CS336 recordings ran.
inline ModelConfig kkaitlyn111(ModelConfig m) {
  m.code = "cs336-kkaitlyn111";
  return m;
}

inline ModelConfig tiny_model(const std::string& preset, std::int64_t n_kv_heads = 0) {
  ModelConfig m = model_preset(preset);
  m.vocab_size = 1000;
  m.d_model = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = n_kv_heads > 0 ? n_kv_heads : 4;
  m.head_dim = 16;
  m.d_ff = m.mlp == MlpKind::kGelu ? 256 : 172;
  m.max_positions = 256;
  return m;
}

// The sizes of the tensors made from index `first` on (only those named `name` when it is given), in creation
// order.
inline std::vector<Bytes> sizes_from(const OpGraph& g, std::size_t first, const std::string& name = "") {
  std::vector<Bytes> sizes;
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    if (name.empty() || g.tensors()[i].name == name) {
      sizes.push_back(g.tensors()[i].size_bytes);
    }
  }
  return sizes;
}

// The sizes of the tensors named `name`, in creation order.
inline std::vector<Bytes> sizes_named(const OpGraph& g, const std::string& name) {
  std::vector<Bytes> out;
  for (const Tensor& t : g.tensors()) {
    if (t.name == name) {
      out.push_back(t.size_bytes);
    }
  }
  return out;
}

// Bytes of the tensors of category `c` still alive at the end of the run.
inline Bytes persistent_bytes(const OpGraph& g, TensorCategory c) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == c && t.persistent) {
      total += t.size_bytes;
    }
  }
  return total;
}

// A GPT layer as Korthikanti et al. 2022 count it: GPT-2's architecture (LayerNorm, a GELU MLP of 4h, biases)
// with hidden size h, a heads, learned positions up to s, one GELU kernel saving its input.
inline ModelConfig megatron_gpt(std::int64_t h, std::int64_t a, std::int64_t s, int layers = 2) {
  ModelConfig m = model_preset("gpt2");
  m.name = "megatron-gpt";
  m.d_model = h;
  m.n_heads = a;
  m.n_kv_heads = a;
  m.head_dim = h / a;
  m.d_ff = 4 * h;
  m.n_layers = layers;
  m.vocab_size = 1024;  // does not enter the per-layer count
  m.max_positions = s;
  m.gelu = GeluKind::kPytorchTanh;
  return m;
}

// The paper's accounting: 16-bit activations, dropout on (1-byte masks), eager attention, fused kernels that
// save only the paper's tensors, no cuBLAS workspace.
inline TrainingOptions megatron_options(std::int64_t s, std::int64_t b) {
  TrainingOptions o;
  o.batch = b;
  o.seq = s;
  o.precision = Precision::kBf16;
  o.dropout = 0.1;
  o.attention = AttentionKind::kEager;
  o.megatron_accounting = true;
  o.cublas_workspace_bytes = 0;
  return o;
}

inline TrainingOptions small_options() {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 32;
  o.steps = 2;
  o.cublas_workspace_bytes = 0;
  return o;
}

// Every tensor is allocated once; a non-persistent one is freed exactly once, after its allocation and not
// before any op that reads it; parameters and optimizer states persist; live bytes never go negative.
inline void check_schedule_invariants(const OpGraph& g, const AllocationSchedule& s) {
  const std::size_t n = g.tensors().size();
  std::vector<int> allocs(n, 0), frees(n, 0);
  std::vector<std::size_t> alloc_at(n, 0), free_at(n, 0);
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const TensorId t = s.event_tensor[i];
    REQUIRE(s.events[i].addr == synthetic_address(t));
    if (s.events[i].action == TraceAction::kAlloc) {
      REQUIRE(allocs[t] == 0);
      ++allocs[t];
      alloc_at[t] = i;
    } else if (s.events[i].action == TraceAction::kFreeCompleted) {
      REQUIRE(allocs[t] == 1);
      REQUIRE(frees[t] == 0);
      ++frees[t];
      free_at[t] = i;
    }
    REQUIRE(s.live_bytes_after[i] >= 0);
  }
  std::int64_t persistent_bytes = 0;
  for (const Tensor& t : g.tensors()) {
    INFO(t.name);
    if (t.size_bytes == 0) {
      continue;  // an empty storage (a parameter whose shard lives in its FlatParameter): no allocation
    }
    REQUIRE(allocs[t.id] == 1);
    // Parameters and optimizer states persist, except the copies FSDP1's construction makes and frees
    // (_init_param_handle_from_module: each parameter moved to the GPU, flattened, sharded; ops "*.fsdp.init.*").
    const bool fsdp_init = g.op(t.producer).name.find(".fsdp.init.") != std::string::npos;
    if ((t.category == TensorCategory::kParameter || t.category == TensorCategory::kOptimizerState) &&
        !fsdp_init) {
      REQUIRE(t.persistent);
    }
    if (t.persistent) {
      REQUIRE(frees[t.id] == 0);
      persistent_bytes += static_cast<std::int64_t>(t.size_bytes);
      continue;
    }
    REQUIRE(frees[t.id] == 1);
    REQUIRE(free_at[t.id] > alloc_at[t.id]);
    for (OpId c : t.consumers) {  // no op touches the tensor after the op that freed it
      REQUIRE(c >= t.producer);
      REQUIRE(c <= t.last_consumer());
    }
  }
  REQUIRE(s.live_bytes_after.back() == persistent_bytes);
  // Every edge runs from the tensor's producer to one of its consumers, forward in execution order.
  // One edge per consumer other than the producer (add_consumer's contract), counted from the tensors.
  std::size_t consumer_edges = 0;
  for (const Tensor& t : g.tensors()) {
    consumer_edges += static_cast<std::size_t>(
        std::count_if(t.consumers.begin(), t.consumers.end(), [&t](OpId c) { return c != t.producer; }));
  }
  const OpAdjacency adjacency = g.dependency_graph();
  REQUIRE(boost::num_vertices(adjacency) == g.op_count());
  REQUIRE(boost::num_edges(adjacency) == consumer_edges);
  for (auto [it, end] = boost::edges(adjacency); it != end; ++it) {
    const DependencyEdge& e = adjacency[*it];
    const Tensor& t = g.tensor(e.tensor);
    REQUIRE(boost::source(*it, adjacency) == t.producer);
    const OpId target = static_cast<OpId>(boost::target(*it, adjacency));
    REQUIRE(target > t.producer);
    REQUIRE(target <= t.last_consumer());
  }
}

// The largest rise of live requested bytes over the start of `events` (alloc minus free_completed sizes).
inline std::int64_t peak_rise(const std::vector<TraceEvent>& events, std::size_t begin = 0,
                              std::size_t end = static_cast<std::size_t>(-1)) {
  std::int64_t live = 0, peak = 0;
  for (std::size_t i = begin; i < events.size() && i < end; ++i) {
    if (events[i].action == TraceAction::kAlloc) {
      live += static_cast<std::int64_t>(events[i].size_bytes);
    } else if (events[i].action == TraceAction::kFreeCompleted) {
      live -= static_cast<std::int64_t>(events[i].size_bytes);
    }
    peak = std::max(peak, live);
  }
  return peak;
}

inline std::vector<Bytes> alloc_sizes(const std::vector<TraceEvent>& events, std::size_t begin = 0,
                                      std::size_t end = static_cast<std::size_t>(-1)) {
  std::vector<Bytes> out;
  for (std::size_t i = begin; i < events.size() && i < end; ++i) {
    if (events[i].action == TraceAction::kAlloc) {
      out.push_back(events[i].size_bytes);
    }
  }
  return out;
}

}  // namespace vramsim::test
