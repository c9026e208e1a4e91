// Records what PyTorch eager mode does to device memory while model code runs, into an OpGraph.
//
// The model (torch_ops.h and the emitters) calls one method per aten op, in the order the Python executes
// them, and says when a Python variable lets go of a tensor (drop). The tape keeps PyTorch's reference
// counting, so a tensor is freed exactly when the real one would be:
//   * storage refs  : Python references, autograd's saved references, gradient buffer entries; views share
//                     their base's storage. The last unref frees the storage after the current op.
//   * autograd      : an op whose input requires grad (with grad mode on) records a node that keeps its saved
//                     tensors. backward() runs the nodes in reverse creation order (the engine's
//                     sequence-number order), allocates each input gradient, accumulates gradient buffers the
//                     way InputBuffer::accumulate does (in place when the buffer holds the only reference),
//                     steals or accumulates into parameter .grad the way AccumulateGrad does, and releases
//                     every node's saved tensors after it runs.
//   * checkpoint    : checkpoint(body) runs body without saving, keeps only its input, and replays body with
//                     grad on inside the backward (torch.utils.checkpoint). With a selective policy
//                     (selective_checkpoint.h) the outputs of the ops it saves are cached in the forward and
//                     handed back, not recomputed, in the replay.
//
// Cost: O(1) per recorded op and per reference change; backward is linear in the nodes.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "sim/core/chunked_vector.h"

#include "sim/graph/op_graph.h"
#include "sim/torch/cuda_reduce.h"
#include "sim/torch/cuda_sort.h"

