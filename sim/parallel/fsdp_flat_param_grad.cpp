#include "sim/parallel/fsdp_flat_param_grad.h"

#include <string>
#include <vector>

namespace vramsim {

void FlatParamGradients::before_unit_backward(EagerTape& tape, const ParameterUnit& unit) {
  const auto it = m_shard.find(unit.layer);
  if (it == m_shard.end()) {
    return;
  }
  const TensorId shard = it->second;
  m_shard.erase(it);
  for (VarId p : unit.params) {
    if (tape.grad(p) != shard) {
      continue;  // zero_grad(set_to_none=True) dropped the views: the shard is gone
    }
    if (m_saved.count(unit.layer) == 0) {
      tape.retain(shard);  // flat_param._saved_grad_shard = flat_param.grad.data
      m_saved[unit.layer] = shard;
    }
    tape.release(tape.detach_grad(p));
  }
}

void FlatParamGradients::reduce_scatter(EagerTape& tape, const ParameterUnit& unit,
                                        std::string_view op_name) {
  std::vector<VarId> fresh;  // parameters with a gradient from this backward
  for (VarId p : unit.params) {
    const auto known = m_shard.find(unit.layer);
    if (tape.grad(p) != kNoTensor && (known == m_shard.end() || known->second != tape.grad(p))) {
      fresh.push_back(p);
    }
  }
  const std::string name = unit_name(unit);
  const auto saved = m_saved.find(unit.layer);
  TensorId shard = kNoTensor;
  if (!fresh.empty()) {
    // The unit's FlatParameter, padded to a multiple of the world; where frozen parameters share the unit
    // (PEFT's fsdp_auto_wrap_policy), the trainable ones are FlatParameters of their own, each padded.
    bool all_trainable = true;
    std::int64_t trainable_padded = 0;
    for (VarId p : unit.params) {
      all_trainable = all_trainable && tape.requires_grad(p);
      trainable_padded += tape.requires_grad(p) ? shard_numel(numel(tape.shape(p)), m_world) * m_world : 0;
    }
    const std::int64_t padded = all_trainable ? padded_flat_numel(tape, unit, m_world) : trainable_padded;
    const DType grad_dtype = tape.dtype(fresh.front());
    const DType reduce_dtype = m_reduce_dtype.value_or(grad_dtype);
    const DType param_dtype = sharded_parameter_dtype(tape, fresh.front(), m_fp32_shards);
    // SplitWithSizesBackward: torch.cat of the views' gradients, on the compute stream.
    tape.begin_op(name + ".fsdp.flat_param.split_with_sizes_backward", "cat");
    for (VarId p : fresh) {
      tape.use(tape.grad(p));
    }
    const TensorId flat = tape.allocate(name + ".flat_param.grad", tensor_bytes(Shape{padded}, grad_dtype),
                                        grad_dtype, TensorCategory::kGradient);
    for (VarId p : fresh) {
      tape.release(tape.detach_grad(p));
    }
    // _post_backward_hook, on the post-backward stream.
    tape.set_stream(kPostBackwardStream);
    TensorId full = flat;
    if (reduce_dtype != grad_dtype) {
      tape.begin_op(std::string(op_name) + ".cast_to_reduce_dtype", "_to_copy");
      tape.use(flat);
      full = tape.allocate(name + ".flat_param.grad.reduce_dtype", tensor_bytes(Shape{padded}, reduce_dtype),
                           reduce_dtype, TensorCategory::kGradient);
    }
    tape.record_stream(flat, kPostBackwardStream);  // _no_dispatch_record_stream(autograd_computed_grad)
    const Bytes full_bytes = tensor_bytes(Shape{padded}, reduce_dtype);
    if (m_world > 1) {
      tape.begin_op(std::string(op_name), "reduce_scatter_tensor");
      tape.use(full);
      shard =
          tape.allocate(name + ".flat_param.grad_shard", tensor_bytes(Shape{padded / m_world}, reduce_dtype),
                        reduce_dtype, TensorCategory::kGradient);
      tape.set_comm_bytes(full_bytes - full_bytes / static_cast<Bytes>(m_world));
      if (full != flat) {
        tape.release(full);  // _reduce_grad's unsharded_grad goes when it returns
      }
    } else {  // NO_SHARD: all_reduce in place; the flat gradient is kept
      tape.begin_op(std::string(op_name), "all_reduce");
      tape.use(full);
      shard = full;
    }
    if (shard != flat) {
      tape.release(flat);  // the autograd-computed gradient, once the post-backward stream is past it
    }
    if (reduce_dtype != param_dtype) {  // _cast_grad_to_param_dtype
      tape.begin_op(std::string(op_name) + ".cast_to_param_dtype", "_to_copy");
      tape.use(shard);
      const std::int64_t elements = m_world > 1 ? padded / m_world : padded;
      const TensorId cast =
          tape.allocate(name + ".flat_param.grad_shard.param_dtype",
                        tensor_bytes(Shape{elements}, param_dtype), param_dtype, TensorCategory::kGradient);
      tape.release(shard);
      shard = cast;
    }
    if (saved != m_saved.end()) {  // _accumulate_sharded_grad: _saved_grad_shard += sharded_grad
      tape.begin_op(std::string(op_name) + ".accumulate_sharded_grad", "add_");
      tape.use(saved->second);
      tape.use(shard);
      tape.release(shard);
      shard = saved->second;  // its reference moves here
      m_saved.erase(saved);
    }
    tape.set_stream(0);
  } else if (saved !=
             m_saved.end()) {  // no gradient reached the unit: _finalize_params restores the saved one
    shard = saved->second;
    m_saved.erase(saved);
  } else {
    return;
  }
  if (m_to_host) {  // copied into the pinned _cpu_grad; the GPU keeps none
    tape.begin_op(std::string(op_name) + ".copy_to_cpu_grad", "copy_");
    tape.use(shard);
    tape.release(shard);
    return;
  }
  for (VarId p : unit.params) {  // _use_sharded_grad_views
    if (tape.requires_grad(p) && tape.grad(p) == kNoTensor) {
      tape.retain(shard);
      tape.attach_grad(p, shard);
    }
  }
  tape.release(shard);  // the views hold it now
  m_shard[unit.layer] = shard;
}

}  // namespace vramsim
