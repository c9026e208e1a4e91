// PyTorch FSDP2 (torch.distributed.fsdp.fully_shard; _fully_shard/_fsdp_param_group.py and
// _fsdp_collectives.py) applied to each decoder layer and to the root module, as torchtitan does. Each
// parameter is sharded on its own along dim 0 (a DTensor with Shard(0)), dim 0 padded to a multiple of the
// shard group; a unit's parameters are still gathered by one all-gather.
//   full-shard    fully_shard(reshard_after_forward=True)   (FSDP1 FULL_SHARD, ZeRO-3)
//   shard-grad-op fully_shard(reshard_after_forward=False)  (FSDP1 SHARD_GRAD_OP, ZeRO-2)
//   hybrid-shard  a 2-D mesh: full-shard within a node (gpus_per_node ranks), replicated across nodes
// The root is not resharded after forward (lazy init sets its reshard_after_forward to False).
//
// Memory, as FSDP2's design has it ("lower and deterministic GPU memory by avoiding recordStream"):
//   * unshard(): the all-gather output, one flat buffer for the unit, is allocated on the all-gather copy-in
//     stream (the local shards are copied into its own slice), and the all-gather runs on the all-gather
//     stream;
//   * wait_for_unshard(): the compute stream waits for the all-gather, then copies the output out into each
//     parameter's unsharded tensor, allocated on the compute stream (foreach_all_gather_copy_out);
//   * in forward the output is kept (comm_ctx.all_gather_state) until the next unit's wait_for_unshard, which
//     makes the all-gather streams wait for this copy-out's event and only then drops it (the root's
//     post-forward drops the last one); in backward the streams wait and it is dropped at once. Either way
//     the free is ordered on its own stream, so the next all-gather reuses the block at once: no
//     record_stream, no deferred free, no rate limiter;
//   * reshard frees the unsharded parameters on the compute stream, in stream order.
// Backward always prefetches the next unit's all-gather (FSDP2 has no other mode). Gradients are
// reduce-scattered to the shard after each unit's backward through one copied-in input, kept until the next
// reduce-scatter (ReduceScatterPath::kFsdp2ReduceScatterStream).
// Under torch.distributed.pipelining every backward of a stage but its last in the step runs with
// set_requires_gradient_sync(False) and set_reshard_after_backward(False) (stage.py
// backward_maybe_with_nosync): post_backward keeps the parameters unsharded and the unsharded gradients
// accumulating; with a reduce_dtype other than the gradients' they are upcast into unsharded_accumulated_grad
// (FSDPParam.to_accumulated_grad_if_needed) and later micro-batches' gradients added to it
// (accumulate_unsharded_grad_if_needed); the last backward reduce-scatters the accumulated gradients.
// Mixed precision on a model built in fp32 (MixedPrecisionPolicy(param_dtype=bf16), torchtitan's default:
// set_fp32_sharded_parameters): each sharded parameter is fp32 (FSDPParam._init_sharded_param keeps the
// module's dtype, padded along dim 0: padded_sharded_param = param.new_zeros(padded_sharded_size)) and the
// optimizer steps it. unshard() casts the unit's shards to param_dtype into one flat buffer on the copy-in
// stream (_fsdp_collectives.py _get_param_all_gather_inputs: flat_foreach_copy_input = torch.empty(...,
// dtype=param_dtype), _foreach_copy_), copies that into the all-gather output's slice and drops it
// (foreach_all_gather: `del param_all_gather_inputs`); foreach_reduce casts the reduce-scatter output to
// orig_dtype (fp32), so the gradient shards are fp32 too.
// CPUOffloadPolicy (--offload params; fully_shard(offload_policy=CPUOffloadPolicy()), PyTorch 2.4+): the
// sharded parameters live on the host, pinned (FSDPParam._init_sharded_param: .cpu(), .pin_memory()), and
// the optimizer steps them there. unshard() copies each parameter's shard to the GPU on the copy-in stream
// (FSDPParam.all_gather_inputs: sharded_param_data.to(self.device, non_blocking=True), then
// _to_dtype_if_needed to param_dtype; the foreach fast path of _get_param_all_gather_inputs excludes
// offload_to_cpu) and drops them after the copy-in (`del param_all_gather_inputs`); foreach_reduce copies
// each gradient shard to the host (new_sharded_grad.to("cpu")) and the GPU keeps no gradient.
// torchtitan's apply_fsdp without pipeline parallelism (--fsdp2-last-layer keep,
// fsdp2_keep_last_layer_unsharded) passes reshard_after_forward=False for the last decoder layer only ("FSDP
// would prefetch it immediately"): its unsharded parameters stay from its forward through the loss until its
// backward, whose pre_backward then finds them gathered (no all-gather), and post_backward reshards them.
// Expert parallelism (set_expert_parameters), as torchtitan's apply_fsdp runs it
// (torchtitan/models/llama4/infra/parallelize.py at 1e8f9acd1, used by deepseek_v3 and qwen3 too): the routed
// experts of each MoE layer, already split over the ep ranks (ExpertParallel._partition_fn: Shard(0) on the
// ep mesh), are fully_shard-ed over the efsdp mesh (dp_shard x cp / ep ranks, x tp when etp = 1 lends the
// tp ranks to ep; Shard(1) when efsdp x ep > num_experts), every other parameter over the whole shard group;
// torchtitan then sets explicit forward
// prefetching (each block prefetches the next block and its experts: set_modules_to_forward_prefetch, "as
// D2H syncs in EP could interfere with implicit prefetching in FSDP"), and the same backward prefetching
// FSDP2 does on its own. Here the experts are each expert's own tensors sharded along their rows (the
// bytes of torchtitan's Shard(1) of the [experts, ff, d] w1/w2/w3; Shard(0) of whole experts differs only
// in padding), gathered, reduce-scattered and resharded with their block's other parameters rather than as
// a separate FSDP unit: in backward torchtitan reduce-scatters the experts' gradients when their own
// backward ends, before the block's attention backward.
// A parameter whose local tensor is a tensor subclass with FSDP2's extension is all-gathered as what its
// fsdp_pre_all_gather returns (ParameterUnit::all_gather_inputs: torchao's NF4Tensor its three inner tensors,
// float8 all-gather the float8 shard), each with its own unsharded tensor; the unit's buffer is their bytes.
// Not modelled: reshard_after_forward as an int.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/parallel/data_parallel.h"