namespace vramsim {

class SelectiveCheckpointPolicy;

using Shape = std::vector<std::int64_t>;
using VarId = std::uint32_t;
inline constexpr VarId kNoVar = std::numeric_limits<VarId>::max();

// The largest tensor the simulator models: 1 PiB, ~7000 times an H200. Sizes computed from --batch, --seq and
// a config.json's dimensions are checked against it, so no later sum of tensor sizes can wrap.
inline constexpr Bytes kMaxTensorBytes = Bytes{1} << 50;

// Elements of a tensor of this shape. Throws InputError when the product overflows int64.
std::int64_t numel(const Shape& shape);
// `elements` of `dtype` in bytes. Throws InputError (naming the shape) above kMaxTensorBytes.
Bytes storage_bytes(std::int64_t elements, DType dtype, const Shape& shape);
// numel(shape) elements of `dtype` in bytes, checked as storage_bytes().
Bytes tensor_bytes(const Shape& shape, DType dtype);

// How backward produces the gradient of one forward input.
struct GradRule {
  enum class Kind : std::uint8_t {
    kAlloc,        // a new tensor of the input's shape and dtype
    kPassThrough,  // the incoming gradient itself (views, add, clone): no allocation
    kNone,         // not differentiable w.r.t. this input
  };
  Kind kind = Kind::kAlloc;
  // A broadcast input: the formula gives the gradient in the output's shape (kAlloc: a new tensor;
  // kPassThrough: the incoming gradient) and the engine's validate_outputs sums it to the input's shape
  // (at::sum_to), a new tensor, after the node returns.
  bool sum_to_input = false;
  // The gradient reaches the input as a view of the tensor the formula made (a matmul that folded a batched
  // input into rows reshapes the gradient back). Autograd's view keeps its base alive, so the storage has
  // two owners and InputBuffer::accumulate never adds into it in place (can_accumulate_inplace).
  bool view = false;
  // How the new gradient lies in memory (cuda_reduce.h's MemoryOrder): contiguous (a matmul's result), as
  // the incoming gradient lies (an elementwise formula: TensorIterator keeps its first operand's, `grad`'s,
  // strides), or with the last dimension outermost (the input gradient of einsum(weight, x)).
  enum class Layout : std::uint8_t { kContiguous, kLikeGrad, kLastDimOutermost };
  Layout layout = Layout::kContiguous;
};

struct BackwardRule {
  std::vector<GradRule> grads;    // one per forward input; missing entries mean kAlloc
  std::vector<Bytes> temp_bytes;  // scratch alive while the backward node runs (the node's peak extra)
  // The order in which the node computes its inputs' gradients, as input indices (empty: input order).
  // PyTorch's generated backward (Functions.cpp) evaluates the formulas of derivatives.yaml sorted by the
  // argument names (tools/autograd/load_derivatives.py: `sorted(defn.keys())`): mm(self, mat2) and
  // bmm compute mat2's gradient first, mul(self, other) other's, addmm(self, mat1, mat2) mat1, mat2, self.
  std::vector<int> order;
  // Kernel scratch in the order the backward's C++ makes it (sort buffers, CUB temporary storage), before
  // and after the gradients are allocated; what a script leaves allocated is freed with temp_bytes.
  std::vector<ScratchStep> scratch_before_grads;
  std::vector<ScratchStep> scratch_after_grads;
  // Used instead of scratch_after_grads when the incoming gradient is not contiguous (a kernel that copies
  // it first, e.g. index_put_'s values), if not empty.
  std::vector<ScratchStep> scratch_after_grads_strided;
};

struct OutputSpec {
  std::string suffix;  // appended to the op name for the tensor name ("" for the main output)
  Shape shape;
  DType dtype = DType::kFloat32;
  bool differentiable = true;  // false for indices, masks, statistics
  MemoryOrder order = MemoryOrder::kContiguous;
  // A tensor subclass whose gradient has another dtype than its data: torchao's Float8TrainingTensor
  // (one byte per element) takes gradients in its _orig_dtype. Unset: the gradient has `dtype`.
  std::optional<DType> grad_dtype = std::nullopt;
};

// Which tensors an op's backward node keeps: inputs by index, outputs by index.
struct SavedSpec {
  std::vector<int> inputs;
  std::vector<int> outputs;
};

// How a checkpointed region's replay in backward ends (EagerTape::checkpoint):
//   kKeepOutputs : reentrant checkpoint (torch.utils.checkpoint's CheckpointFunction.backward, Megatron's
//                  tensor_parallel.checkpoint): the whole region runs again and its `outputs` live until the
//                  region's backward (torch.autograd.backward(outputs, ...)) is done.
//   kWhole       : non-reentrant checkpoint without early stop (PyTorch 1.13's _checkpoint_without_reentrant:
//                  `_unused = function(*args)`; 2.x under set_checkpoint_early_stop(False): recompute_fn):
//                  the whole region runs again; its output is dropped as the recomputation returns.
//   kEarlyStop   : non-reentrant checkpoint with early stop (PyTorch >= 2.1's default,
//   pytorch/pytorch#96866):
//                  the recomputation raises _StopRecomputationError once every tensor the forward saved is
//                  recomputed, so the ops after the last saved tensor never run (an op whose saved tensors
//                  are all inputs is stopped while autograd packs them, before its kernel).
enum class CheckpointRecompute : std::uint8_t { kKeepOutputs, kWhole, kEarlyStop };

// Saved-tensor hooks that move what autograd saves to pinned host memory.
enum class ActivationOffload : std::uint8_t {
  kNone,
  // torch.autograd.graph.save_on_cpu(pin_memory=True): every saved tensor is copied to the host at once;
  // backward copies each back into a fresh GPU tensor for its node, freed when the node is done.
  kSaveOnCpu,
  // torchtune's OffloadActivations (use_streams=True; torchtune/training/_activation_offloading.py): tensors
  // of at least 1 KiB that are not parameters are copied on a side stream; the GPU tensor stays referenced in
  // a forward stash until a pack 5 saves later (max_fwd_stash_size); parameters and small tensors are kept.
  // In backward a tensor still in the stash is used as it is; the others are copied back on the side stream
  // into its pool and kept until the next node that unpacks has run (or the end of backward).
  kTorchtuneStreams,
};

// Pinned host memory of save_on_cpu's packed tensors (torch.empty(..., pin_memory=True) through PyTorch's
// CachingHostAllocator), in bytes.
class PinnedHostUsage {
 public:
  void allocate(Bytes size_bytes);
  void free(Bytes size_bytes);
  Bytes live_bytes = 0;
  Bytes peak_bytes = 0;      // the most requested bytes alive at once
  Bytes reserved_bytes = 0;  // pinned blocks the allocator holds (it returns none to the OS: no empty_cache)

