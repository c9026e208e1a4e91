// vLLM's V1 engine start-up, the arithmetic its worker and KV-cache manager do before serving, line for line
// as its log prints them:
//
//   Model loading took W GiB                      GPUModelRunner.load_model (weights of this rank)
//   Memory profiling takes ... torch peak memory increase: A GiB; non-torch forward increase memory: N GiB;
//   weights memory: W GiB                         vllm/utils memory_profiling
//   (Worker.determine_available_memory) Available KV cache memory: K GiB              K = total x
//   gpu_memory_utilization - (W + A + N) GPU KV cache size: T tokens kv_cache_utils.get_kv_cache_config /
//   _report_kv_cache_config Maximum concurrency for L tokens per request: C x
//
// The weights (W) and the profile run's peak over them (A) are computed here from the model's shapes as
// vLLM's model code holds them (vllm/model_executor/models/llama.py: fused qkv_proj and gate_up_proj,
// fused_add_rms_norm in place, SiluAndMul), one rank of tensor parallelism; the profile run is
// GPUModelRunner.profile_run: _dummy_run(max_num_batched_tokens) (the tokens flattened into one batch,
// max_num_seqs dummy requests), then _dummy_sampler_run over the last position of each request. The
// non-torch increase (N) is non_torch_memory.h's. All sizes are bytes of one GPU (one rank).
#pragma once

#include <cstdint>
#include <string>

#include "sim/core/types.h"

namespace vramsim {

// vLLM's scheduler defaults (vllm/engine/arg_utils.py EngineArgs._set_default_args, `vllm serve`, i.e.
// UsageContext.OPENAI_API_SERVER): 8192 tokens and 1024 sequences on GPUs of at least 70 GiB that are not
// A100s, else 2048 and 256. (The offline LLM class doubles the tokens; not modelled.)
struct VllmSchedulerDefaults {
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;
};
VllmSchedulerDefaults vllm_v1_scheduler_defaults(std::int64_t gpu_total_bytes, bool is_a100);

// Key/value heads one rank holds (vllm/config ModelConfig.get_num_kv_heads): max(1, total / tp); with fewer
// heads than ranks each head is replicated.
std::int64_t vllm_kv_heads_per_rank(std::int64_t total_kv_heads, int tp);

// vLLM's VocabParallelEmbedding rows per rank: the vocabulary padded to a multiple of 64
// (DEFAULT_VOCAB_PADDING_SIZE, pad_vocab_size), divided among the ranks.
std::int64_t vllm_vocab_rows_per_rank(std::int64_t vocab_size, int tp);

// One layer's KV-cache page (vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes):
// 2 (keys, values) x block_size x kv_heads x head_size x dtype bytes.
Bytes vllm_v1_page_size_bytes(std::int64_t block_size, std::int64_t kv_heads, std::int64_t head_size,
                              Bytes kv_dtype_bytes);

// What the profile run holds at its peak above the weights (torch peak memory increase), per phase.
struct VllmProfileShapes {
  std::int64_t tokens = 0;    // max_num_batched_tokens
  std::int64_t requests = 0;  // min(max_num_seqs, tokens): one sampled position each
  std::int64_t hidden = 0;    // d_model
  std::int64_t q_heads = 0;   // per rank
  std::int64_t kv_heads = 0;  // per rank
  std::int64_t head_dim = 0;
  std::int64_t intermediate = 0;  // d_ff per rank
  std::int64_t vocab_rows = 0;    // lm_head rows per rank (padded)
  std::int64_t vocab = 0;         // the logits' columns after gathering: the model's vocabulary
  int tp = 1;
  Bytes activation_bytes = 2;  // the model dtype
  // Pipeline parallelism (vllm_pipeline_stages.h): a stage after the first receives its input in
  // GPUModelRunner.intermediate_tensors, made in _dummy_run by make_empty_intermediate_tensors
  // (batch_size=max_num_tokens): torch.zeros of [max_num_tokens, hidden] for "hidden_states" and
  // "residual", kept for the engine's life. Only the last stage runs the sampler (profile_run:
  // `if get_pp_group().is_last_rank: output = self._dummy_sampler_run(last_hidden_states)`).
  bool first_stage = true;
  bool last_stage = true;
};
struct VllmProfilePeak {
  Bytes forward_bytes = 0;  // the decoder layer's MLP (or attention, if larger) at its widest
  Bytes sampler_bytes = 0;  // the hidden states, the logits and the sampler's float32 tensors (0: not last)
  Bytes intermediate_bytes = 0;  // a later stage's received hidden_states and residual (in both)
  Bytes peak_bytes = 0;          // max of the two
};
VllmProfilePeak vllm_v1_profile_peak(const VllmProfileShapes& s);

// check_enough_kv_cache_memory's answer for one full-attention model: "" when a request of max_model_len
// fits, else vLLM's refusal with its estimated maximum model length (estimate_max_model_len: the longest
// length whose cdiv(len, block_size) pages of every layer fit in the available memory).
struct VllmCacheCheck {
  std::string refusal;
  std::int64_t estimated_max_model_len = 0;  // 0 when max_model_len fits
};
VllmCacheCheck vllm_v1_check_enough_kv_cache_memory(std::int64_t available_bytes, Bytes page_size_bytes,
                                                    std::int64_t layers, std::int64_t block_size,
                                                    std::int64_t max_model_len);

// _check_enough_kv_cache_memory's message from the bytes one max_model_len request needs (for models with
// several KV-cache groups, vllm_kv_cache_groups.h) and estimate_max_model_len's answer (0: none fits).
VllmCacheCheck vllm_v1_kv_cache_refusal(std::int64_t available_bytes, std::int64_t needed_bytes,
                                        std::int64_t max_model_len, std::int64_t estimated_max_model_len);

// get_num_blocks: available // page_size // layers (0 when nothing is available).
std::int64_t vllm_v1_num_blocks(std::int64_t available_bytes, Bytes page_size_bytes, std::int64_t layers);

// get_max_concurrency_for_kv_cache_config, full attention: num_blocks / cdiv(max_model_len, block_size).
double vllm_v1_max_concurrency(std::int64_t num_blocks, std::int64_t block_size, std::int64_t max_model_len);

// vLLM's "%.2f GiB" of a size: bytes / 2^30 printed with two decimals.
std::string vllm_gib(std::int64_t bytes);

}  // namespace vramsim
