#include "sim/serving/sglang_sizing.h"

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/inference/sglang_memory_pool.h"
#include "sim/inference/vllm_v1_startup.h"
#include "sim/serving/vllm_v1_sizing.h"

namespace vramsim {

using Paged = Prediction::Generation::Paged;

Paged size_sglang_pool(const PredictRequest& request) {
  const ModelConfig& m = request.model;
  const VllmServing& v = request.vllm;
  const GpuMemory gpu = device_memory(request.gpu, request.capacity_bytes, request.context);
  // The weights one rank loads: SGLang's layers are vLLM's (VocabParallelEmbedding padded to 64 rows,
  // get_rope's cos_sin_cache, the quantized linear methods), so vLLM's per-rank weights are taken; the rest
  // of vLLM's start-up is not used.
  const Paged vllm = size_vllm_v1_cache(request);
  Paged::Sglang s;
  s.default_fraction = v.mem_fraction_static <= 0.0;
  s.version = v.sglang_version;
  s.mem_fraction_static = v.mem_fraction_static;
  if (s.default_fraction && v.sglang_version == "0.4") {
    s.mem_fraction_static = sglang_default_mem_fraction_static(request.tensor_parallel);
  } else if (s.default_fraction) {
    // get_device_memory_capacity reads nvidia-smi's memory.total (MiB); the device's cudaMemGetInfo total is
    // taken here (on an H100 SXM 81,106 MiB against nvidia-smi's 81,559: the fraction moves by <= 0.001).
    const SglangGpuMemorySettings gs = sglang_gpu_memory_settings(
        static_cast<double>(gpu.total_bytes) / 1048576.0, request.tensor_parallel, 1);
    s.mem_fraction_static = gs.mem_fraction_static;
    s.reserved_mem_mib = gs.reserved_mem_mib;
  }
  // total_gpu_memory: the free memory after init_torch_distributed; the communicators' own buffers made
  // there are not sized (the CUDA context is), so it is total - context.
  s.total_gpu_memory_bytes = gpu.total_bytes - gpu.context_bytes;
  s.weights_bytes = vllm.v1->weights_bytes;
  s.context_len = vllm.max_model_len;
  SglangPoolInputs in;
  in.total_gpu_memory_bytes = s.total_gpu_memory_bytes;
  in.weights_bytes = s.weights_bytes;
  in.mem_fraction_static = s.mem_fraction_static;
  in.kv_heads = m.n_kv_heads;  // the rank model's: max(1, total // tp)
  in.head_dim = m.head_dim;
  in.layers = m.n_layers;
  in.kv_dtype_bytes =
      v.kv_cache_dtype == "auto" ? dtype_size_bytes(parameter_dtype(request.options.precision)) : 1;
  in.context_len = s.context_len;
  const SglangPool pool = sglang_profile_max_num_token(in);
  s.available_after_load_bytes = pool.available_after_load_bytes;
  s.rest_bytes = static_cast<std::int64_t>(pool.rest_gb * 1073741824.0);
  s.cell_size_bytes = static_cast<std::int64_t>(pool.cell_size_bytes);
  s.max_total_num_tokens = pool.max_total_num_tokens;
  s.k_size_bytes = pool.k_size_bytes;
  s.max_running_requests = pool.max_running_requests;
  Paged g;
  g.block_size = 1;
  g.gpu_memory_utilization = s.mem_fraction_static;
  g.max_model_len = s.context_len;
  g.max_num_batched_tokens = vllm.max_num_batched_tokens;
  g.max_num_seqs = s.max_running_requests;
  g.available_bytes = s.rest_bytes;
  g.block_bytes = s.cell_size_bytes;
  g.num_gpu_blocks = pool.refusal.empty() ? pool.max_total_num_tokens + in.page_size : 0;
  g.profile_peak_allocated_bytes = s.weights_bytes;
  g.refusal = pool.refusal;
  g.sglang = s;
  return g;
}

}  // namespace vramsim