 private:
  std::map<Bytes, int> m_live_blocks;  // per power-of-two block size
  std::map<Bytes, int> m_most_blocks;
};

struct OpCall {
  std::string name;
  std::string kind;
  std::vector<VarId> inputs;
  std::vector<OutputSpec> outputs;
  SavedSpec saved;
  BackwardRule backward;
  std::vector<Bytes> scratch_bytes;  // forward scratch freed at the op's end
  // A CUDA reduction (Reduce.cuh) of inputs[0] over its last dimension: its global-reduction staging
  // buffer and semaphores, allocated after the outputs and freed (semaphores first) when it has launched.
  ReduceStaging reduce_staging;
  double flops = 0.0;
};

// One op of code run under torch.compile's capture (EagerTape::begin_capture): recorded, not run. Its outputs
// are variables without storage until the compiled graph gives them one.
struct CapturedOp {
  OpCall call;  // views and in-place writes too, as ops ("view", the write's kind)
  std::vector<VarId> outputs;
  bool view = false;            // the output aliases inputs[0]
  bool needs_grad = false;      // grad mode on and an input requires grad: the op has a backward
  bool must_recompute = false;  // inside torch.utils.checkpoint: tagged PREFER_RECOMPUTE
  bool must_save = false;       // a selective checkpoint policy's MUST_SAVE
  int layer = -1;
  Bytes workspace_bytes = 0;  // the process's first cuBLAS call: its workspace, allocated by this kernel
};

class EagerTape {
 public:
  explicit EagerTape(OpGraph& graph);

  // ---- context of the ops recorded next
  void set_step(int step, int micro_batch = 0) {
    m_step = step;
    m_micro_batch = micro_batch;
  }
  int step() const { return m_step; }
  void set_phase(Phase phase) { m_phase = phase; }
  Phase phase() const { return m_phase; }
  void set_layer(int layer) { m_layer = layer; }
  int layer() const { return m_layer; }
  // The CUDA stream the ops recorded next run on (`with torch.cuda.stream(s)`); 0 is the compute stream.
  void set_stream(StreamId stream) { m_stream = stream; }
  StreamId stream() const { return m_stream; }
  bool grad_enabled() const { return m_grad_enabled; }
  // save_on_cpu's pinned host memory so far.
  const PinnedHostUsage& pinned_host() const { return m_pinned_host; }
  // torch.autograd.graph.save_on_cpu(pin_memory=True) around the ops recorded next: every tensor an op saves
  // for backward is copied to pinned host memory (pack) instead of being kept on the GPU, and copied back
  // into a fresh GPU tensor when its backward node runs (unpack), freed when the node is done. Parameters are
  // packed too (the hook sees every saved tensor), and so are torch.utils.checkpoint's saved inputs (it saves
  // them before entering its own hooks), so hooks and checkpointing nest as in PyTorch.
  void set_save_on_cpu(bool on) { m_offload = on ? ActivationOffload::kSaveOnCpu : ActivationOffload::kNone; }
  void set_activation_offload(ActivationOffload kind) { m_offload = kind; }
  // How the replays of the checkpoints recorded next end (CheckpointRecompute; kKeepOutputs by default).
  void set_checkpoint_recompute(CheckpointRecompute r) { m_checkpoint_recompute = r; }
  static constexpr StreamId kOffloadStream = 3;  // torchtune's OffloadActivations.s1
  void set_grad_enabled(bool on) { m_grad_enabled = on; }

  // ---- variables
  // A persistent leaf that requires grad. `resident_numel` (< numel(shape)): the elements kept on the device,
  // a data-parallel shard; the full tensor then exists only as the scheme's gathered buffer.
  VarId parameter(const std::string& name, const Shape& shape, DType dtype, std::int64_t resident_numel = -1);
  VarId input(const std::string& name, const Shape& shape, DType dtype);  // persistent, no grad
  // A fresh leaf that requires grad, made by op `kind` (a pipeline stage's received hidden states:
  // torch.empty, recv, requires_grad_()). One reference; its gradient is discarded at the end of backward.
  VarId received(const std::string& name, const std::string& kind, const Shape& shape, DType dtype);
  void freeze(VarId param) { m_vars[param].requires_grad = false; }
  // tensor.requires_grad_(True) on a tensor no autograd node made (a leaf): its gradient is computed and
  // released with the graph.
  void requires_grad_(VarId leaf) { m_vars[leaf].requires_grad = m_vars[leaf].node < 0; }
  // What a tensor's storage is for in the bill (a KV cache keeps states made as temporaries).
  void set_category(VarId v, TensorCategory c) {
    m_graph.tensor(m_vars[v].storage).category = c;
  }  // param.requires_grad_(False)
  // A fresh tensor that needs no grad (zeros, arange, masks): one allocation.
  VarId constant(const std::string& name, const std::string& kind, const Shape& shape, DType dtype);
  std::vector<VarId> op(const OpCall& call);
  VarId op1(const OpCall& call) { return op(call).at(0); }
  // A view of `base` (rearrange, transpose, slice, reshape that needs no copy): no allocation. Backward
  // passes the gradient through unless `base_grad` says it allocates (slice / select backward).
  VarId view(VarId base, const Shape& shape, const std::string& name,
             GradRule base_grad = {GradRule::Kind::kPassThrough});
  // An in-place write into `target` (rotated[..., 0] = expr): no allocation. Returns the tensor's new
  // version (same storage, one Python reference) whose grad_fn reads `target`'s old version and `inputs`.
  VarId inplace(const std::string& name, const std::string& kind, VarId target,
                const std::vector<VarId>& inputs, const BackwardRule& rule);
  void hold(VarId v);  // one more Python reference
  void drop(VarId v);  // a Python reference goes away; frees the storage if it was the last reference
  void drop(std::initializer_list<VarId> vs) {
    for (VarId v : vs) {
      drop(v);
    }
  }

