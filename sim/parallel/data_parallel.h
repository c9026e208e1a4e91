// Data parallelism: what each rank of a data-parallel group keeps on its GPU, as the libraries users run
// arrange it. Ranks of one group run the same step on their own micro-batch, so one rank's simulation is
// every rank's: a layout of N GPUs costs one simulation, not N.
//
// Each scheme is one file behind DataParallelScheme; the registry (data_parallel.cpp) names them:
//   ddp               torch.nn.parallel.DistributedDataParallel (ddp.cpp)
//   zero1/zero2/zero3 DeepSpeed ZeRO stages 1-3 (deepspeed_zero.cpp)
//   fsdp-full-shard, fsdp-shard-grad-op, fsdp-no-shard, fsdp-hybrid-shard: PyTorch FSDP (FSDP1, flat
//                     parameters per wrapped decoder layer) (fsdp.cpp)
//   fsdp2-full-shard, fsdp2-shard-grad-op, fsdp2-hybrid-shard: PyTorch FSDP2 (fully_shard per decoder layer
//                     and root; per-parameter sharding, no record_stream) (fsdp2.cpp)
// The step builder calls the hooks at the points the libraries act: after the model is built (DDP's
// buckets), around each decoder layer's forward and backward (all-gather, reduce-scatter), around the whole
// backward (DeepSpeed's gradient buckets), and asks how much of each parameter, gradient and optimizer state
// stays on the rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

// One tensor FSDP2 all-gathers for a parameter whose local tensor is a tensor subclass with the FSDP2
// extension (FSDPParam.all_gather_inputs calls its fsdp_pre_all_gather): torchao's NF4Tensor gathers its
// quantized_scalers, quantization_factor and quantized_data (torchao_nf4.h), torchao float8's
// WeightWithDynamicFloat8CastTensor its float8 shard. Each input is sharded along dim 0 with the parameter;
// foreach_all_gather_copy_out gives each its own unsharded tensor (FSDPParam.init_all_gather_outputs:
// torch.empty(numel x world_size, dtype)), which fsdp_post_all_gather wraps without copying.
struct AllGatherInput {
  std::string suffix;      // appended to "<parameter>.unsharded" in the unsharded tensor's name
  std::int64_t numel = 0;  // elements of the unsharded (gathered) tensor, before dim-0 padding
  DType dtype = DType::kUInt8;
};

// The parameters of one unit the schemes gather and reduce together: a decoder layer (layer >= 0) or the
// rest of the model (layer -1: embeddings, final norm, head; FSDP's root unit).
struct ParameterUnit {
  int layer = -1;
  std::vector<VarId> params;
  // FSDP2: the parameters all-gathered through fsdp_pre_all_gather, and as what; a parameter not listed is
  // all-gathered as itself (its tape shape and dtype).
  std::map<VarId, std::vector<AllGatherInput>> all_gather_inputs;
};