namespace vramsim {
namespace {

constexpr StreamId kComputeStream = 0;
constexpr StreamId kAllGatherCopyInStream = 3;  // comm_ctx.all_gather_copy_in_stream
constexpr StreamId kAllGatherStream = 4;        // comm_ctx.all_gather_stream

class Fsdp2 final : public DataParallelScheme {
 public:
  Fsdp2(const DataParallelOptions& o, std::string_view strategy)
      : m_name(fmt::format("fsdp2-{}", strategy)),
        m_reshard_after_forward(strategy != "shard-grad-op"),
        m_keep_last_layer(o.fsdp2_keep_last_layer_unsharded),
        m_shard_ranks(strategy == "hybrid-shard" ? std::min(o.world_size, o.gpus_per_node) : o.world_size),
        m_offload(o.offload_params),
        m_grads(m_shard_ranks, o.offload_params,
                o.fsdp2_copy_in_on_reduce_scatter_stream
                    ? ReduceScatterPath::kFsdp2CopyInOnReduceScatterStream
                    : ReduceScatterPath::kFsdp2ReduceScatterStream,
                o.fsdp_reduce_dtype),
        m_grads_reduce_dtype(o.fsdp_reduce_dtype) {}
  std::string_view name() const override { return m_name; }
  // With fp32 shards the parameters' tape storage is empty: construct() makes the shards. With
  // CPUOffloadPolicy the shards are on the host.
  std::int64_t resident_parameter_numel(std::int64_t numel) const override {
    return m_fp32_shards || m_offload ? 0 : shard_numel(numel, m_shard_ranks);
  }
  int optimizer_state_shards() const override { return m_shard_ranks; }
  int parameter_state_shards(VarId p) const override { return ranks(p); }
  void set_expert_parameters(const std::set<VarId>& experts, int ep, int borrowed_tp) override {
    if (ep <= 1 || experts.empty()) {
      return;
    }
    // ParallelDims.build_mesh: efsdp = fsdp x tp / (etp x ep) ranks, fsdp = dp_shard x cp
    const std::int64_t ranks = std::int64_t{m_shard_ranks} * borrowed_tp;
    if (ranks % ep != 0) {
      throw InputError(
          borrowed_tp == 1
              ? fmt::format("--ep {}: does not divide the {} ranks FSDP2 shards over (torchtitan's "
                            "expert-parallel ranks are some of the dp_shard x cp ranks: efsdp = dp_shard x "
                            "cp / ep)",
                            ep, m_shard_ranks)
              : fmt::format("--ep {}: does not divide the {} FSDP2 ranks x --tp {} (torchtitan's "
                            "expert-parallel ranks with etp 1 are some of the dp_shard x cp x tp ranks: "
                            "efsdp = dp_shard x cp x tp / ep)",
                            ep, m_shard_ranks, borrowed_tp));
    }
    if (m_offload) {
      throw InputError(
          fmt::format("--ep {}: with CPUOffloadPolicy (--offload params): not modelled (vramsim)", ep));
    }
    if (!m_fp32_shards) {  // torchtitan builds the model in fp32: MixedPrecisionPolicy(param_dtype=bf16)
      throw InputError(fmt::format(
          "--ep {}: FSDP2 expert parallelism without fp32 sharded parameters is not modelled (torchtitan "
          "builds the model in fp32 and computes in bf16 through MixedPrecisionPolicy: give --precision "
          "bf16 with its fp32 master weights, the default)",
          ep));
    }
    m_experts = experts;
    m_expert_ranks = static_cast<int>(ranks / ep);
    m_forward_prefetch = true;
    for (const VarId p : experts) {
      m_grads.set_parameter_world(p, m_expert_ranks);
    }
  }
  bool optimizer_on_host() const override { return m_offload; }
  bool host_optimizer_fp32() const override { return false; }
  // CPUOffloadPolicy: each parameter's padded shard in its sharded dtype, and its gradient shard.
  void add_host_model_states(const EagerTape& tape, const std::vector<VarId>& params,
                             HostMemory& host) const override {
    if (!m_offload) {
      return;
    }
    for (VarId p : params) {
      const DType dtype = sharded_parameter_dtype(tape, p, m_fp32_shards);
      const Bytes shard =
          static_cast<Bytes>(shard_numel(padded_numel(tape, p), ranks(p))) * dtype_size_bytes(dtype);
      host.parameters += shard;
      host.gradients += tape.requires_grad(p) ? shard : 0;
    }
  }
  bool set_sharded_grad_hook(EagerTape::ParameterHook hook) override {
    m_grads.set_post_accumulate_grad_hook(std::move(hook));
    return true;
  }
  void set_fp32_sharded_parameters(bool fp32) override {
    m_fp32_shards = fp32;
    m_grads.set_fp32_sharded_parameters(fp32);
  }
  bool fp32_sharded_parameters() const override { return m_fp32_shards; }

