#include "sim/inference/sglang_memory_pool.h"

#include <algorithm>
#include <cmath>

#include "sim/core/assert.h"
#include "sim/core/checked.h"
#include "sim/core/error.h"

namespace vramsim {

double sglang_default_mem_fraction_static(int tp) {
  if (tp >= 16) {
    return 0.79;
  }
  if (tp >= 8) {
    return 0.81;
  }
  if (tp >= 4) {
    return 0.85;
  }
  if (tp >= 2) {
    return 0.87;
  }
  return 0.88;
}

SglangPool sglang_profile_max_num_token(const SglangPoolInputs& in) {
  SIM_ASSERT(in.kv_heads > 0 && in.head_dim > 0 && in.layers > 0 && in.page_size > 0 && in.context_len > 0);
  SglangPool p;
  const std::optional<Bytes> per_layer =
      checked_mul(static_cast<Bytes>(in.kv_heads) * static_cast<Bytes>(in.head_dim), 2 * in.kv_dtype_bytes);
  const std::optional<Bytes> cell =
      per_layer ? checked_mul(*per_layer, static_cast<Bytes>(in.layers)) : std::nullopt;
  if (!cell) {
    throw InputError("--serving-engine sglang: the KV cell size overflows 64 bits");
  }
  p.cell_size_bytes = *cell;
  // get_available_gpu_memory returns free_gpu_memory / (1 << 30): the arithmetic is Python's float.
  constexpr double kGb = 1073741824.0;
  p.available_after_load_bytes = in.total_gpu_memory_bytes - in.weights_bytes;
  const double total_gb = static_cast<double>(in.total_gpu_memory_bytes) / kGb;
  const double available_gb = static_cast<double>(p.available_after_load_bytes) / kGb;
  p.rest_gb = available_gb - total_gb * (1.0 - in.mem_fraction_static);
  p.max_total_num_tokens =
      static_cast<std::int64_t>(std::floor(p.rest_gb * kGb / static_cast<double>(p.cell_size_bytes)));
  // page_size > 1: max_total_num_tokens // page_size * page_size
  p.max_total_num_tokens = p.max_total_num_tokens / in.page_size * in.page_size;
  if (p.max_total_num_tokens <= 0) {
    p.refusal = "Not enough memory. Please try to increase --mem-fraction-static.";
    return p;
  }
  p.k_size_bytes = static_cast<std::int64_t>(static_cast<Bytes>(p.max_total_num_tokens + in.page_size) *
                                             (p.cell_size_bytes / 2));
  p.max_running_requests = std::min<std::int64_t>(
      std::max<std::int64_t>(static_cast<std::int64_t>(static_cast<double>(p.max_total_num_tokens) /
                                                       static_cast<double>(in.context_len) * 512.0),
                             2048),
      4096);
  return p;
}

}  // namespace vramsim