class DataParallelScheme {
 public:
  virtual ~DataParallelScheme() = default;
  virtual std::string_view name() const = 0;
  // The elements of a parameter resident on the rank between uses (its shard under ZeRO-3 / FSDP).
  virtual std::int64_t resident_parameter_numel(std::int64_t numel) const { return numel; }
  // Each rank keeps 1/n of the optimizer states (and of bf16's fp32 master weights): n ranks share them.
  virtual int optimizer_state_shards() const { return 1; }
  // The optimizer runs on the host (offload): see OptimizerModel's `on_host`.
  virtual bool optimizer_on_host() const { return false; }
  // The host optimizer steps fp32 copies (DeepSpeed's fp32 partitions), not the offloaded parameters in
  // their own dtype (FSDP: torch.optim on the flat parameter's shard).
  virtual bool host_optimizer_fp32() const { return true; }
  // FSDP's mixed precision on a model built in fp32 (FSDP1 MixedPrecision(param_dtype=bf16), FSDP2
  // MixedPrecisionPolicy(param_dtype=bf16); torchtitan and most FSDP recipes): the tape's parameters are the
  // bf16 copies the forward and backward compute with, which exist only while a unit is unsharded; the
  // sharded parameter each rank keeps stays fp32, its reduced gradient shard is cast to fp32, and the
  // optimizer steps that shard itself (no separate master copy). Call before the parameters are created.
  // Schemes other than FSDP's sharded strategies ignore it.
  virtual void set_fp32_sharded_parameters(bool /*fp32*/) {}
  virtual bool fp32_sharded_parameters() const { return false; }
  // Tensor.register_post_accumulate_grad_hook on the scheme's sharded parameters (torchtune's
  // optimizer_in_bwd under FSDP2): the scheme calls `hook` when it assigns a parameter's sharded gradient.
  // Returns false where the parameters are autograd's own leaves, whose AccumulateGrad calls the tape's hook.
  virtual bool set_sharded_grad_hook(EagerTape::ParameterHook /*hook*/) { return false; }
  // Adds the model states the scheme keeps on the host (offload) for `params` (every parameter, in
  // model.parameters() order) to `host`; the host optimizer's states are the optimizer's.
  virtual void add_host_model_states(const EagerTape&, const std::vector<VarId>& /*params*/,
                                     HostMemory& /*host*/) const {}
  // Expert parallelism over FSDP2 as torchtitan runs it (torchtitan/models/llama4/infra/parallelize.py
  // apply_fsdp at 1e8f9acd1): the routed experts `experts` (this rank's n_experts / ep, already split over
  // the `ep` expert-parallel ranks) are sharded by FSDP over the rest of the shard group only (torchtitan's
  // efsdp mesh: dp_shard x cp / ep), the other parameters over the whole group; forward prefetches the next
  // layer (set_modules_to_forward_prefetch). Throws InputError when the scheme does not run it or `ep` does
  // not divide the shard group; the default (every scheme but FSDP2) throws unless `experts` is empty.
  // Call before construct().
  // `borrowed_tp`: the tensor-parallel ranks torchtitan's ep mesh spans (tp / etp: tp when etp = 1, else
  // 1), so efsdp = the shard group x borrowed_tp / ep.
  virtual void set_expert_parameters(const std::set<VarId>& experts, int ep, int borrowed_tp = 1);
  // The ranks parameter `p`'s optimizer states are sharded over (optimizer_state_shards() but for experts).
  virtual int parameter_state_shards(VarId /*p*/) const { return optimizer_state_shards(); }

  // After the model is on the device (DDP's constructor).
  virtual void construct(EagerTape&, const std::vector<ParameterUnit>&) {}
  // Around one unit's forward; the root unit (layer -1) is entered before the embeddings and left after the
  // loss.
  virtual void pre_forward(EagerTape&, const ParameterUnit&) {}
  virtual void post_forward(EagerTape&, const ParameterUnit&) {}
  // Around the backward pass and each unit's backward nodes (the root's may be entered twice: head, then
  // embeddings).
  virtual void begin_backward(EagerTape&) {}
  virtual void pre_backward(EagerTape&, const ParameterUnit&) {}
  virtual void post_backward(EagerTape&, const ParameterUnit&) {}
  virtual void end_backward(EagerTape&, const ParameterUnit& /*root*/) {}
  // torch.distributed.pipelining (stage.py backward_maybe_with_nosync) turns gradient synchronisation off for
  // every backward of a stage but its last in the step, and on again for the last. Schemes whose framework
  // defers the reduction then (FSDP2's set_requires_gradient_sync) override it; the others reduce each time.
  virtual void set_requires_gradient_sync(bool /*sync*/) {}
  // Before optimizer.step(): a scheme whose optimizer steps one flat fp32 gradient partition (DeepSpeed
  // ZeRO) makes it from the trainable parameters' gradients, sets their .grad to None and returns it;
  // kNoTensor: the optimizer steps each parameter's .grad. after_optimizer_step releases it.
  virtual TensorId flat_fp32_gradient(EagerTape&, const std::vector<VarId>& /*trainable*/) {
    return kNoTensor;
  }
  virtual void after_optimizer_step(EagerTape&) {}
};