  void construct(EagerTape& tape, const std::vector<ParameterUnit>& units) override {
    m_units = units;
    for (const ParameterUnit& unit : units) {
      m_last_layer = std::max(m_last_layer, unit.layer);
      check_all_gather_inputs(tape, unit);
    }
    if (!m_fp32_shards || m_offload) {
      return;
    }
    tape.begin_op("fully_shard.init_sharded_param", "new_zeros");
    for (const ParameterUnit& unit : units) {  // each unit's FSDPParams, the sharded DTensors' local tensors
      for (VarId p : unit.params) {
        const DType dtype = sharded_parameter_dtype(tape, p, true);
        const std::int64_t elements = shard_numel(padded_numel(tape, p), ranks(p));
        m_sharded.push_back(tape.allocate(tape.name(p) + ".sharded",
                                          static_cast<Bytes>(elements) * dtype_size_bytes(dtype), dtype,
                                          TensorCategory::kParameter));
      }
    }
  }
  void pre_forward(EagerTape& tape, const ParameterUnit& unit) override {
    unshard(tape, unit);
    wait_for_unshard(tape, unit, /*forward=*/true);
    // torchtitan's explicit forward prefetch under expert parallelism (FSDPState._pre_forward then
    // _prefetch_unshard of _states_to_forward_prefetch): the embeddings prefetch layer 0, each layer the next
    const auto next = static_cast<std::size_t>(unit.layer + 1);
    if (m_forward_prefetch && next + 1 < m_units.size()) {
      unshard(tape, m_units[next]);
    }
  }
  void post_forward(EagerTape& tape, const ParameterUnit& unit) override {
    const bool kept = m_keep_last_layer && unit.layer == m_last_layer;  // torchtitan's last block
    if (m_reshard_after_forward && unit.layer >= 0 && !kept) {
      reshard(tape, unit);
    }
    if (unit.layer < 0 && m_state) {  // the root's _post_forward frees the last unit's kept output
      free_output(tape, *m_state);
      m_state.reset();
    }
  }
  void pre_backward(EagerTape& tape, const ParameterUnit& unit) override {
    unshard(tape, unit);  // nothing to do if it was prefetched or never resharded
    wait_for_unshard(tape, unit, /*forward=*/false);
    const auto next = static_cast<std::size_t>(unit.layer - 1);
    if (unit.layer > 0 && next < m_units.size()) {  // _backward_prefetch
      unshard(tape, m_units[next]);
    }
    m_grads.before_unit_backward(tape, unit);
  }
  void post_backward(EagerTape& tape, const ParameterUnit& unit) override {
    if (unit.layer < 0) {
      return;  // the root finishes at the end of backward
    }
    accumulate_unsharded_grads(tape, unit);
    if (!m_sync) {
      return;
    }
    m_grads.reduce_scatter(tape, unit, fmt::format("layers.{}.fsdp.reduce_scatter", unit.layer));
    reshard(tape, unit);
  }
  void end_backward(EagerTape& tape, const ParameterUnit& root) override {
    accumulate_unsharded_grads(tape, root);
    if (!m_sync) {
      return;
    }
    m_grads.reduce_scatter(tape, root, "root.fsdp.reduce_scatter");
    m_grads.finish_backward(tape);
    reshard(tape, root);
  }
  void set_requires_gradient_sync(bool sync) override { m_sync = sync; }

