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

SglangGpuMemorySettings sglang_gpu_memory_settings(double gpu_mem_mib, int tp, int pp) {
  SIM_ASSERT(gpu_mem_mib > 0.0 && tp >= 1 && pp >= 1);
  SglangGpuMemorySettings s;
  // The if/elif chain on gpu_mem (MiB), CUDA branches: T4/4080, A10/4090/5090, A100-40GB/L40, H100/A100-80GB,
  // H20/H200, then B200/MI300.
  const bool small_tp = tp < 4;
  if (gpu_mem_mib < 20 * 1024) {
    s.chunked_prefill_size = 2048;
    s.cuda_graph_max_bs = 8;
  } else if (gpu_mem_mib < 35 * 1024) {
    s.chunked_prefill_size = 2048;
    s.cuda_graph_max_bs = small_tp ? 24 : 80;
  } else if (gpu_mem_mib < 60 * 1024) {
    s.chunked_prefill_size = 4096;
    s.cuda_graph_max_bs = small_tp ? 32 : 160;
  } else if (gpu_mem_mib < 160 * 1024) {  // the < 90 GiB and < 160 GiB branches set the same values
    s.chunked_prefill_size = 8192;
    s.cuda_graph_max_bs = small_tp ? 256 : 512;
  } else {
    s.chunked_prefill_size = 16384;
    s.cuda_graph_max_bs = 512;
  }
  double reserved = 512.0;  // constant metadata (attention backend)
  reserved += static_cast<double>(std::max<std::int64_t>(s.chunked_prefill_size, 2048)) * 1.5;
  reserved += static_cast<double>(s.cuda_graph_max_bs) * 2.0;
  reserved += static_cast<double>(tp) * static_cast<double>(pp) / 8.0 * 1024.0;
  if (gpu_mem_mib > 60 * 1024) {
    reserved = std::max(reserved, 10.0 * 1024.0);
  }
  s.reserved_mem_mib = reserved;
  s.mem_fraction_static = std::nearbyint((gpu_mem_mib - reserved) / gpu_mem_mib * 1000.0) / 1000.0;
  return s;
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