// Throws InputError("<option>: unknown data-parallel scheme 'x' (known: ...)"). `options` outlives it.
std::unique_ptr<DataParallelScheme> make_data_parallel(const DataParallelOptions& options,
                                                       std::string_view option = "--data-parallel");
std::vector<std::string> data_parallel_names();

// "layers.<l>" or "root": the unit's prefix in op and tensor names.
std::string unit_name(const ParameterUnit& unit);

// The dtype a rank keeps parameter `p`'s shard in: fp32 where `fp32_shards` (FSDP mixed precision, see
// DataParallelScheme::set_fp32_sharded_parameters) and the tape's copy is a 16-bit float; otherwise the
// tape's.
DType sharded_parameter_dtype(const EagerTape& tape, VarId p, bool fp32_shards);

// ceil(numel / world): the elements of one rank's shard (FSDP pads the flat parameter, ZeRO the partitions,
// to a multiple of the world size).
std::int64_t shard_numel(std::int64_t numel, int world_size);

// Elements of a unit's FSDP1 FlatParameter: its parameters' elements, padded to a multiple of `world_size`.
// Each numel is at most 2^50 elements (kMaxTensorBytes), so the sum over a unit cannot overflow.
std::int64_t padded_flat_numel(const EagerTape& tape, const ParameterUnit& unit, int world_size);

// How a scheme runs its reduce-scatters (streams are CUDA streams; 0 is the compute stream).
enum class ReduceScatterPath : std::uint8_t {
  // On the compute stream, reading the gradients in place (DeepSpeed ZeRO here).
  kComputeStream,
  // FSDP2 (foreach_reduce, pytorch/pytorch#129721 on): the gradients are copied into one reduce-scatter
  // input on the compute stream and freed at once; the reduce-scatter runs on its own stream with its output
  // allocated there; the input is kept (comm_ctx.reduce_scatter_state) until the next unit's post_backward,
  // which waits on this one's event and drops it before allocating its own input (or the end of backward):
  // one input alive at a time.
  kFsdp2ReduceScatterStream,
  // FSDP2 as first released (2024; the torchtitan PR 165 comparison ran it): the copy-in runs on the
  // reduce-scatter stream, whose pool holds the input (the compute stream waits for the copy-in before the
  // gradients go); the input is dropped when foreach_reduce returns, in that stream's order, so the next
  // reduce-scatter reuses its block.
  kFsdp2CopyInOnReduceScatterStream,
};

