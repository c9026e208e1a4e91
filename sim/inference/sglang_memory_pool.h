// SGLang's KV-cache pool at start-up, as its ModelRunner sizes it (python/sglang/srt/model_executor/
// model_runner.py, SGLang 0.4.x):
//
//   total_gpu_memory    init_torch_distributed: get_available_gpu_memory(...) after the process groups are
//                       made, the free memory in GB (bytes / 2^30, float), the minimum over the TP ranks
//   available           profile_max_num_token: the same free memory after load_model (weights loaded)
//   rest_memory         available - total_gpu_memory x (1 - mem_fraction_static)
//   cell_size           get_num_kv_heads(tp) x head_dim x num_hidden_layers x 2 x kv element bytes
//   max_total_num_tokens  int(rest_memory x 2^30 // cell_size); init_memory_pool refuses <= 0: "Not enough
//                       memory. Please try to increase --mem-fraction-static."
//   max_running_requests  min(max(int(max_total_num_tokens / context_len x 512), 2048), 4096)
//   "KV Cache is allocated. #tokens: N, K size: X GB, V size: X GB"  MHATokenToKVPool: per layer
//                       k_buffer and v_buffer of (N + page_size) x heads x head_dim, GB = 2^30 B
// mem_fraction_static's default, two rules:
//   SGLang 0.4.x  ServerArgs.__post_init__ (server_args.py): 0.88 at TP 1, 0.87 at TP >= 2, 0.85 at >= 4,
//                 0.81 at >= 8, 0.79 at >= 16.
//   SGLang 0.5.3+ ServerArgs._handle_gpu_memory_settings (server_args.py; sgl-project/sglang PR #10975,
//                 merged 2025-09-27): from the GPU's memory gpu_mem in MiB (get_device_memory_capacity),
//                 chunked_prefill_size and cuda_graph_max_bs by gpu_mem, then reserved_mem (MiB) = 512 +
//                 max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024, at
//                 least 10 x 1024 when gpu_mem > 60 x 1024, and mem_fraction_static =
//                 round((gpu_mem - reserved_mem) / gpu_mem, 3). (Not modelled: the speculative-decoding and
//                 DP-attention terms, the later piecewise-CUDA-graph term, which is off by default, and
//                 adjust_mem_fraction_for_vlm.)
// All sizes are bytes of one GPU.
#pragma once

#include <cstdint>
#include <string>

#include "sim/core/types.h"

namespace vramsim {

// SGLang 0.4.x's default by TP size.
double sglang_default_mem_fraction_static(int tp);

// SGLang 0.5.3+'s _handle_gpu_memory_settings for a GPU of `gpu_mem_mib` MiB (CUDA, not NPU), with the
// values it sets on the way.
struct SglangGpuMemorySettings {
  std::int64_t chunked_prefill_size = 0;
  std::int64_t cuda_graph_max_bs = 0;
  double reserved_mem_mib = 0.0;
  double mem_fraction_static = 0.0;  // rounded to three decimals, as round(x, 3)
};
SglangGpuMemorySettings sglang_gpu_memory_settings(double gpu_mem_mib, int tp, int pp);

struct SglangPoolInputs {
  std::int64_t total_gpu_memory_bytes = 0;  // free after the process groups are made
  std::int64_t weights_bytes = 0;           // what load_model took
  double mem_fraction_static = 0.88;
  std::int64_t kv_heads = 0;  // per rank: max(1, total // tp)
  std::int64_t head_dim = 0;
  std::int64_t layers = 0;
  Bytes kv_dtype_bytes = 2;
  std::int64_t context_len = 0;
  std::int64_t page_size = 1;  // --page-size, SGLang's default 1
};
struct SglangPool {
  std::int64_t available_after_load_bytes = 0;
  double rest_gb = 0.0;  // rest_memory as SGLang holds it (GB, float)
  Bytes cell_size_bytes = 0;
  std::int64_t max_total_num_tokens = 0;
  std::int64_t k_size_bytes = 0;  // one of K or V, every layer
  std::int64_t max_running_requests = 0;
  std::string refusal;  // init_memory_pool's error ("" : it starts)
};
SglangPool sglang_profile_max_num_token(const SglangPoolInputs& in);

}  // namespace vramsim