  const Shape& shape(VarId v) const { return *m_vars[v].shape; }
  DType dtype(VarId v) const { return m_vars[v].dtype; }
  // The dtype of v's gradient: its dtype, or a tensor subclass's other one (OutputSpec::grad_dtype).
  DType grad_dtype(VarId v) const { return m_vars[v].grad_dtype.value_or(m_vars[v].dtype); }
  MemoryOrder memory_order(VarId v) const { return m_vars[v].order; }
  // What a CUDA reduction of `v` over its last dimension stages in global memory on this tape's device.
  ReduceStaging last_dim_reduce_staging(VarId v, Bytes acc_bytes = 0) const;
  bool requires_grad(VarId v) const { return m_vars[v].requires_grad; }
  bool is_parameter(VarId v) const { return m_vars[v].is_parameter; }
  TensorId storage(VarId v) const { return m_vars[v].storage; }
  // By value: most variables share their storage tensor's name (Var::name_is_storage), which the graph may
  // move as it grows.
  std::string name(VarId v) const { return var_name(v); }

  // ---- autograd
  void backward(VarId loss);  // loss.backward(); releases the graph
  // torch.autograd.backward(root, grad_tensors=seed) over the nodes [begin, end) only (one micro-batch's
  // graph while others are in flight): the seed is made by op `seed_kind` (ones_like for a loss, recv for a
  // gradient another pipeline stage sent); releases those nodes.
  void backward(VarId root, std::size_t begin, std::size_t end, const std::string& seed_name,
                const std::string& seed_kind);
  // torch.distributed.pipelining's stage_backward (torch/distributed/pipelining/_backward.py, PyTorch of
  // 2024-12): torch.autograd.backward(stage_output, grad_tensors=seed) over the nodes [begin, end), where
  // `seed` is a tensor the caller keeps (the stage's receive buffer for that gradient, which the backward
  // reads and does not free; kNoVar: a loss, seeded with ones_like), and the gradient that reaches `leaf`
  // (the stage's receive buffer of its input, a leaf that requires grad: AccumulateGrad stores it in
  // leaf.grad) is handed to the caller with one reference instead of being freed. Returns that gradient's
  // storage, or kNoTensor when none reached `leaf` (kNoVar: none kept).
  TensorId backward_keeping_leaf_grad(VarId root, std::size_t begin, std::size_t end, VarId seed, VarId leaf);
  using CheckpointBody = std::function<VarId(const std::vector<VarId>&)>;
  // torch.utils.checkpoint(body, *inputs): body must not drop its inputs; returns body's output. With `sac`,
  // context_fn=create_selective_checkpoint_contexts(sac): the outputs of the ops it saves stay referenced
  // from the forward until the replay takes them (or the graph is released). The first `tensor_args` inputs
  // are tensor arguments, which checkpoint saves through save_for_backward and so through the saved-tensor
  // hooks around it (offloaded under save_on_cpu); the rest stand for tensors inside non-tensor arguments
  // (Hugging Face's position_embeddings tuple), which its ctx keeps on the GPU as they are.
  VarId checkpoint(const std::string& name, const std::vector<VarId>& inputs, const CheckpointBody& body,
                   const SelectiveCheckpointPolicy* sac = nullptr,
                   std::size_t tensor_args = static_cast<std::size_t>(-1));
  // The device whose reduction kernels sum broadcast gradients (their global-reduction staging buffers).
  void set_cuda_device(const CudaDevice& device) { m_device = device; }
  const CudaDevice& cuda_device() const { return m_device; }
  // Called once at the first matmul of the autograd thread: cuBLAS allocates that thread's workspace.
  void set_backward_workspace_bytes(Bytes bytes) { m_backward_workspace_bytes = bytes; }
  // The autograd thread's workspace still to be made (0 once made); the caller makes it now.
  Bytes take_backward_workspace_bytes() { return std::exchange(m_backward_workspace_bytes, 0); }
  std::size_t node_count() const { return m_nodes.size(); }
  // Destroys the autograd nodes [begin, end) not yet run (their saved tensors are released): what happens
  // when the last Python reference to a graph's output goes away.
  void release_nodes(std::size_t begin, std::size_t end);
  TensorId grad(VarId param) const { return m_vars[param].grad; }  // kNoTensor while .grad is None
  void set_grad_to_none(VarId param);                              // zero_grad(set_to_none=True)
  // Data parallelism: takes .grad away from the parameter (its reference moves to the caller; kNoTensor when
  // None), and sets .grad to a storage whose reference the caller hands over.
  TensorId detach_grad(VarId param);
  void attach_grad(VarId param, TensorId storage);
  // Called when backward() enters and leaves the nodes of a decoder layer (-1: nodes outside the layers),
  // in the order backward runs them.
  // Tensor.register_post_accumulate_grad_hook on every parameter: called once AccumulateGrad has stored a
  // gradient into .grad (the hook may step an optimizer and set .grad to None).
  using ParameterHook = std::function<void(VarId param)>;
  void set_post_accumulate_grad_hook(ParameterHook hook) { m_post_accumulate_grad = std::move(hook); }
  // Around every op and backward node that reads parameters, one op at a time: the granularity at which
  // DeepSpeed ZeRO-3's module hooks (pre/post forward, pre/post backward of each submodule that owns
  // parameters) gather and release them. `before` runs before the op or node is recorded (it may record ops
  // of its own), `after` once it is done; `params` are the parameters it reads (views resolved to their
  // parameter), without repeats; `forward` is false for backward nodes (a checkpoint's replay is forward).
  using ParameterUseHook = std::function<void(const std::vector<VarId>& params, bool forward)>;
  void set_parameter_use_hooks(ParameterUseHook before, ParameterUseHook after) {
    m_before_parameter_use = std::move(before);
    m_after_parameter_use = std::move(after);
  }
  using LayerHook = std::function<void(int layer)>;
  void set_backward_layer_hooks(LayerHook enter, LayerHook leave) {
    m_enter_layer = std::move(enter);
    m_leave_layer = std::move(leave);
  }

