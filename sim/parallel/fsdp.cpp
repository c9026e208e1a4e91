// PyTorch FSDP (torch.distributed.fsdp, FSDP1) with each decoder layer wrapped (transformer_auto_wrap_policy)
// and the rest of the model in the root unit. Each unit's parameters are one FlatParameter, padded to a
// multiple of the world size and sharded: a rank keeps 1/world of it.
//   full-shard    (FULL_SHARD)    all-gather the unit's flat parameter into an unsharded buffer before its
//                                 forward, free it after (reshard); gather again before its backward, free
//                                 after; gradients reduce-scattered after the unit's backward, the shard
//                                 kept.
//   shard-grad-op (SHARD_GRAD_OP) the same, but the unsharded buffer lives from the forward to the end of
//                                 the unit's backward (no reshard after forward).
//   no-shard      (NO_SHARD)      parameters and gradients whole; gradients all-reduced in place.
//   hybrid-shard  (HYBRID_SHARD)  full-shard within a node (gpus_per_node ranks), replicated across nodes:
//                                 a rank keeps 1/min(world, gpus_per_node) of each unit.
// The root unit is not resharded after forward (its parameters are needed first in backward): its buffer
// lives from the start of forward to the end of backward. Optimizer states follow the sharded parameters.
//
// Streams, as _runtime_utils.py runs them: the all-gather is issued on FSDP's unshard stream, so the
// unsharded buffer is a block of that stream's pool (spec ST1); the compute stream waits for it. Resharding
// calls _no_dispatch_record_stream(unsharded_flat_param, compute stream) before freeing its storage, so the
// block returns to the allocator only once the compute stream has run the unit's kernels (a deferred free,
// spec ST3). With the host ahead of the device, the next all-gathers cannot reuse it and get blocks of their
// own: that is FSDP1's extra reserved memory. limit_all_gathers=True (the default) bounds it: a free event is
// recorded after each reshard of a full-shard strategy, and before an all-gather the host synchronizes on the
// oldest of two in flight (_FreeEventQueue, _max_num_inflight_all_gathers = 2).
// Backward prefetch BACKWARD_PRE (the default): entering a unit's backward also issues the all-gather of the
// unit whose backward comes next.
//
// Construction (FullyShardedDataParallel.__init__ with device_id, the model on the CPU or the meta device, as
// accelerate, the Trainer and fsdp_qlora's train.py build it): auto_wrap_policy wraps bottom-up
// (_recursive_wrap: children first, the root last), and each unit runs _init_param_handle_from_module
// (torch/distributed/fsdp/_init_utils.py) on the compute stream:
//   _move_module_to_device       each parameter the unit owns copied to the GPU, one tensor each
//   _sync_module_params_and_buffers (sync_module_states=True) dist._broadcast_coalesced from rank 0 in
//                                buckets of PARAM_BROADCAST_BUCKET_SIZE = 250 MiB (compute_bucket_assignment_
//                                by_size: a bucket closes once it holds >= 250 MiB); a bucket of several
//                                tensors is flattened into a new buffer (flatten_dense_tensors; one tensor is
//                                a view), at most two buckets in flight (c10d/comm.cpp broadcast_coalesced)
//   FlatParamHandle(...)         flatten_tensors: torch.cat of the unit's parameters, the unsharded
//   FlatParameter handle.shard()               _get_shard: the rank's chunk cloned (kept: the sharded
//   FlatParameter), then
//                                the unsharded storage resized to 0
//   return                       the moved parameters, still held by managed_params until here, freed
// Nothing calls empty_cache, so what these transients leave in the caching allocator's compute-stream pool is
// the pool training starts from (reserved memory never shrinks without empty_cache). At the first forward the
// root's _lazy_init runs init_flat_param_attributes for every handle, root first then in module order
// (_share_state_and_init_handle_attrs): torch.empty of the padded unsharded size, then _free_storage.
// CPUOffload(offload_params=True): the flat parameter's shard and the reduced gradient shard live on the
// host, where the optimizer steps; the GPU holds a unit's unsharded parameters while it runs.
// Gradients: the FlatParameter's flat gradient, reduce-scattered on the post-backward stream
// (fsdp_flat_param_grad.h).
// MixedPrecision(param_dtype=bf16) on a model built in fp32 (set_fp32_sharded_parameters, sharded
// strategies): the FlatParameter and its shard (_local_shard) are fp32 and the optimizer steps that shard;
// the tape's bf16 parameters are the unsharded _full_param_padded. _flat_param.py init_flat_param_attributes
// (lazy init) makes and frees _mp_shard (bf16, the shard's size), _full_param_padded (bf16) and
// _full_prec_full_param_padded (fp32, the padded unsharded size) on the compute stream. Each unshard first
// runs pre_unshard on the pre-unshard stream: _use_low_precision_shard allocates _mp_shard there and copies
// the fp32 shard into it (with CPU offload the shard's `.to(device)` is an fp32 device copy first); after the
// all-gather, post_unshard's _free_low_precision_sharded_param record_streams it to the unshard stream and
// frees it. The reduced gradient shard is cast to the FlatParameter's dtype, fp32
// (_cast_grad_to_param_dtype).
// NO_SHARD under the same MixedPrecision: each rank keeps the whole FlatParameter in fp32 and the optimizer
// steps it (no master copy). pre_unshard's _use_low_precision_shard makes the bf16 _mp_shard of the whole
// FlatParameter on the pre-unshard stream and the unit computes with it (FlatParamHandle.unshard: nothing
// to gather, needs_unshard() is False; _use_unsharded_flat_param(self.flat_param)); post_unshard keeps it
// (it frees the low-precision shard only `if self.uses_sharded_strategy`), and every _reshard's
// post_reshard frees it (`self._uses_param_mixed_precision and not self.uses_sharded_strategy`,
// record_stream to the compute stream): after each unit's forward, the root's too (_post_forward_reshard
// runs for every handle; only the freeing of the unsharded parameter is skipped), and after its backward.
// No free event is queued (NO_SHARD frees no unsharded parameter), so limit_all_gathers never waits for it.
// The flat gradient is all-reduced in place and cast to fp32 (_reduce_grad_no_shard). Construction
// transients are not modelled for NO_SHARD: the fp32 FlatParameters are made at once.
#include <algorithm>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/fsdp_flat_param_grad.h"

