// optimizer.step() and optimizer.zero_grad() as PyTorch's implementations allocate:
//
//   states (created lazily at the first step that sees a gradient, so step 1 and step 2 differ; foreach,
//   fused and single-tensor (torch.optim's foreach=False loop) create all of them before the update, the
//   for-loop (a hand-written optimizer, CS336's AdamW) each parameter's right before its update):
//     sgd          none                       sgd-momentum  momentum_buffer = clone(grad)
//     adam, adamw  exp_avg, exp_avg_sq        (fused: plus a 0-dim fp32 `step` tensor per parameter)
//     adamw-8bit   two uint8 states + fp32 absmax per 256-element block (bitsandbytes; fp32 states for
//                  parameters under 4096 elements)
//     adafactor    row and column second-moment vectors for matrices, a full one for vectors
//     paged-adamw, bitsandbytes' paged optimizers: 32-bit (fp32 state1, state2) or 8-bit (as adamw-8bit);
//     paged-adamw-8bit  a state buffer of a parameter of at least 1e5 elements is CUDA unified memory
//                  (get_state_buffer: F.get_paged, cudaMallocManaged), outside the caching allocator; the
//                  driver evicts it to the host when the GPU needs the room and pages it back for the step.
//                  Those bytes are paged_state_bytes(), not allocations; smaller states and the absmax
//                  buffers are ordinary device tensors.
//   precision bf16 adds fp32 master weights, created with the optimizer (before the first step); not for
//   bitsandbytes' optimizers (adamw-8bit, paged-*), which update the bf16 parameters in place, nor where the
//   data-parallel scheme keeps the parameters in fp32 itself (FSDP mixed precision: `fp32_sharded_params`),
//   whose fp32 shards and fp32 gradient shards the optimizer steps directly.
//   temporaries:
//     foreach      every parameter's worth at once: adam's _foreach_sqrt(exp_avg_sq) list (PyTorch 1.13 and
//                  2.0 also its out-of-place `denom` list: AdamForeachDenom), adafactor's variance estimates
//                  (bf16: also the fp32 copy of the gradient list)
//     for-loop,    one parameter at a time: adam's `denom = (exp_avg_sq.sqrt() / bc2).add_(eps)` is two
//     single-tensor tensors, and `denom` lives until the next parameter's replaces it
//     fused        none
//   zero_grad(set_to_none=True) releases every .grad; set_to_none=False zeroes them in place.
#pragma once

#include <map>
#include <vector>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class OptimizerModel {
 public:
  // pre: params are the tape's parameters, in model.parameters() order.
  // `state_shards` > 1: each rank keeps that fraction of every state and master weight (ZeRO, FSDP).
  // `on_host`: states, master weights and the update live in CPU memory (DeepSpeedCPUAdam under ZeRO-Offload,
  // FSDP's CPU offload): nothing of the optimizer is allocated on the GPU; the updated parameters are copied
  // back into the GPU's in place. `host_fp32`: the host steps fp32 copies, so its states are fp32
  // (DeepSpeed); otherwise they have the parameters' dtype (torch.optim on FSDP's offloaded shard).
  // `fp32_sharded_params`: the parameters stepped are the scheme's fp32 copies of the tape's 16-bit ones
  // (DataParallelScheme::fp32_sharded_parameters), with fp32 gradients: no master copy, no gradient casts.
  OptimizerModel(EagerTape& tape, const TrainingOptions& options, std::vector<VarId> params,
                 int state_shards = 1, bool on_host = false, bool host_fp32 = true,
                 bool fp32_sharded_params = false);

  // torch.distributed.optim.ZeroRedundancyOptimizer: this rank's local optimizer holds `local` only (its
  // partition, in the order it sees them: zero_redundancy_partition()); step() makes states for and updates
  // those, then the updated parameters are broadcast in place (no allocation); zero_grad() still covers every
  // parameter. pre: `local` is a subset of the constructor's params; call before construct().
  void set_zero_redundancy_partition(const std::vector<VarId>& local);
  // Parameter `p`'s states and master copy are sharded over `shards` ranks instead of the constructor's
  // `state_shards` (torchtitan's routed experts under expert parallelism: DataParallelScheme::
  // parameter_state_shards). pre: p is one of the constructor's params; call before construct().
  void set_state_shards(VarId p, int shards);

  void construct();  // torch.optim.X(model.parameters()): bf16 master weights; call in the setup phase
  void step();       // optimizer.step()
  // DeepSpeed ZeRO's inner step: the optimizer updates every parameter's partition with `flat_grad`, one fp32
  // gradient for all of them (their own .grad are None by then), so no fp32 copies of gradients are made.
  void step_flat(TensorId flat_grad);
  // torchtune's optimizer_in_bwd: a separate optimizer over [param] stepped, then zero_grad(), from the
  // parameter's post-accumulate-grad hook, so its gradient is freed as soon as it is produced.
  void step_in_backward(VarId param);
  void zero_grad();  // optimizer.zero_grad()
  // bitsandbytes' paged optimizers: the state bytes made in unified memory so far (0 for the others).
  Bytes paged_state_bytes() const { return m_paged_state_bytes; }
  // `on_host`: the states the host optimizer has made so far (requested bytes of CPU memory).
  Bytes host_state_bytes() const { return m_host_state_bytes; }

 private:
  std::vector<std::size_t> stepped() const;  // the indices step() updates: m_local, or every parameter
  void step_params(const std::vector<std::size_t>& with_grad);
  void init_states(std::size_t i);
  void step_foreach(const std::vector<std::size_t>& with_grad);
  void step_for_loop(const std::vector<std::size_t>& with_grad);
  void use_grad(std::size_t i);  // the current op reads parameter i's gradient (.grad, or the flat one)
  Bytes param_bytes(std::size_t i, DType dtype) const;
  DType stepped_dtype(std::size_t i) const;  // the dtype of the parameter the step updates
  std::int64_t param_numel(std::size_t i) const;
  std::string param_name(std::size_t i) const;

  EagerTape& m_tape;
  TrainingOptions m_options;
  std::vector<VarId> m_params;
  std::vector<std::size_t> m_local;  // ZeroRedundancyOptimizer: the indices this rank steps, in its order
  bool m_zero_redundancy = false;
  std::vector<std::vector<TensorId>> m_states;  // per parameter; empty until its first step
  std::vector<bool> m_initialized;              // per parameter: its states exist (some may be paged)
  std::vector<TensorId> m_master;  // bf16 precision: fp32 master copies (kNoTensor: an fp32 parameter)
  bool has_master(std::size_t i) const;
  TensorId m_flat_grad = kNoTensor;  // during step_flat()
  bool m_flat_grad_read = false;
  int m_state_shards = 1;
  std::map<VarId, int> m_param_state_shards;  // set_state_shards
  bool m_on_host = false;
  bool m_host_fp32 = true;
  bool m_fp32_sharded_params = false;
  Bytes m_paged_state_bytes = 0;
  Bytes m_host_state_bytes = 0;
};

}  // namespace vramsim