  // ---- torch.compile (torch_compile.h)
  // The ops, views, factories and in-place writes recorded next are captured (Dynamo's trace) instead of run;
  // Python references are not counted (the captured graph is functional). Raw allocations still happen.
  void begin_capture();
  std::vector<CapturedOp> end_capture();
  bool capturing() const { return m_capturing; }
  // The op captured last makes the cuBLAS handle allocate its workspace when the compiled graph runs it.
  void capture_workspace(Bytes bytes) { m_captured.back().workspace_bytes = bytes; }
  // A captured variable takes `storage`, which the compiled graph made; no reference changes hands.
  void bind(VarId v, TensorId storage) { m_vars[v].storage = storage; }
  // A torch.autograd.Function node (AOTAutograd's CompiledFunction): `inputs` get gradients from `backward`,
  // which receives the incoming gradients (kNoTensor where none) and the saved storages, one reference each
  // (it must release every one), and returns per input a gradient holding one reference, or kNoTensor.
  using FunctionBackward = std::function<std::vector<TensorId>(const std::vector<TensorId>& grads_out,
                                                               std::vector<TensorId> saved)>;
  // `saved`: one reference each, handed to the node. The Function saves them with ctx.save_for_backward, so
  // the saved-tensor hooks active now pack them (torchtune's OffloadActivations, save_on_cpu) as they pack an
  // eager op's; `backward` receives each one unpacked, in `saved` order.
  void function_node(const std::string& name, const std::vector<VarId>& inputs,
                     const std::vector<VarId>& outputs, std::vector<TensorId> saved,
                     FunctionBackward backward);