namespace vramsim {
namespace {

constexpr StreamId kComputeStream = 0;
constexpr StreamId kUnshardStream = 1;     // FSDP1's _streams["unshard"]
constexpr StreamId kPreUnshardStream = 5;  // FSDP1's _streams["pre_unshard"]
constexpr int kMaxInflightAllGathers = 2;  // _FreeEventQueue._max_num_inflight_all_gathers
// torch/distributed/fsdp/_init_utils.py: PARAM_BROADCAST_BUCKET_SIZE = int(250 * 1024 * 1024)
constexpr Bytes kParamBroadcastBucketBytes = 250 * kMiB;
constexpr int kMaxInflightBroadcasts = 2;  // c10d/comm.cpp broadcast_coalesced: max_in_flight = 2

class Fsdp final : public DataParallelScheme {
 public:
  Fsdp(const DataParallelOptions& o, std::string_view strategy)
      : m_name(fmt::format("fsdp-{}", strategy)),
        m_shard(strategy != "no-shard"),
        m_reshard_after_forward(strategy == "full-shard" || strategy == "hybrid-shard"),
        m_shard_ranks(strategy == "hybrid-shard" ? std::min(o.world_size, o.gpus_per_node) : o.world_size),
        m_offload(o.offload_params),
        m_limit_all_gathers(o.fsdp_limit_all_gathers),
        m_peft_wrap(o.fsdp_peft_wrap),
        m_use_orig_params(o.fsdp_use_orig_params),
        m_sync_module_states(o.fsdp_sync_module_states),
        m_grads(strategy != "no-shard" ? m_shard_ranks : 1, o.offload_params, o.fsdp_reduce_dtype) {}
  std::string_view name() const override { return m_name; }
  void set_fp32_sharded_parameters(bool fp32) override {
    m_fp32_shards = fp32 && (m_shard || !m_offload);
    m_grads.set_fp32_sharded_parameters(m_fp32_shards);
  }
  bool fp32_sharded_parameters() const override { return m_fp32_shards; }
  // CPUOffload(offload_params=True): the flat parameter's shard lives on the host.
  // A sharded strategy's shards are the units' sharded FlatParameters, which construct() makes.
  std::int64_t resident_parameter_numel(std::int64_t numel) const override {
    if (m_offload || models_construction() || no_shard_mixed_precision()) {
      return 0;
    }
    return m_shard ? shard_numel(numel, m_shard_ranks) : numel;
  }
  int optimizer_state_shards() const override { return m_shard ? m_shard_ranks : 1; }
  bool optimizer_on_host() const override { return m_offload; }
  bool host_optimizer_fp32() const override { return false; }
  // CPUOffload(offload_params=True): the flat parameter's local shard (_local_shard) and its pinned
  // _cpu_grad, in the parameters' dtype.
  void add_host_model_states(const EagerTape& tape, const std::vector<VarId>& params,
                             HostMemory& host) const override {
    if (!m_offload) {
      return;
    }
    for (VarId p : params) {
      const Bytes shard = storage_bytes(shard_numel(numel(tape.shape(p)), m_shard ? m_shard_ranks : 1),
                                        kept_dtype(tape, p), tape.shape(p));
      host.parameters += shard;
      host.gradients += tape.requires_grad(p) ? shard : 0;
    }
  }

