// The op graph of simulated training steps: ops as vertices in execution order, data dependencies as edges,
// and the table of tensors the ops allocate. This is the only header that includes Boost.Graph.
//
// Storage: ops, tensors and edges are flat arrays appended in execution order (a prediction records tens of
// thousands of each, and a Boost adjacency_list allocates per edge and per vertex: issue 40's profile had
// its edges at a tenth of a prediction); dependency_graph() builds the Boost graph from them on demand.
//
// Contract:
//   * Op ids are vertex indices and equal execution order: op i runs before op i + 1 (one stream, the order
//     PyTorch eager issues them).
//   * Every tensor is one allocation request: it is allocated when its producer op starts and freed after the
//     last of its consumers, unless `persistent` (alive at the end of the run: parameters, gradients kept by
//     zero_grad(set_to_none=False), optimizer states, workspaces, the input batch).
//   * A consumer is an op that reads the tensor or holds a reference to it; the last consumer is the op after
//     which the last reference went away (a Python variable reassigned, autograd releasing saved tensors).
//     Edges carry the tensor: producer -> consumer, kind kData when the consumer reads it, kLifetime when it
//     only ends its life.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/graph/adjacency_list.hpp>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"

namespace vramsim {

using OpId = std::uint32_t;
using TensorId = std::uint32_t;
inline constexpr OpId kNoOp = std::numeric_limits<OpId>::max();
inline constexpr TensorId kNoTensor = std::numeric_limits<TensorId>::max();
inline constexpr StreamId kNoRecordStream = std::numeric_limits<StreamId>::max();

// kSetup: model and batch moved to the device before the first step.
enum class Phase : std::uint8_t { kSetup, kForward, kLoss, kBackward, kOptimizer, kZeroGrad };
std::string_view phase_name(Phase p);

enum class TensorCategory : std::uint8_t {
  kParameter,
  kGradient,        // .grad of a parameter
  kOptimizerState,  // exp_avg, momentum_buffer, master weights, ...
  kActivation,      // a forward tensor autograd saved for backward
  kTemporary,       // everything transient: unsaved forward intermediates, activation gradients, op scratch
  kWorkspace,       // library workspaces (cuBLAS)
  kInput,           // the token batch
  kCommunication,   // collective buffers: DDP buckets, gathered parameters, gradient buckets
  kKvCache,         // model.generate()'s keys and values of past positions (the last)
};
std::string_view category_name(TensorCategory c);

struct Op {
  std::string name;  // "layers.3.attn.q_proj", "layers.3.attn.q_proj.backward", "optimizer.adamw.exp_avg"
  std::string kind;  // the aten-level operation: "mm", "mul", "softmax", "_foreach_sqrt", ...
  int step = 0;      // 1-based training step; 0 = setup
  int micro_batch = 0;
  int layer = -1;  // decoder layer, -1 outside the layers
  Phase phase = Phase::kForward;
  double flops = 0.0;
  Bytes bytes_moved = 0;  // bytes read + written
  StreamId stream = 0;
  // torch.cuda.Event.synchronize() before this op is issued: the host blocks until `host_waits_for` has run
  // on the device (FSDP's limit_all_gathers rate limiter). kNoOp: the host runs ahead.
  OpId host_waits_for = kNoOp;
  // stream.wait_event(e) before this op, e recorded right after `stream_waits_for` on its stream: this op's
  // stream runs it only after that op (a dependency without a tensor). kNoOp: none.
  OpId stream_waits_for = kNoOp;
  // A collective (all-gather, reduce-scatter, all-reduce): `comm_bytes` cross the GPU links, and the op
  // takes comm_bytes / link bandwidth on the device (step_timeline.cpp), not the roofline's time.
  Bytes comm_bytes = 0;
};

// The allocator model keeps free blocks per stream, and a CUDA graph's private pool is exactly such a set of
// blocks that no other allocation may take: graph-pool tensors are allocated as if on this stream.
inline constexpr StreamId kCudaGraphPoolStream = 64;

struct Tensor {
  TensorId id = kNoTensor;
  std::string name;
  Bytes size_bytes = 0;
  DType dtype = DType::kFloat32;
  TensorCategory category = TensorCategory::kTemporary;
  OpId producer = kNoOp;
  // In the order they were recorded (non-decreasing op ids). Most tensors have at most four (their readers
  // and the op that ends their life): kept in the tensor, not on the heap (issue 40: an allocation per
  // tensor, a tenth of a prediction's).
  using Consumers = boost::container::small_vector<OpId, 4>;
  Consumers consumers;
  bool persistent = false;
  int layer = -1;
  // tensor.record_stream(s) before the free: the memory returns to the allocator only once the work issued
  // on `record_stream` up to the free has run (spec ST2-ST3; a deferred free). kNoRecordStream: none.
  StreamId record_stream = kNoRecordStream;
  // Allocated from a CUDA graph's private memory pool (torch.compile's cudagraph trees): its blocks serve
  // only that pool's allocations and stay reserved for it.
  bool graph_pool = false;