  // ---- raw tensors outside autograd (optimizer states, workspaces)
  // Names by value: a caller's temporary (node.name + ".backward") moves into the op or tensor instead of
  // being copied (issue 40: heap allocations per op).
  OpId begin_op(std::string name, std::string kind, double flops = 0.0);
  TensorId allocate(std::string name, Bytes size_bytes, DType dtype,
                    TensorCategory category);      // 1 ref
  void release(TensorId storage);                  // drops one reference
  void use(TensorId storage);                      // the current op reads it
  void use_once(TensorId storage);                 // use(), unless the current op has read it already
  void retain(TensorId storage) { ref(storage); }  // one more reference (the caller's)
  // storage.record_stream(stream): its free is deferred until `stream`'s work issued before the free has run.
  void record_stream(TensorId storage, StreamId stream) { m_graph.tensor(storage).record_stream = stream; }
  // The storage came from a CUDA graph's private pool (kCudaGraphPoolStream).
  void set_graph_pool(TensorId storage) { m_graph.tensor(storage).graph_pool = true; }
  bool in_graph_pool(TensorId storage) const { return m_graph.tensor(storage).graph_pool; }
  TensorCategory category_of(TensorId storage) const { return m_graph.tensor(storage).category; }
  // The host blocks on `op`'s completion before issuing the current op (Event.synchronize()).
  void host_wait_for(OpId op) { m_graph.op(m_current_op).host_waits_for = op; }
  // The current op is a collective: `bytes` cross the GPU links (it takes their time, not the roofline's).
  void set_comm_bytes(Bytes bytes) { m_graph.op(m_current_op).comm_bytes = bytes; }
  // The current op's stream waits for `op` (an event recorded after it) before running the current op.
  void stream_wait_for(OpId op) { m_graph.op(m_current_op).stream_waits_for = op; }
  // The current op runs after `storage`'s producer without reading it (a stream wait on a collective's
  // output): a dependency that moves no bytes.
  void wait_for(TensorId storage);
  bool alive(TensorId storage) const { return m_refs.at(storage) > 0; }

  // End of the run: every tensor still referenced is marked persistent.
  void finish();

 private:
  friend class LayerStamp;  // layer_stamp.h: appends a recorded layer's region for the next layers

  // Note [Interned shapes]: a variable's shape is one of the tape's distinct shapes (m_shapes; the layers
  // repeat theirs), shared by every variable of that shape: a gradient, a stamped layer's variable or an op's
  // output takes a pointer instead of a copy of a vector (issue 40: one allocation per variable).
  struct ShapeHash {
    std::size_t operator()(const Shape& s) const noexcept;
  };
  const Shape* intern_shape(const Shape& shape);
  inline static const Shape kNoShape{};

  struct Var {
    TensorId storage = kNoTensor;
    const Shape* shape = &kNoShape;  // in m_shapes (or kNoShape)
    DType dtype = DType::kFloat32;
    std::optional<DType> grad_dtype;  // OutputSpec::grad_dtype; unset: `dtype`
    bool requires_grad = false;
    bool is_parameter = false;
    bool view = false;  // a gradient that is a view of another tensor (GradRule::view)
    MemoryOrder order = MemoryOrder::kContiguous;
    int node = -1;              // grad_fn: index into m_nodes, -1 for leaves
    TensorId grad = kNoTensor;  // parameters: .grad storage
    // Note [Names shared with the graph]: a variable is mostly the tensor an op just allocated under the
    // same name, and an autograd node is named as the op that recorded it. Such a variable keeps no copy
    // (`name_is_storage`: its name is its storage tensor's, var_name()), and such a node names that op
    // (`name_op`, node_name()): no string built, copied or freed per variable and node (issue 40: a
    // stamped layer decoded four names per op). `name` holds the others' names.
    std::string name;
    bool name_is_storage = false;
  };
  // A node's inputs, outputs and saved storages: most nodes have at most four of each.
  using NodeIds = boost::container::small_vector<std::uint32_t, 4>;
  struct Node {
    std::string name;      // unless name_op is set
    OpId name_op = kNoOp;  // the op whose name is this node's (the op that recorded it)
    std::string kind;
    int layer = -1;
    double flops = 0.0;  // of the forward op; the backward op's FLOPs derive from it (backward_flops)
    // Kept in the node, not on the heap, up to their inline sizes (issue 40: three allocations per node, and
    // a stamped layer appends a few hundred nodes).
    NodeIds inputs;
    NodeIds outputs;
    NodeIds saved;                 // storages (TensorId)
    std::vector<TensorId> packed;  // saved to the host by save_on_cpu: the device tensor is not kept
    ActivationOffload offload = ActivationOffload::kNone;  // how `packed` was packed
    BackwardRule rule;
    CheckpointBody checkpoint_body;                                     // set for checkpoint nodes
    CheckpointRecompute recompute = CheckpointRecompute::kKeepOutputs;  // checkpoint nodes
    FunctionBackward function_backward;                                 // set for function nodes
    // Function nodes: where each of ctx.save_for_backward's tensors went, in its order: k >= 0 is saved[k]
    // (kept on the GPU), k < 0 is packed[-k - 1] (packed by saved-tensor hooks).
    std::vector<int> function_slots;
    // Its parameter inputs are counted in m_pending_parameter_uses (until it has run or is released).
    bool counts_parameter_uses = false;
    // Selective checkpointing: the policy, and the cached outputs of each saved op in forward order (one
    // reference each until the replay takes them).
    const SelectiveCheckpointPolicy* sac = nullptr;
    std::vector<std::vector<TensorId>> sac_cache;
    bool done = false;
  };
  // The selective-checkpoint region being run: its policy, forward (caching) or replay (taking from the
  // cache), and the policy's per-pass op counts.
  struct SacRegion {
    const SelectiveCheckpointPolicy* policy = nullptr;
    bool replay = false;
    std::map<std::string, int, std::less<>> occurrences;
    std::vector<std::vector<TensorId>> cache;
    std::size_t next = 0;  // the replay's next entry of `cache`
  };