 private:
  struct AllGatherResult {
    TensorId output = kNoTensor;
    OpId all_gather = kNoOp;
  };
  struct AllGatherState {  // comm_ctx.all_gather_state: an output kept until the next unit's copy-out
    TensorId output = kNoTensor;
    OpId copy_out = kNoOp;
    std::string unit;
  };

  // foreach_all_gather: the copy-in allocates the output and fills this rank's slice; the all-gather fills
  // the rest.
  void unshard(EagerTape& tape, const ParameterUnit& unit) {
    if (unit.params.empty() || m_unsharded.count(unit.layer) != 0 || m_results.count(unit.layer) != 0) {
      return;
    }
    // the unit's all-gather output, and this rank's slice of it: every parameter's all-gather inputs (in
    // bytes when their dtypes differ: _get_all_gather_input_metadatas)
    Bytes bytes = 0, local = 0;
    for (VarId p : unit.params) {
      for (const AllGatherInput& in : gathered(tape, unit, p)) {
        const Bytes b = storage_bytes(in.numel, in.dtype, tape.shape(p));
        bytes += b;
        local += b / static_cast<Bytes>(ranks(p));  // each input's padded numel is a multiple of ranks(p)
      }
    }
    const DType dtype = tape.dtype(unit.params.front());
    AllGatherResult r;
    tape.set_stream(kAllGatherCopyInStream);
    std::vector<TensorId> inputs;  // CPUOffloadPolicy: param_all_gather_inputs, one per parameter
    if (m_offload) {
      copy_shards_to_device(tape, unit, inputs);
    }
    TensorId cast = kNoTensor;  // the shards cast to param_dtype (fp32 shards only)
    if (!m_offload && m_fp32_shards && sharded_parameter_dtype(tape, unit.params.front(), true) != dtype) {
      tape.begin_op(unit_name(unit) + ".fsdp.all_gather_inputs", "_foreach_copy_");
      cast = tape.allocate(unit_name(unit) + ".flat_foreach_copy_input", local, dtype,
                           TensorCategory::kCommunication);
    }
    tape.begin_op(unit_name(unit) + ".fsdp.all_gather_copy_in", "all_gather_copy_in");
    r.output =
        tape.allocate(unit_name(unit) + ".all_gather_output", bytes, dtype, TensorCategory::kCommunication);
    if (cast != kNoTensor) {
      tape.use(cast);
      tape.release(cast);  // del param_all_gather_inputs, on the copy-in stream
    }
    for (TensorId t : inputs) {
      tape.use(t);
      tape.release(t);
    }
    tape.set_stream(kAllGatherStream);
    r.all_gather = tape.begin_op(unit_name(unit) + ".fsdp.all_gather", "all_gather_into_tensor");
    tape.wait_for(r.output);
    tape.set_comm_bytes(bytes - local);
    tape.set_stream(kComputeStream);
    m_results[unit.layer] = r;
  }

