// FSDP1's gradient path for a unit's FlatParameter (torch/distributed/fsdp/_runtime_utils.py
// _post_backward_hook, _reduce_grad; _flat_param.py prepare_gradient_for_backward):
//   * the original parameters are views of the unsharded flat parameter (torch.split, then .view), so
//     autograd's SplitWithSizesBackward waits for all their gradients (held in its input buffer) and
//     concatenates them into one flat gradient of the FlatParameter's padded size (torch.cat on the compute
//     stream, missing ones zero-filled); AccumulateGrad takes it as flat_param.grad;
//   * the post-backward hook runs on the post-backward stream: with a reduce_dtype it casts the flat gradient
//     (flat_param.grad.to(reduce_dtype)); the autograd-computed one is record_stream'd to that stream; a new
//     shard (empty_like(chunk), the reduce dtype) receives the reduce-scatter; it is cast to the
//     FlatParameter's dtype (_cast_grad_to_param_dtype; fp32 under mixed precision on an fp32 model) and
//     added to the shard saved from an earlier micro-batch (_accumulate_sharded_grad) or kept. NO_SHARD
//     all-reduces the flat gradient in place and keeps it. With CPUOffload the shard is copied to the host
//     and nothing stays on the GPU;
//   * with use_orig_params=True each original parameter's .grad is a view of that one shard, so zero_grad
//     frees it once every view is gone.
#pragma once

#include <map>
#include <optional>
#include <string_view>

#include "sim/parallel/data_parallel.h"

namespace vramsim {

class FlatParamGradients {
 public:
  // `world`: the ranks a unit is sharded over (1: NO_SHARD). `to_host`: CPUOffload(offload_params=True).
  FlatParamGradients(int world, bool to_host, std::optional<DType> reduce_dtype)
      : m_world(world), m_to_host(to_host), m_reduce_dtype(reduce_dtype) {}
  // prepare_gradient_for_backward: a unit's shard from an earlier micro-batch becomes _saved_grad_shard
  // and the parameters' .grad views go (AccumulateGrad makes fresh gradients).
  void before_unit_backward(EagerTape& tape, const ParameterUnit& unit);
  // After the unit's backward: the flat gradient, then the post-backward hook.
  void reduce_scatter(EagerTape& tape, const ParameterUnit& unit, std::string_view op_name);
  // MixedPrecision on a model built in fp32: the FlatParameter is fp32, so _cast_grad_to_param_dtype casts
  // the reduced shard to fp32 (the tape's gradients are the bf16 unsharded ones).
  void set_fp32_sharded_parameters(bool fp32) { m_fp32_shards = fp32; }

  static constexpr StreamId kPostBackwardStream = GradientShards::kReduceScatterStream;

 private:
  int m_world;
  bool m_to_host;
  std::optional<DType> m_reduce_dtype;
  bool m_fp32_shards = false;
  std::map<int, TensorId> m_shard;  // per unit: the shard its parameters' .grad are views of
  std::map<int, TensorId> m_saved;  // per unit: _saved_grad_shard (one reference) during a backward
};

}  // namespace vramsim