  // `shape`: interned (intern_shape, or another variable's).
  VarId new_var(TensorId storage, const Shape* shape, DType dtype, std::string name);
  // A variable named as its storage tensor (Note [Names shared with the graph]).
  VarId new_var_named_as_storage(TensorId storage, const Shape* shape, DType dtype);
  // A new variable of `storage` with the name of `like` (shared when `like` shares it with that storage).
  VarId new_var_named_as(TensorId storage, const Shape* shape, DType dtype, VarId like);
  // The names of Note [Names shared with the graph]. References into the graph's arrays: valid until the
  // graph grows (use them at once).
  const std::string& var_name(VarId v) const;
  const std::string& node_name(const Node& n) const {
    return n.name_op != kNoOp ? m_graph.op(n.name_op).name : n.name;
  }
  std::vector<VarId> capture(const OpCall& call, bool view = false);
  // `unpacked`: torchtune's unpack of node.packed (empty otherwise), one reference each, taken over.
  void execute_function(std::size_t index, const std::vector<VarId>& grads_out,
                        std::vector<TensorId> unpacked);
  TensorId new_storage(std::string name, Bytes size_bytes, DType dtype, TensorCategory category);
  // Runs a scratch script; the allocations it leaves alive are appended to `live`.
  void run_scratch(const std::vector<ScratchStep>& steps, const std::string& name,
                   std::vector<TensorId>& live);
  void ref(TensorId s);
  void unref(TensorId s);
  void free_if_unreferenced(TensorId s);
  void save(Node& node, TensorId s);
  bool offload_pack(Node& node, TensorId s);
  void release_packed(Node& node);  // its packed host tensors go with its saved variables
  // torchtune's unpack: the tensors a node uses from `packed` (stashed ones as they are, the others copied
  // back on the offload stream), allocated before its backward op.
  std::vector<TensorId> unpack_torchtune(const Node& node);
  // torchtune's node hook after a node that unpacked: the forward stash is dropped and the previous such
  // node's tensors freed; this node's are kept (`unpacked`).
  void after_torchtune_unpack(std::vector<TensorId> unpacked);
  void release_offload_stashes();  // the end of backward (wait_and_del_remaining_references)
  // Takes `node` by rvalue: one move into m_nodes (a Node is large: its lists in place, its rule, hooks).
  int add_node(Node&& node, const std::vector<VarId>& outputs);
  // add_node for a node already appended in place (m_nodes.emplace_back(), filled, then this with its
  // index): the outputs, the parameter-use counts and the outputs' grad_fn. Returns `index`.
  int register_node(std::size_t index, const std::vector<VarId>& outputs);
  void run_nodes(std::size_t begin, std::size_t end, bool layer_hooks = false);
  void count_parameter_uses(VarId root, std::size_t begin, std::size_t end);
  TensorId finish_backward(std::size_t begin, std::size_t end, VarId leaf);
  void execute(std::size_t index);
  void execute_checkpoint(std::size_t index, VarId grad_out, std::vector<TensorId> unpacked);
  // kEarlyStop: the replay's ops after the one that saved its last tensor (from that op on when it saved only
  // inputs) did not run: their outputs and scratch get no memory, their FLOPs none. `ops_begin` and
  // `tensors_begin`: the replay's first op and tensor.
  void stop_recomputation_early(OpId ops_begin, TensorId tensors_begin);
  // The replay of an op the selective policy saved: its outputs are the cached tensors; nothing runs.
  std::vector<VarId> take_cached_outputs(const OpCall& call);
  // The parameters `inputs` read (empty when no parameter-use hooks are set).
  template <typename Ids>
  std::vector<VarId> parameters_read(const Ids& inputs) const;
  std::vector<VarId> run_op(const OpCall& call, bool sac_saved);
  void execute_node(std::size_t index);
  // The autograd node of an op whose outputs are `outs`, when grad mode is on and an input requires grad.
  void add_op_node(const OpCall& call, const std::vector<VarId>& outs);
  VarId take_grad(VarId output);
  void deliver(VarId input, VarId grad);
  void add_to_input_buffer(VarId input, VarId grad);  // InputBuffer::add into m_grad_buffer
  void accumulate_grad(VarId param, VarId grad);      // store_grad, then the post-accumulate hook
  // Note [AccumulateGrad's input buffer]: a parameter's gradient goes to its AccumulateGrad node, which runs
  // once, when every node that sends it one has run; until then the engine sums them in the node's input
  // buffer (InputBuffer::add). So a weight read by several nodes (tied embeddings, chunked output) gets one
  // .grad update and one post-accumulate-grad hook call per backward.
  void deliver_to_parameter(VarId param, VarId grad);
  // The node has run (or will not): its parameter inputs stop waiting on it; a parameter waiting on no
  // other node runs its AccumulateGrad with the buffered sum.
  void release_parameter_uses(std::size_t index);
  void store_grad(VarId param, VarId grad);
  VarId new_grad(VarId like, std::string name);
  VarId sum_to(VarId full, VarId input);
  void run_reduce_staging(const ReduceStaging& staging, const std::string& name);
  void disown(TensorId s);  // drops a reference without freeing (the next owner decides)