  // FSDPParam.all_gather_inputs under CPUOffloadPolicy: each shard's device copy, then its cast to
  // param_dtype when that differs (the device copy goes once cast).
  void copy_shards_to_device(EagerTape& tape, const ParameterUnit& unit, std::vector<TensorId>& inputs) {
    tape.begin_op(unit_name(unit) + ".fsdp.all_gather_inputs.to_device", "_to_copy");
    for (VarId p : unit.params) {
      const std::int64_t elements = shard_numel(padded_numel(tape, p), ranks(p));
      const DType sharded = sharded_parameter_dtype(tape, p, m_fp32_shards);
      TensorId t = tape.allocate(tape.name(p) + ".sharded.to(device)",
                                 static_cast<Bytes>(elements) * dtype_size_bytes(sharded), sharded,
                                 TensorCategory::kCommunication);
      if (sharded != tape.dtype(p)) {  // _to_dtype_if_needed(..., param_dtype)
        const TensorId cast = tape.allocate(tape.name(p) + ".sharded.to(param_dtype)",
                                            static_cast<Bytes>(elements) * dtype_size_bytes(tape.dtype(p)),
                                            tape.dtype(p), TensorCategory::kCommunication);
        tape.release(t);
        t = cast;
      }
      inputs.push_back(t);
    }
  }

