#include "sim/parallel/tensor_parallel.h"

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

ModelConfig tensor_parallel_rank(const ModelConfig& model, int tp) {
  if (tp < 1 || tp > 1024) {
    throw InputError(fmt::format("--tp: {} is not in 1..1024", tp));
  }
  if (tp == 1) {
    return model;
  }
  if (model.n_heads % tp != 0) {
    throw InputError(
        fmt::format("--tp: {} does not divide the {} attention heads of {}", tp, model.n_heads, model.name));
  }
  if (model.n_kv_heads > tp && model.n_kv_heads % tp != 0) {
    throw InputError(fmt::format("--tp: {} does not divide the {} key/value heads of {}", tp,
                                 model.n_kv_heads, model.name));
  }
  // Fewer key/value heads than ranks: each rank holds one, replicated tp / kv times (vLLM's
  // QKVParallelLinear: num_kv_head_replicas = divide(tp_size, total_num_kv_heads), which requires it).
  if (model.n_kv_heads < tp && tp % model.n_kv_heads != 0) {
    throw InputError(
        fmt::format("--tp: {} is not a multiple of the {} key/value heads of {} (each would be "
                    "replicated on tp / heads ranks)",
                    tp, model.n_kv_heads, model.name));
  }
  if (model.d_ff % tp != 0) {
    throw InputError(
        fmt::format("--tp: {} does not divide the MLP's {} hidden units of {}", tp, model.d_ff, model.name));
  }
  ModelConfig m = model;
  m.n_heads = model.n_heads / tp;
  m.n_kv_heads = model.n_kv_heads >= tp ? model.n_kv_heads / tp : 1;
  m.d_ff = model.d_ff / tp;
  if (m.moe.n_experts > 0) {  // expert MLPs split like the dense one (expert tensor parallelism)
    m.moe.expert_d_ff = (m.moe.expert_d_ff + tp - 1) / tp;
    m.moe.shared_expert_d_ff = (m.moe.shared_expert_d_ff + tp - 1) / tp;
  }
  const std::int64_t multiple = 128LL * tp;  // Megatron's _vocab_size_with_padding
  m.vocab_size = (model.vocab_size + multiple - 1) / multiple * multiple / tp;
  m.name = fmt::format("{} (tensor-parallel rank of {})", model.name, tp);
  return m;
}

}  // namespace vramsim
