#include "sim/training/optimizer.h"

#include <algorithm>
#include <string>

#include "sim/core/assert.h"

namespace vramsim {
namespace {

bool is_adam(OptimizerKind k) { return k == OptimizerKind::kAdam || k == OptimizerKind::kAdamW; }
bool is_bnb_8bit(OptimizerKind k) {
  return k == OptimizerKind::kAdamW8bit || k == OptimizerKind::kPagedAdamW8bit;
}
bool is_bnb(OptimizerKind k) { return is_bnb_8bit(k) || k == OptimizerKind::kPagedAdamW; }
bool is_paged(OptimizerKind k) {
  return k == OptimizerKind::kPagedAdamW || k == OptimizerKind::kPagedAdamW8bit;
}

std::string kind_prefix(const TrainingOptions& o) {
  return "optimizer." + std::string(optimizer_name(o.optimizer));
}

}  // namespace

OptimizerModel::OptimizerModel(EagerTape& tape, const TrainingOptions& options, std::vector<VarId> params,
                               int state_shards, bool on_host, bool host_fp32, bool fp32_sharded_params)
    : m_tape(tape),
      m_options(options),
      m_params(std::move(params)),
      m_states(m_params.size()),
      m_initialized(m_params.size(), false),
      m_state_shards(state_shards),
      m_on_host(on_host),
      m_host_fp32(host_fp32),
      m_fp32_sharded_params(fp32_sharded_params) {}

DType OptimizerModel::stepped_dtype(std::size_t i) const {
  const DType d = m_tape.dtype(m_params[i]);
  const bool half = d == DType::kBFloat16 || d == DType::kFloat16;
  return m_fp32_sharded_params && half ? DType::kFloat32 : d;
}

// The elements this rank updates: its shard (ceil(numel / shards)) when states are partitioned.
std::int64_t OptimizerModel::param_numel(std::size_t i) const {
  const std::int64_t n = numel(m_tape.shape(m_params[i]));
  const auto it = m_param_state_shards.find(m_params[i]);
  const std::int64_t shards = it == m_param_state_shards.end() ? m_state_shards : it->second;
  return shards <= 1 ? n : (n + shards - 1) / shards;
}

void OptimizerModel::set_state_shards(VarId p, int shards) {
  SIM_ASSERT(std::find(m_params.begin(), m_params.end(), p) != m_params.end() && shards >= 1);
  m_param_state_shards[p] = shards;
}

Bytes OptimizerModel::param_bytes(std::size_t i, DType dtype) const {
  return storage_bytes(param_numel(i), dtype, m_tape.shape(m_params[i]));
}

std::string OptimizerModel::param_name(std::size_t i) const { return m_tape.name(m_params[i]); }

void OptimizerModel::set_zero_redundancy_partition(const std::vector<VarId>& local) {
  m_zero_redundancy = true;
  m_local.clear();
  for (VarId p : local) {
    const auto it = std::find(m_params.begin(), m_params.end(), p);
    SIM_ASSERT(it != m_params.end());
    m_local.push_back(static_cast<std::size_t>(it - m_params.begin()));
  }
}

void OptimizerModel::construct() {
  // bitsandbytes' optimizers update bf16 parameters in place from their own states: no master copy; nor
  // torch.optim on bf16 parameters (--master-weights none), nor on FSDP's fp32 shards.
  if (!steps_fp32_master(m_options) || m_on_host || m_fp32_sharded_params) {
    return;
  }
  m_tape.begin_op(kind_prefix(m_options) + ".master_weights", "_to_copy");
  m_master.assign(m_params.size(), kNoTensor);
  for (std::size_t i : stepped()) {
    // A parameter that already is fp32 (PEFT's adapters under autocast_adapter_dtype) is its own master:
    // Megatron's Float16OptimizerWithFloat16Params copies only the fp16/bf16 parameters ("fp32 params":
    // kept and stepped as they are).
    if (stepped_dtype(i) == DType::kFloat32) {
      continue;
    }
    m_master[i] = m_tape.allocate(param_name(i) + ".master", param_bytes(i, DType::kFloat32), DType::kFloat32,
                                  TensorCategory::kOptimizerState);
  }
}

bool OptimizerModel::has_master(std::size_t i) const { return !m_master.empty() && m_master[i] != kNoTensor; }

// State dtype: the parameter's, except under bf16 precision, where the optimizer works on fp32 masters.
void OptimizerModel::init_states(std::size_t i) {
  const bool fp32_states =
      m_on_host ? m_host_fp32 : steps_fp32_master(m_options);  // fp32 masters are stepped
  const DType dt = fp32_states ? DType::kFloat32 : stepped_dtype(i);
  const std::string n = param_name(i);
  std::vector<TensorId>& st = m_states[i];
  const auto add = [&](const std::string& what, Bytes bytes, DType d) {
    if (m_on_host) {  // the host optimizer's state: CPU memory, no GPU allocation
      m_host_state_bytes += bytes;
      return;
    }
    st.push_back(m_tape.allocate(n + "." + what, bytes, d, TensorCategory::kOptimizerState));
  };
  m_initialized[i] = true;
  const std::int64_t count = param_numel(i);
  // bitsandbytes' Optimizer8bit.get_state_buffer: paged (unified memory) for parameters of >= 1e5 elements.
  const auto state_buffer = [&](const std::string& what, Bytes bytes, DType d) {
    if (is_paged(m_options.optimizer) && count >= 100'000 && !m_on_host) {
      m_paged_state_bytes += bytes;
    } else {
      add(what, bytes, d);
    }
  };
  switch (m_options.optimizer) {
    case OptimizerKind::kSgd:
      break;
    case OptimizerKind::kSgdMomentum:
      add("momentum_buffer", param_bytes(i, dt), dt);  // torch.clone(grad).detach()
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      if (m_options.optimizer_impl == OptimizerImpl::kFused && !m_on_host) {
        add("step", 4, DType::kFloat32);  // fused/capturable keep `step` on the device
      }
      add("exp_avg", param_bytes(i, dt), dt);
      add("exp_avg_sq", param_bytes(i, dt), dt);
      break;
    case OptimizerKind::kAdamW8bit:
    case OptimizerKind::kPagedAdamW8bit:
      if (count < 4096) {  // bitsandbytes min_8bit_size: small tensors keep 32-bit states
        state_buffer("state1", param_bytes(i, DType::kFloat32), DType::kFloat32);
        state_buffer("state2", param_bytes(i, DType::kFloat32), DType::kFloat32);
      } else {
        const Bytes blocks = static_cast<Bytes>((count + 255) / 256);
        state_buffer("state1", static_cast<Bytes>(count), DType::kUInt8);
        add("absmax1", blocks * 4, DType::kFloat32);  // torch.zeros: a device tensor
        state_buffer("state2", static_cast<Bytes>(count), DType::kUInt8);
        add("absmax2", blocks * 4, DType::kFloat32);
      }
      break;
    case OptimizerKind::kPagedAdamW:  // Optimizer2State with optim_bits=32: fp32 states whatever the
                                      // parameter
      state_buffer("state1", param_bytes(i, DType::kFloat32), DType::kFloat32);
      state_buffer("state2", param_bytes(i, DType::kFloat32), DType::kFloat32);
      break;
    case OptimizerKind::kAdafactor: {
      const Shape& s = m_tape.shape(m_params[i]);
      if (s.size() >= 2) {
        const std::int64_t cols = s.back();
        const std::int64_t rows = count / cols;
        add("row_var", static_cast<Bytes>(rows) * dtype_size_bytes(dt), dt);
        add("col_var", static_cast<Bytes>(cols) * dtype_size_bytes(dt), dt);
      } else {
        add("variance", param_bytes(i, dt), dt);
      }
      break;
    }
  }
}

void OptimizerModel::step() {
  if (m_on_host) {
    // The host's step, then the updated parameters copied into the GPU's (no GPU allocation).
    for (std::size_t i : stepped()) {  // the host optimizer's states, made at its first step
      if (!m_initialized[i]) {
        init_states(i);
      }
    }
    m_tape.begin_op(kind_prefix(m_options) + ".host_step.copy_params_to_device", "copy_");
    for (VarId p : m_params) {
      m_tape.use(m_tape.storage(p));
    }
    return;
  }
  std::vector<std::size_t> with_grad;
  for (std::size_t i : stepped()) {
    if (m_tape.grad(m_params[i]) != kNoTensor) {
      with_grad.push_back(i);
    }
  }
  step_params(with_grad);
  if (m_zero_redundancy) {  // _sync_params: every rank broadcasts its updated partition into param.data
    m_tape.begin_op("ZeroRedundancyOptimizer._sync_params", "broadcast");
    for (VarId p : m_params) {
      m_tape.use(m_tape.storage(p));
    }
  }
}

void OptimizerModel::step_flat(TensorId flat_grad) {
  SIM_ASSERT(!m_on_host && !m_zero_redundancy);
  m_flat_grad = flat_grad;
  m_flat_grad_read = false;
  step_params(stepped());
  m_flat_grad = kNoTensor;
}

void OptimizerModel::use_grad(std::size_t i) {
  if (m_flat_grad == kNoTensor) {
    m_tape.use_once(m_tape.grad(m_params[i]));  // gradients that are views of one bucket share a storage
  } else if (!m_flat_grad_read) {
    // One tensor holds every parameter's gradient: the step reads it once (the for-loop path's per-parameter
    // ops each read a slice, which the op's byte count cannot express; the first one is charged the whole).
    m_tape.use(m_flat_grad);
    m_flat_grad_read = true;
  }
}

std::vector<std::size_t> OptimizerModel::stepped() const {
  if (m_zero_redundancy) {
    return m_local;
  }
  std::vector<std::size_t> all(m_params.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
  }
  return all;
}

void OptimizerModel::step_in_backward(VarId param) {
  const auto it = std::find(m_params.begin(), m_params.end(), param);
  if (it == m_params.end() || m_tape.grad(param) == kNoTensor) {
    return;  // a parameter this optimizer does not own (frozen)
  }
  step_params({static_cast<std::size_t>(it - m_params.begin())});
  m_tape.begin_op("optimizer_in_bwd.zero_grad." + m_tape.name(param), "set_to_none");
  m_tape.set_grad_to_none(param);
}

// foreach, fused and single-tensor (_init_group): the states of every parameter that has a gradient, before
// any update. The for-loop path creates each parameter's states inside the loop, right before its update, as
// the CS336 hand-written AdamW does (at most one parameter's temporaries apart, at the first step only).
void OptimizerModel::step_params(const std::vector<std::size_t>& with_grad) {
  bool any_new = false;
  for (std::size_t i : with_grad) {
    any_new = any_new || (!m_initialized[i] && m_options.optimizer != OptimizerKind::kSgd);
  }
  if (any_new && m_options.optimizer_impl != OptimizerImpl::kForLoop) {
    m_tape.begin_op(kind_prefix(m_options) + ".init_state", "zeros_like");
    for (std::size_t i : with_grad) {
      if (!m_initialized[i]) {
        init_states(i);
      }
    }
  }
  const bool fused_kernel = m_options.optimizer_impl == OptimizerImpl::kFused || is_bnb(m_options.optimizer);
  if (fused_kernel) {
    m_tape.begin_op(kind_prefix(m_options) + ".fused_step", "_fused_adamw_");
    for (std::size_t i : with_grad) {
      m_tape.use(m_tape.storage(m_params[i]));
      use_grad(i);
    }
  } else if (m_options.optimizer_impl == OptimizerImpl::kForeach) {
    step_foreach(with_grad);
  } else {
    step_for_loop(with_grad);
  }
  if (!m_master.empty()) {  // param.copy_(master): in place
    m_tape.begin_op(kind_prefix(m_options) + ".copy_master_to_params", "_foreach_copy_");
    for (std::size_t i : with_grad) {
      if (has_master(i)) {
        m_tape.use(m_master[i]);
      }
    }
  }
}

void OptimizerModel::step_foreach(const std::vector<std::size_t>& with_grad) {
  const std::string n = kind_prefix(m_options);
  std::vector<TensorId> temps;
  if (!m_master.empty() && m_flat_grad == kNoTensor) {  // fp32 copies of the bf16 gradients
    m_tape.begin_op(n + "._foreach_grads_to_fp32", "_to_copy");
    for (std::size_t i : with_grad) {
      if (!has_master(i)) {  // an fp32 parameter's gradient is fp32 already
        continue;
      }
      use_grad(i);
      temps.push_back(m_tape.allocate(param_name(i) + ".grad_fp32", param_bytes(i, DType::kFloat32),
                                      DType::kFloat32, TensorCategory::kTemporary));
    }
  }
  if (is_adam(m_options.optimizer) || m_options.optimizer == OptimizerKind::kAdafactor) {
    const bool adam = is_adam(m_options.optimizer);
    m_tape.begin_op(n + (adam ? "._foreach_sqrt" : ".var_estimates"),
                    adam ? "_foreach_sqrt" : "_foreach_mul");
    for (std::size_t i : with_grad) {
      const DType pd = has_master(i) ? DType::kFloat32 : stepped_dtype(i);
      temps.push_back(m_tape.allocate(param_name(i) + (adam ? ".exp_avg_sq_sqrt" : ".var_estimate"),
                                      param_bytes(i, pd), pd, TensorCategory::kTemporary));
    }
  }
  if (is_adam(m_options.optimizer) && m_options.adam_foreach_denom == AdamForeachDenom::kOutOfPlace) {
    // PyTorch 1.13 / 2.0: `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`, a second list beside the sqrt
    // list (both locals of _multi_tensor_adam(w), freed when it returns); 2.1+ adds eps in place.
    m_tape.begin_op(n + "._foreach_add", "_foreach_add");
    const std::size_t sqrt_begin = temps.size() - with_grad.size();
    for (std::size_t k = 0; k < with_grad.size(); ++k) {
      const std::size_t i = with_grad[k];
      const DType pd = has_master(i) ? DType::kFloat32 : stepped_dtype(i);  // the sqrt list's dtype
      m_tape.use(temps[sqrt_begin + k]);
      temps.push_back(
          m_tape.allocate(param_name(i) + ".denom", param_bytes(i, pd), pd, TensorCategory::kTemporary));
    }
  }
  m_tape.begin_op(n + ".update", "_foreach_addcdiv_");
  for (std::size_t i : with_grad) {
    m_tape.use(m_tape.storage(m_params[i]));
    use_grad(i);
    for (TensorId s : m_states[i]) {
      m_tape.use(s);
    }
  }
  for (TensorId t : temps) {
    m_tape.release(t);
  }
}

void OptimizerModel::step_for_loop(const std::vector<std::size_t>& with_grad) {
  const std::string n = kind_prefix(m_options);
  TensorId previous_denom = kNoTensor;
  for (std::size_t i : with_grad) {
    const std::string pn = param_name(i);
    const DType pd = has_master(i) ? DType::kFloat32 : stepped_dtype(i);
    m_tape.begin_op(n + ".step." + pn, "for_loop_step");
    if (!m_initialized[i]) {
      init_states(i);
    }
    m_tape.use(m_tape.storage(m_params[i]));
    use_grad(i);
    for (TensorId s : m_states[i]) {
      m_tape.use(s);
    }
    TensorId grad32 = kNoTensor;
    if (has_master(i) && m_flat_grad == kNoTensor) {
      grad32 = m_tape.allocate(pn + ".grad_fp32", param_bytes(i, DType::kFloat32), DType::kFloat32,
                               TensorCategory::kTemporary);
    }
    if (is_adam(m_options.optimizer)) {
      // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
      const TensorId sq =
          m_tape.allocate(pn + ".exp_avg_sq_sqrt", param_bytes(i, pd), pd, TensorCategory::kTemporary);
      const TensorId denom =
          m_tape.allocate(pn + ".denom", param_bytes(i, pd), pd, TensorCategory::kTemporary);
      m_tape.release(sq);
      if (previous_denom != kNoTensor) {
        m_tape.release(previous_denom);
      }
      previous_denom = denom;
    } else if (m_options.optimizer == OptimizerKind::kAdafactor) {
      m_tape.release(
          m_tape.allocate(pn + ".var_estimate", param_bytes(i, pd), pd, TensorCategory::kTemporary));
    }
    if (grad32 != kNoTensor) {
      m_tape.release(grad32);
    }
  }
  if (previous_denom != kNoTensor) {
    m_tape.begin_op(n + ".step.return", "return");
    m_tape.release(previous_denom);
  }
}

void OptimizerModel::zero_grad() {
  m_tape.begin_op("optimizer.zero_grad", m_options.zero_grad_set_to_none ? "set_to_none" : "_foreach_zero_");
  for (VarId p : m_params) {
    if (m_options.zero_grad_set_to_none) {
      m_tape.set_grad_to_none(p);
    } else if (m_tape.grad(p) != kNoTensor) {
      m_tape.use(m_tape.grad(p));
    }
  }
}

}  // namespace vramsim