  void construct(EagerTape& tape, const std::vector<ParameterUnit>& units) override {
    m_units = units;
    for (const ParameterUnit& unit : units) {
      validate_flat_param(tape, unit);
    }
    if (no_shard_mixed_precision()) {  // each FlatParameter whole, in the module's dtype (fp32)
      tape.begin_op("fsdp.init.flat_params", "cat");
      for (const ParameterUnit& unit : units) {
        for (const std::vector<VarId>& flat : flat_params_of(tape, unit)) {
          std::int64_t elements = 0;
          for (VarId p : flat) {
            elements += numel(tape.shape(p));
          }
          const DType dtype = kept_dtype(tape, flat.front());
          m_flat_shards.push_back(tape.allocate(unit_name(unit) + ".flat_param",
                                                storage_bytes(elements, dtype, {elements}), dtype,
                                                TensorCategory::kParameter));
        }
      }
      return;
    }
    if (!models_construction()) {
      return;
    }
    for (const ParameterUnit& unit : units) {  // the layers in order, the root (last) wrapped last
      for (const std::vector<VarId>& flat : flat_params_of(tape, unit)) {
        init_param_handle(tape, unit, flat);
      }
    }
  }
  void pre_forward(EagerTape& tape, const ParameterUnit& unit) override {
    if (models_construction() && !m_lazy_init_done) {
      lazy_init(tape);
    }
    unshard(tape, unit, "forward");
    wait_for_unshard(tape, unit);
  }
  void post_forward(EagerTape& tape, const ParameterUnit& unit) override {
    if ((m_reshard_after_forward && unit.layer >= 0) || no_shard_mixed_precision()) {
      reshard(tape, unit);
    }
  }
  void pre_backward(EagerTape& tape, const ParameterUnit& unit) override {
    unshard(tape, unit, "backward");  // nothing to do if it was prefetched
    wait_for_unshard(tape, unit);
    const auto next = static_cast<std::size_t>(unit.layer - 1);
    if (unit.layer > 0 && next < m_units.size()) {  // BACKWARD_PRE: the unit whose backward comes next
      unshard(tape, m_units[next], "backward_prefetch");
    }
    m_grads.before_unit_backward(tape, unit);
  }
  void post_backward(EagerTape& tape, const ParameterUnit& unit) override {
    if (unit.layer < 0) {
      return;  // the root finishes at the end of backward
    }
    reshard(tape, unit);  // _post_backward_reshard comes before the reduce-scatter
    m_grads.reduce_scatter(tape, unit, fmt::format("layers.{}.fsdp.reduce_scatter", unit.layer));
  }
  void end_backward(EagerTape& tape, const ParameterUnit& root) override {
    reshard(tape, root);
    m_grads.reduce_scatter(tape, root, "root.fsdp.reduce_scatter");
  }