// Shared by DeepSpeed ZeRO 2/3 and FSDP2 (FSDP1's flat gradients are fsdp_flat_param_grad.h): gradients
// reduce-scattered to the rank's shard after a unit's backward. pre: the unit's parameters got their full
// gradients in this backward (AccumulateGrad). Keeps one shard gradient per parameter (ZeRO: a tensor each;
// FSDP2: views of the unit's reduce_output), accumulating into it on later micro-batches, and frees the full
// one.
class GradientShards {
 public:
  // `to_host`: the reduced shard is copied to a pinned host buffer (offload) and nothing stays on the GPU.
  // `reduce_dtype`: FSDP2's MixedPrecisionPolicy reduce_dtype (unset: the gradients' dtype). The shard is
  // cast to the sharded parameter's dtype after the reduction (foreach_reduce's orig_dtype: the
  // gradient's dtype, or fp32 under set_fp32_sharded_parameters).
  explicit GradientShards(int world_size, bool to_host = false,
                          ReduceScatterPath path = ReduceScatterPath::kComputeStream,
                          std::optional<DType> reduce_dtype = std::nullopt)
      : m_world(world_size), m_to_host(to_host), m_path(path), m_reduce_dtype(reduce_dtype) {}
  // A later micro-batch: AccumulateGrad must make a fresh full gradient (the shard is not a tensor of the
  // parameter's shape), so the unit's shards are set aside until reduce_scatter adds to them.
  void before_unit_backward(EagerTape& tape, const ParameterUnit& unit);
  void reduce_scatter(EagerTape& tape, const ParameterUnit& unit, std::string_view op_name);
  // The end of backward (FSDP2's final callback): the last reduce-scatter input is freed.
  void finish_backward(EagerTape& tape);
  // FSDP2 mixed precision: the sharded parameters are fp32 (orig_dtype), their gradient shards too.
  void set_fp32_sharded_parameters(bool fp32) { m_fp32_shards = fp32; }
  // Parameters reduce-scattered over a smaller group than `world_size` (torchtitan's routed experts over
  // efsdp: set_expert_parameters).
  void set_parameter_world(VarId p, int world) { m_world_of[p] = world; }
  // FSDP2's foreach_reduce calls the sharded parameter's post-accumulate-grad hooks on the reduce-scatter
  // stream, right after assigning its sharded gradient (_fsdp_collectives.py; none while offloading).
  void set_post_accumulate_grad_hook(EagerTape::ParameterHook hook) { m_hook = std::move(hook); }

  static constexpr StreamId kReduceScatterStream = 2;  // FSDP2's reduce-scatter / FSDP1's post-backward

 private:
  // FSDP2's reduce_output: one tensor of the unit's shards in the reduce dtype (then cast back to the
  // gradients' dtype), whose views become the parameters' sharded .grad (or are added to existing ones).
  void reduce_output(EagerTape& tape, const ParameterUnit& unit, const std::vector<VarId>& fresh,
                     std::string_view op_name);
  // FSDP2: the unit's gradients copied into one input on the compute stream; returns it.
  TensorId copy_in(EagerTape& tape, const ParameterUnit& unit, const std::vector<VarId>& fresh,
                   std::string_view op_name);
  void free_held_input(EagerTape& tape);

  int world_of(VarId p) const;
  int m_world;
  std::map<VarId, int> m_world_of;
  bool m_to_host = false;
  ReduceScatterPath m_path;
  std::optional<DType> m_reduce_dtype;
  bool m_fp32_shards = false;
  std::map<VarId, TensorId> m_shard;  // the parameter's shard gradient, while it is its .grad
  std::map<VarId, TensorId> m_aside;  // shards set aside during the unit's backward
  EagerTape::ParameterHook m_hook;
  TensorId m_held_input = kNoTensor;  // FSDP2's reduce_scatter_state: the last input
  OpId m_held_after = kNoOp;          // and the reduce-scatter that read it
};

// torch.distributed.optim.ZeroRedundancyOptimizer's partition (its sorted-greedy algorithm): `params` (in
// model.parameters() order) sorted by `key`, largest first, with a stable sort (equal keys keep their order);
// each in turn goes to the rank with the fewest elements so far (ties: the lowest rank). Returns rank
// `rank`'s parameters in that order, which is the order its local optimizer steps them. pre: 0 <= rank <
// world_size.
std::vector<VarId> zero_redundancy_partition(const EagerTape& tape, const std::vector<VarId>& params,
                                             int world_size, int rank,
                                             ZeroPartitionKey key = ZeroPartitionKey::kNumel);

// The individual schemes (one file each).
std::unique_ptr<DataParallelScheme> make_ddp(const DataParallelOptions& options);
std::unique_ptr<DataParallelScheme> make_deepspeed_zero(const DataParallelOptions& options, int stage);
std::unique_ptr<DataParallelScheme> make_fsdp(const DataParallelOptions& options, std::string_view strategy);
std::unique_ptr<DataParallelScheme> make_fsdp2(const DataParallelOptions& options, std::string_view strategy);

}  // namespace vramsim