  void wait_for_unshard(EagerTape& tape, const ParameterUnit& unit, bool forward) {
    const auto it = m_results.find(unit.layer);
    if (it == m_results.end()) {
      return;
    }
    const AllGatherResult r = it->second;
    m_results.erase(it);
    if (forward && m_state) {  // the previous unit's output, kept for this copy-out to overlap with
      free_output(tape, *m_state);
      m_state.reset();
    }
    const OpId copy_out =
        tape.begin_op(unit_name(unit) + ".fsdp.all_gather_copy_out", "split_with_sizes_copy");
    tape.stream_wait_for(r.all_gather);
    tape.use(r.output);
    std::vector<TensorId>& params = m_unsharded[unit.layer];
    for (VarId p : unit.params) {  // init_all_gather_outputs: one tensor per all-gather input
      for (const AllGatherInput& in : gathered(tape, unit, p)) {
        params.push_back(tape.allocate(tape.name(p) + ".unsharded" + in.suffix,
                                       storage_bytes(in.numel, in.dtype, tape.shape(p)), in.dtype,
                                       TensorCategory::kCommunication));
      }
    }
    const AllGatherState state{r.output, copy_out, unit_name(unit)};
    if (forward) {
      m_state = state;
    } else {
      free_output(tape, state);
    }
  }

  // _wait_all_gather_streams_on_event(copy-out event), then the reference goes: the free is ordered on the
  // output's own stream.
  static void free_output(EagerTape& tape, const AllGatherState& state) {
    tape.set_stream(kAllGatherCopyInStream);
    tape.begin_op(state.unit + ".fsdp.free_all_gather_output", "wait_event");
    tape.stream_wait_for(state.copy_out);
    tape.release(state.output);
    tape.set_stream(kComputeStream);
  }

  // accumulate_unsharded_grad_if_needed, then (without sync) to_accumulated_grad_if_needed: the unsharded
  // gradients of this backward are added to the unit's accumulated ones in the reduce dtype, or become them.
  // With sync the accumulated gradient becomes .grad again for the reduce-scatter. Gradients already in the
  // reduce dtype (or without one) accumulate in .grad itself (AccumulateGrad adds in place).
  void accumulate_unsharded_grads(EagerTape& tape, const ParameterUnit& unit) {
    for (VarId p : unit.params) {
      const TensorId g = tape.grad(p);
      const auto acc = m_accumulated.find(p);
      if (g == kNoTensor || !m_grads_reduce_dtype || *m_grads_reduce_dtype == tape.dtype(p)) {
        if (g == kNoTensor && acc != m_accumulated.end() && m_sync) {
          tape.attach_grad(p, acc->second);
          m_accumulated.erase(acc);
        }
        continue;
      }
      if (m_sync && acc == m_accumulated.end()) {
        continue;  // one backward only: foreach_reduce casts while copying in
      }
      tape.begin_op(tape.name(p) + ".fsdp.accumulate_unsharded_grad",
                    acc == m_accumulated.end() ? "to" : "add_");
      tape.use(g);
      TensorId target = kNoTensor;
      if (acc == m_accumulated.end()) {
        target = tape.allocate(tape.name(p) + ".unsharded_accumulated_grad",
                               tensor_bytes(tape.shape(p), *m_grads_reduce_dtype), *m_grads_reduce_dtype,
                               TensorCategory::kGradient);
        m_accumulated[p] = target;
      } else {
        target = acc->second;
        tape.use(target);
      }
      tape.release(tape.detach_grad(p));
      if (m_sync) {
        tape.attach_grad(p, target);
        m_accumulated.erase(p);
      }
    }
  }

  void reshard(EagerTape& tape, const ParameterUnit& unit) {
    const auto it = m_unsharded.find(unit.layer);
    if (it == m_unsharded.end()) {
      return;
    }
    tape.begin_op(unit_name(unit) + ".fsdp.reshard", "free_storage");
    for (TensorId t : it->second) {
      tape.release(t);
    }
    m_unsharded.erase(it);
  }