  OpGraph& m_graph;
  // Appended, never moved (ChunkedVector): the tape reads a variable while it adds the next one, so
  // references into m_vars stay valid, and growing moves no Var (issue 40).
  ChunkedVector<Var> m_vars;
  // Appended, never moved (ChunkedVector): a Node is a few hundred bytes, and a vector's growth moved each
  // one about once more (issue 40). References stay valid while nodes are added.
  ChunkedVector<Node> m_nodes;
  std::vector<int> m_refs;  // per storage (TensorId)
  std::vector<bool> m_freed;
  std::unordered_map<VarId, VarId> m_grad_buffer;  // var -> its accumulated gradient (leaves: until taken)
  std::unordered_set<Shape, ShapeHash> m_shapes;   // Note [Interned shapes]: nodes, so pointers stay valid
  // parameter -> the nodes not yet run that will send it a gradient (one per input edge)
  std::unordered_map<VarId, int> m_pending_parameter_uses;
  OpId m_current_op = kNoOp;
  int m_step = 0;
  int m_micro_batch = 0;
  int m_layer = -1;
  Phase m_phase = Phase::kSetup;
  StreamId m_stream = 0;
  bool m_grad_enabled = true;
  ActivationOffload m_offload = ActivationOffload::kNone;
  SacRegion m_sac;
  bool m_capturing = false;
  CheckpointRecompute m_checkpoint_recompute = CheckpointRecompute::kKeepOutputs;
  // While a checkpoint's replay runs: the last op that saved a tensor, and whether it saved its own output.
  bool m_replaying = false;
  OpId m_replay_last_save = kNoOp;
  bool m_replay_saved_output = false;
  bool m_capture_recompute = false;                          // capturing a checkpointed body
  const SelectiveCheckpointPolicy* m_capture_sac = nullptr;  // its selective policy
  std::map<std::string, int, std::less<>> m_capture_sac_occurrences;
  std::vector<CapturedOp> m_captured;
  std::uint64_t m_pack_id = 0;                                 // torchtune's tensor_id
  std::deque<std::pair<std::uint64_t, TensorId>> m_fwd_stash;  // torchtune's fwd_stash (a reference each)
  std::vector<TensorId> m_bwd_stash;                           // torchtune's bwd_tensor_stash
  PinnedHostUsage m_pinned_host;
  Bytes m_backward_workspace_bytes = 0;  // allocated at the next backward matmul, then 0
  CudaDevice m_device;
  ParameterHook m_post_accumulate_grad;
  ParameterUseHook m_before_parameter_use;
  ParameterUseHook m_after_parameter_use;
  std::unordered_map<TensorId, VarId> m_parameter_of_storage;
  // Tensors AccumulateGrad renamed (store_grad steals a gradient as a parameter's .grad): their names before,
  // and the variable count then. A variable made before the rename that shares its storage's name keeps the
  // old one, as it kept its own copy before Note [Names shared with the graph].
  struct Renamed {
    std::string name;
    std::size_t vars_before = 0;
  };
  std::unordered_map<TensorId, Renamed> m_renamed;
  LayerHook m_enter_layer;
  LayerHook m_leave_layer;
};

}  // namespace vramsim