  OpId last_consumer() const { return consumers.empty() ? producer : consumers.back(); }
};

enum class EdgeKind : std::uint8_t { kData, kLifetime };
struct DependencyEdge {
  TensorId tensor = kNoTensor;
  EdgeKind kind = EdgeKind::kData;
};

using OpAdjacency =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Op, DependencyEdge>;

// What one rank keeps in host (CPU) memory when it offloads, in requested bytes: the memory the process
// needs beside the GPU's. Filled by the step builder from the data-parallel scheme, the host optimizer and
// save_on_cpu.
struct HostMemory {
  Bytes parameters = 0;      // offloaded parameter partitions (ZeRO-Infinity offload_param, FSDP CPUOffload)
  Bytes master_weights = 0;  // DeepSpeed's fp32 partitions the host optimizer updates
  Bytes gradients = 0;       // gradient partitions copied to the host (DeepSpeed: fp32; FSDP: _cpu_grad)
  Bytes optimizer_states = 0;
  Bytes saved_activations = 0;         // save_on_cpu: the most packed tensors alive at once
  Bytes saved_activations_pinned = 0;  // the pinned blocks CachingHostAllocator holds for them
  Bytes model_states() const { return parameters + master_weights + gradients + optimizer_states; }
  Bytes total() const { return model_states() + saved_activations_pinned; }
};

class OpGraph {
 public:
  OpId add_op(Op op);
  // pre: t.producer is an existing op. Returns the new id (== index in tensors()).
  TensorId add_tensor(Tensor t);
  // pre: op >= the tensor's producer and >= its previous consumers (execution order).
  void add_consumer(TensorId tensor, OpId op, EdgeKind kind = EdgeKind::kData);
  // Room for this many more ops and tensors (no reallocation while the graph grows by that much).
  void reserve(std::size_t ops, std::size_t tensors);

  std::size_t op_count() const { return m_ops.size(); }
  const Op& op(OpId id) const { return m_ops[id]; }
  Op& op(OpId id) { return m_ops[id]; }
  const std::vector<Tensor>& tensors() const { return m_tensors; }
  const Tensor& tensor(TensorId id) const { return m_tensors[id]; }
  Tensor& tensor(TensorId id) { return m_tensors[id]; }
  // Every edge, producer -> consumer, in the order add_consumer() recorded them.
  struct Edge {
    OpId source = kNoOp;
    OpId target = kNoOp;
    DependencyEdge dependency;
  };
  const std::vector<Edge>& edges() const { return m_edges; }
  // The ops as the vertices (vertex i = op i, with its Op) and the edges as Boost.Graph edges, in the order
  // they were recorded. Builds a copy: O(ops + edges).
  OpAdjacency dependency_graph() const;

  // model.generate() (hf_generate.h): the KV cache's bytes when the last token was generated (0 otherwise).
  Bytes kv_cache_bytes = 0;
  // bitsandbytes' paged optimizers: state bytes in CUDA unified memory (cudaMallocManaged), outside the
  // caching allocator and so in none of its figures (optimizer.h).
  Bytes unified_memory_bytes = 0;
  HostMemory host_memory;  // offloading's CPU memory (one rank)

 private:
  std::vector<Op> m_ops;
  std::vector<Tensor> m_tensors;
  std::vector<Edge> m_edges;
};
}  // namespace vramsim