 private:
  // Construction is modelled for the sharded strategies with the shards on the GPU.
  bool models_construction() const { return m_shard && !m_offload; }
  // NO_SHARD with MixedPrecision on a model built in fp32 (see the header comment).
  bool no_shard_mixed_precision() const { return !m_shard && m_fp32_shards; }
  // The FlatParameter's dtype: the module's (fp32 under mixed precision), not the tape's compute copy.
  DType kept_dtype(const EagerTape& tape, VarId p) const {
    return sharded_parameter_dtype(tape, p, m_fp32_shards);
  }
  // The FlatParameters of one unit in the order they are wrapped: under PEFT's fsdp_auto_wrap_policy each
  // trainable leaf module (an adapter's lora_A / lora_B) first, as a unit of its own; then the rest.
  std::vector<std::vector<VarId>> flat_params_of(const EagerTape& tape, const ParameterUnit& unit) const {
    std::vector<std::vector<VarId>> out;
    std::vector<VarId> rest;
    for (VarId p : unit.params) {
      if (m_peft_wrap && tape.requires_grad(p)) {
        out.push_back({p});
      } else {
        rest.push_back(p);
      }
    }
    if (!rest.empty()) {
      out.push_back(std::move(rest));
    }
    return out;
  }
  // _init_param_handle_from_module for one FlatParameter (see the header comment).
  void init_param_handle(EagerTape& tape, const ParameterUnit& unit, const std::vector<VarId>& params) {
    const std::string name = params.size() == 1 ? tape.name(params.front()) : unit_name(unit);
    const DType dtype = kept_dtype(tape, params.front());
    tape.begin_op(name + ".fsdp.init.move_to_device", "_to_copy");
    std::vector<TensorId> moved;
    std::int64_t total = 0;
    for (VarId p : params) {
      moved.push_back(tape.allocate(tape.name(p) + ".to(device)",
                                    storage_bytes(numel(tape.shape(p)), dtype, tape.shape(p)), dtype,
                                    TensorCategory::kParameter));
      total += numel(tape.shape(p));
    }
    if (m_sync_module_states) {
      broadcast_coalesced(tape, name, params);
    }
    tape.begin_op(name + ".fsdp.init.flatten", "cat");
    const TensorId unsharded =
        tape.allocate(name + ".flat_param.unsharded", storage_bytes(total, dtype, {total}), dtype,
                      TensorCategory::kParameter);
    tape.begin_op(name + ".fsdp.init.shard", "clone");
    const std::int64_t shard = shard_numel(total, m_shard_ranks);
    m_flat_shards.push_back(tape.allocate(name + ".flat_param", storage_bytes(shard, dtype, {shard}), dtype,
                                          TensorCategory::kParameter));
    tape.begin_op(name + ".fsdp.init.free_unsharded", "resize_");
    tape.release(unsharded);  // orig_storage._resize_(0)
    for (TensorId t : moved) {
      tape.release(t);  // managed_params goes out of scope
    }
  }
  // dist._broadcast_coalesced(process_group, module_states, PARAM_BROADCAST_BUCKET_SIZE, src=0).
  void broadcast_coalesced(EagerTape& tape, const std::string& name, const std::vector<VarId>& params) {
    std::deque<TensorId> in_flight;
    std::vector<VarId> bucket;
    Bytes bucket_bytes = 0;
    const auto issue = [&]() {
      if (bucket.empty()) {
        return;
      }
      if (static_cast<int>(in_flight.size()) >= kMaxInflightBroadcasts) {
        release_bucket(tape, in_flight.front());  // in_flight.front().finish(): copied back, then freed
        in_flight.pop_front();
      }
      tape.begin_op(name + ".fsdp.init.broadcast", "broadcast");
      // flatten_dense_tensors: one tensor is its own view; several are concatenated into a new buffer
      in_flight.push_back(bucket.size() == 1 ? kNoTensor
                                             : tape.allocate(name + ".broadcast_bucket", bucket_bytes,
                                                             kept_dtype(tape, bucket.front()),
                                                             TensorCategory::kCommunication));
      bucket.clear();
      bucket_bytes = 0;
    };
    for (VarId p : params) {
      bucket.push_back(p);
      bucket_bytes += storage_bytes(numel(tape.shape(p)), kept_dtype(tape, p), tape.shape(p));
      if (bucket_bytes >= kParamBroadcastBucketBytes) {
        issue();
      }
    }
    issue();
    for (TensorId t : in_flight) {
      release_bucket(tape, t);
    }
  }
  static void release_bucket(EagerTape& tape, TensorId bucket) {
    if (bucket != kNoTensor) {
      tape.release(bucket);
    }
  }
  // _lazy_init -> _share_state_and_init_handle_attrs -> FlatParamHandle.init_flat_param_attributes: every
  // handle's _full_param_padded made at the padded unsharded size and its storage freed, the root first,
  // then the others in module order (a layer before its adapters).
  void lazy_init(EagerTape& tape) {
    m_lazy_init_done = true;
    if (m_units.empty()) {
      return;
    }
    std::vector<const ParameterUnit*> order{&m_units.back()};
    for (std::size_t i = 0; i + 1 < m_units.size(); ++i) {
      order.push_back(&m_units[i]);
    }
    for (const ParameterUnit* unit : order) {
      std::vector<std::vector<VarId>> flats = flat_params_of(tape, *unit);
      if (flats.empty()) {
        continue;  // a unit this rank holds nothing of (another pipeline stage's layer)
      }
      std::rotate(flats.begin(), flats.end() - 1, flats.end());  // the layer's own handle before its leaves
      for (const std::vector<VarId>& flat : flats) {
        std::int64_t total = 0;
        for (VarId p : flat) {
          total += numel(tape.shape(p));
        }
        const std::int64_t padded = shard_numel(total, m_shard_ranks) * m_shard_ranks;
        const DType dtype = tape.dtype(flat.front());
        const DType full_precision = kept_dtype(tape, flat.front());
        const auto empty_then_free = [&](const char* what, std::int64_t elements, DType d) {
          tape.begin_op(unit_name(*unit) + ".fsdp.lazy_init.init_flat_param_attributes", "empty");
          const TensorId t = tape.allocate(unit_name(*unit) + what, storage_bytes(elements, d, {elements}), d,
                                           TensorCategory::kCommunication);
          tape.begin_op(unit_name(*unit) + ".fsdp.lazy_init.free_storage", "resize_");
          tape.release(t);
        };
        if (full_precision != dtype) {  // _uses_param_mixed_precision
          empty_then_free("._mp_shard", padded / m_shard_ranks, dtype);
        }
        empty_then_free("._full_param_padded", padded, dtype);
        if (full_precision != dtype) {
          empty_then_free("._full_prec_full_param_padded", padded, full_precision);
        }
      }
    }
  }
  // FlatParamHandle._validate_tensors_to_flatten (torch/distributed/fsdp/_flat_param.py): the parameters of
  // one FlatParameter share a dtype, and, with use_orig_params=False, requires_grad. Under PEFT's
  // fsdp_auto_wrap_policy each trainable leaf module is a FlatParameter of its own.
  void validate_flat_param(const EagerTape& tape, const ParameterUnit& unit) const {
    const VarId* first = nullptr;
    for (const VarId& p : unit.params) {
      if (m_peft_wrap && tape.requires_grad(p)) {
        continue;
      }
      if (first == nullptr) {
        first = &p;
        continue;
      }
      if (tape.dtype(p) != tape.dtype(*first)) {
        throw InputError(fmt::format(
            "--fsdp: FSDP refuses to flatten {} ({}) and {} ({}) into one FlatParameter (\"Must flatten "
            "tensors with uniform dtype\", torch/distributed/fsdp/_flat_param.py); quantized weights need "
            "--bnb-quant-storage in the model's dtype and no fp32 cast (--no-prepare-kbit), PEFT adapters "
            "their own units (--fsdp-auto-wrap peft) or the model's dtype (--autocast-adapter-dtype false)",
            tape.name(*first), dtype_name(tape.dtype(*first)), tape.name(p), dtype_name(tape.dtype(p))));
      }
      if (!m_use_orig_params && tape.requires_grad(p) != tape.requires_grad(*first)) {
        throw InputError(fmt::format(
            "--fsdp-use-orig-params false: FSDP refuses to flatten frozen and trainable parameters ({} and "
            "{}) into one FlatParameter (\"Must flatten tensors with uniform requires_grad when "
            "use_orig_params=False\", torch/distributed/fsdp/_flat_param.py); use --fsdp-auto-wrap peft",
            tape.name(*first), tape.name(p)));
      }
    }
  }
  void unshard(EagerTape& tape, const ParameterUnit& unit, std::string_view when) {
    if (no_shard_mixed_precision() && !unit.params.empty() && m_unsharded.count(unit.layer) == 0) {
      // pre_unshard's _mp_shard is the whole FlatParameter in bf16; unshard() gathers nothing.
      const TensorId mp_shard = use_low_precision_shard(tape, unit, padded_flat_numel(tape, unit, 1), when);
      tape.set_stream(kComputeStream);
      m_unsharded[unit.layer] = mp_shard;
      return;
    }
    if (!m_shard || unit.params.empty() || m_unsharded.count(unit.layer) != 0) {
      return;
    }
    const std::int64_t flat = padded_flat_numel(tape, unit, m_shard_ranks);
    const DType dtype = tape.dtype(unit.params.front());
    const Bytes bytes = static_cast<Bytes>(flat) * dtype_size_bytes(dtype);
    const TensorId mp_shard = use_low_precision_shard(tape, unit, flat / m_shard_ranks, when);
    tape.set_stream(kUnshardStream);
    tape.begin_op(fmt::format("{}.fsdp.all_gather.{}", unit_name(unit), when), "all_gather_into_tensor");
    if (m_limit_all_gathers && static_cast<int>(m_free_events.size()) >= kMaxInflightAllGathers) {
      tape.host_wait_for(m_free_events.front());  // _FreeEventQueue.dequeue_if_needed().synchronize()
      m_free_events.pop_front();
    }
    const TensorId buffer = tape.allocate(unit_name(unit) + ".flat_param.unsharded", bytes, dtype,
                                          TensorCategory::kCommunication);
    tape.set_comm_bytes(bytes - bytes / static_cast<Bytes>(m_shard_ranks));  // the other ranks' shards
    if (mp_shard != kNoTensor) {  // post_unshard: _free_low_precision_sharded_param
      tape.use(mp_shard);
      tape.record_stream(mp_shard, kUnshardStream);
      tape.release(mp_shard);
    }
    tape.set_stream(kComputeStream);
    m_unsharded[unit.layer] = buffer;
  }
  // pre_unshard under mixed precision (_use_low_precision_shard), on the pre-unshard stream: the bf16
  // _mp_shard of `elements`, filled from the fp32 shard (with CPU offload, from its fp32 device copy).
  // Returns it, or kNoTensor without mixed precision.
  TensorId use_low_precision_shard(EagerTape& tape, const ParameterUnit& unit, std::int64_t elements,
                                   std::string_view when) {
    const DType dtype = tape.dtype(unit.params.front());
    const DType full_precision = kept_dtype(tape, unit.params.front());
    if (full_precision == dtype) {
      return kNoTensor;
    }
    tape.set_stream(kPreUnshardStream);
    tape.begin_op(fmt::format("{}.fsdp.pre_unshard.{}", unit_name(unit), when), "copy_");
    const TensorId on_device = m_offload ? tape.allocate(unit_name(unit) + "._local_shard.to(device)",
                                                         storage_bytes(elements, full_precision, {elements}),
                                                         full_precision, TensorCategory::kTemporary)
                                         : kNoTensor;
    const TensorId mp_shard =
        tape.allocate(unit_name(unit) + "._mp_shard", storage_bytes(elements, dtype, {elements}), dtype,
                      TensorCategory::kCommunication);
    if (on_device != kNoTensor) {
      tape.release(on_device);
    }
    return mp_shard;
  }
  // The compute stream waits for the unshard stream before the unit's kernels (_wait_for_unshard's
  // wait_stream).
  void wait_for_unshard(EagerTape& tape, const ParameterUnit& unit) {
    const auto it = m_unsharded.find(unit.layer);
    if (it == m_unsharded.end()) {
      return;
    }
    tape.begin_op(unit_name(unit) + ".fsdp.wait_unshard", "wait_stream");
    tape.wait_for(it->second);
  }
  void reshard(EagerTape& tape, const ParameterUnit& unit) {
    auto it = m_unsharded.find(unit.layer);
    if (it == m_unsharded.end()) {
      return;
    }
    const OpId op = tape.begin_op(unit_name(unit) + ".fsdp.reshard", "free_storage");
    tape.record_stream(it->second, kComputeStream);  // _no_dispatch_record_stream, then _free_storage
    tape.release(it->second);
    m_unsharded.erase(it);
    if (m_limit_all_gathers && m_shard) {
      m_free_events.push_back(op);  // the free event recorded after it
    }
  }

  std::string m_name;
  bool m_shard;
  bool m_reshard_after_forward;
  int m_shard_ranks;  // the ranks one unit is sharded over
  bool m_offload;
  bool m_limit_all_gathers;
  bool m_peft_wrap;
  bool m_use_orig_params;
  bool m_sync_module_states;
  bool m_fp32_shards = false;  // MixedPrecision on a model built in fp32: fp32 FlatParameters
  bool m_lazy_init_done = false;
  std::vector<TensorId> m_flat_shards;  // each FlatParameter's shard, made by construct()
  FlatParamGradients m_grads;
  std::vector<ParameterUnit> m_units;
  std::map<int, TensorId> m_unsharded;
  std::deque<OpId> m_free_events;  // reshard ops whose free events are in flight
};

}  // namespace

std::unique_ptr<DataParallelScheme> make_fsdp(const DataParallelOptions& options, std::string_view strategy) {
  return std::make_unique<Fsdp>(options, strategy);
}

}  // namespace vramsim