  // The ranks parameter p is sharded over: the shard group, or efsdp for a routed expert.
  int ranks(VarId p) const { return m_experts.count(p) != 0 ? m_expert_ranks : m_shard_ranks; }
  // Dim 0 padded to a multiple of the shard group (FSDPParam's padded sharded size x the group).
  std::int64_t padded_numel(const EagerTape& tape, VarId p) const {
    const Shape& shape = tape.shape(p);
    const std::int64_t n = numel(shape);
    if (shape.empty() || shape.front() == 0) {
      return n;
    }
    const std::int64_t rows = shape.front(), group = ranks(p);
    return shard_numel(rows, static_cast<int>(group)) * group * (n / rows);
  }
  // What FSDP2 all-gathers for p, each input's elements padded as the rank's shards are: p itself padded
  // along dim 0, or its fsdp_pre_all_gather inputs; an input of the parameter's shape pads with it, the
  // others split evenly (check_all_gather_inputs).
  std::vector<AllGatherInput> gathered(const EagerTape& tape, const ParameterUnit& unit, VarId p) const {
    const std::int64_t padded = padded_numel(tape, p);
    const auto it = unit.all_gather_inputs.find(p);
    if (it == unit.all_gather_inputs.end()) {
      return {AllGatherInput{"", padded, tape.dtype(p)}};
    }
    std::vector<AllGatherInput> inputs = it->second;
    for (AllGatherInput& in : inputs) {
      if (in.numel == numel(tape.shape(p))) {
        in.numel = padded;
      }
    }
    return inputs;
  }
  // FSDPParam.all_gather_inputs: where FSDP pads the parameter's shard, the extension's inputs must have the
  // padded sharded size. An input of another shape than the parameter's (NF4Tensor's flat inner tensors, cut
  // by its own split) cannot be padded: its parameter's dim 0 and its elements must split evenly.
  void check_all_gather_inputs(const EagerTape& tape, const ParameterUnit& unit) const {
    for (const auto& [p, inputs] : unit.all_gather_inputs) {
      const Shape& shape = tape.shape(p);
      const int world = ranks(p);
      for (const AllGatherInput& in : inputs) {
        if (in.numel == numel(shape) ||
            (!shape.empty() && shape.front() % world == 0 && in.numel % world == 0)) {
          continue;
        }
        throw InputError(fmt::format(
            "--fsdp2: {}{} ({} elements, dim 0 of {}) does not split evenly over {} ranks; FSDP2 refuses an "
            "uneven shard of a tensor subclass (\"fsdp_pre_all_gather must return all-gather inputs with the "
            "padded sharded size\", torch/distributed/fsdp/_fully_shard/_fsdp_param.py)",
            tape.name(p), in.suffix, in.numel, shape.empty() ? 0 : shape.front(), world));
      }
    }
  }

  std::string m_name;
  bool m_reshard_after_forward;
  bool m_keep_last_layer;  // --fsdp2-last-layer keep: no reshard after the last decoder layer's forward
  int m_last_layer = -1;   // the highest decoder-layer unit of this rank (the root is -1)
  int m_shard_ranks;
  std::set<VarId> m_experts;  // set_expert_parameters: the routed experts, sharded over efsdp
  int m_expert_ranks = 1;     // efsdp = the shard group x borrowed tp ranks / ep
  bool m_forward_prefetch = false;
  bool m_offload;  // CPUOffloadPolicy
  bool m_fp32_shards = false;
  std::vector<TensorId> m_sharded;  // the fp32 sharded parameters construct() made
  GradientShards m_grads;
  std::vector<ParameterUnit> m_units;
  std::map<int, AllGatherResult> m_results;          // issued, not yet copied out
  std::map<int, std::vector<TensorId>> m_unsharded;  // per unit: each parameter's unsharded tensor
  std::optional<AllGatherState> m_state;
  std::optional<DType> m_grads_reduce_dtype;
  bool m_sync = true;                       // set_requires_gradient_sync
  std::map<VarId, TensorId> m_accumulated;  // unsharded_accumulated_grad, between backwards without sync
};

}  // namespace

std::unique_ptr<DataParallelScheme> make_fsdp2(const DataParallelOptions& options,
                                               std::string_view strategy) {
  return std::make_unique<Fsdp2>(options, strategy);
}

}  // namespace vramsim
