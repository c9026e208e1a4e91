#include "sim/inference/vllm_v1_startup.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/core/checked_size.h"

namespace vramsim {
namespace {

// Sizes from user-typed shapes: a product or sum that would wrap is an input error, never a wrong number.
Bytes mul(Bytes a, Bytes b) { return size_mul(a, b, "vLLM start-up"); }
Bytes add(Bytes a, Bytes b) { return size_add(a, b, "vLLM start-up"); }

}  // namespace

VllmSchedulerDefaults vllm_v1_scheduler_defaults(std::int64_t gpu_total_bytes, bool is_a100) {
  // if device_memory >= 70 * GiB_bytes and "a100" not in device_name: 8192 / 1024 (OPENAI_API_SERVER)
  if (gpu_total_bytes >= 70 * static_cast<std::int64_t>(kGiB) && !is_a100) {
    return {8192, 1024};
  }
  return {2048, 256};
}

std::int64_t vllm_kv_heads_per_rank(std::int64_t total_kv_heads, int tp) {
  SIM_ASSERT(tp >= 1 && total_kv_heads >= 1);
  return std::max<std::int64_t>(1, total_kv_heads / tp);
}

std::int64_t vllm_vocab_rows_per_rank(std::int64_t vocab_size, int tp) {
  SIM_ASSERT(tp >= 1 && vocab_size >= 0);
  constexpr std::int64_t kPadding = 64;  // DEFAULT_VOCAB_PADDING_SIZE
  const std::int64_t padded = (vocab_size + kPadding - 1) / kPadding * kPadding;
  return (padded + tp - 1) / tp;
}

Bytes vllm_v1_page_size_bytes(std::int64_t block_size, std::int64_t kv_heads, std::int64_t head_size,
                              Bytes kv_dtype_bytes) {
  return mul(mul(mul(2 * static_cast<Bytes>(block_size), static_cast<Bytes>(kv_heads)),
                 static_cast<Bytes>(head_size)),
             kv_dtype_bytes);
}

VllmProfilePeak vllm_v1_profile_peak(const VllmProfileShapes& s) {
  const Bytes a = s.activation_bytes;
  const Bytes t = static_cast<Bytes>(s.tokens);
  const Bytes h = static_cast<Bytes>(s.hidden);
  const Bytes reduced = s.tp > 1 ? h : 0;  // the all-reduce's output beside the row-parallel partial sum
  // LlamaDecoderLayer: hidden_states and residual (fused_add_rms_norm writes both in place), then
  // LlamaMLP: gate_up = gate_up_proj(x); x = act_fn(gate_up); x = down_proj(x) (gate_up alive until return).
  const Bytes mlp_columns =
      2 * h + 2 * static_cast<Bytes>(s.intermediate) + static_cast<Bytes>(s.intermediate) + h + reduced;
  // LlamaAttention: qkv = qkv_proj(x); rotary in place; attn_output = attn(q, k, v); o_proj(attn_output).
  const Bytes q = static_cast<Bytes>(s.q_heads * s.head_dim);
  const Bytes kv = static_cast<Bytes>(s.kv_heads * s.head_dim);
  const Bytes attn_columns = 2 * h + (q + 2 * kv) + q + h + reduced;
  VllmProfilePeak p;
  p.forward_bytes = mul(mul(t, std::max(mlp_columns, attn_columns)), a);
  if (!s.first_stage) {
    // The received buffer holds the residual (fused_add_rms_norm writes it in place) and the first layer's
    // input; from the second layer on the layer's input is a new tensor beside it: the widest point holds
    // the buffer (2 h) and a hidden state (h) where the first stage holds hidden state and residual (2 h).
    p.intermediate_bytes = mul(mul(t, 2 * h), a);
    p.forward_bytes = add(p.forward_bytes, mul(mul(t, h), a));
  }
  if (!s.last_stage) {
    p.peak_bytes = p.forward_bytes;
    return p;
  }
  // profile_run keeps hidden_states while _dummy_sampler_run computes the logits of hidden_states[logit
  // indices] (one row per request, a copy) and runs the Sampler: logits.to(float32), softmax to float32
  // probabilities, and random_sample's exponential draw q = torch.empty_like(probs).
  const Bytes r = static_cast<Bytes>(s.requests);
  const Bytes gathered = static_cast<Bytes>(s.vocab_rows) * static_cast<Bytes>(s.tp);
  const Bytes v = static_cast<Bytes>(s.vocab);
  p.sampler_bytes = add(add(add(mul(mul(t, h), a), mul(mul(r, h), a)),
                            add(mul(mul(r, gathered), a), mul(mul(r, v), Bytes{12}))),
                        p.intermediate_bytes);
  p.peak_bytes = std::max(p.forward_bytes, p.sampler_bytes);
  return p;
}

std::int64_t vllm_v1_num_blocks(std::int64_t available_bytes, Bytes page_size_bytes, std::int64_t layers) {
  SIM_ASSERT(page_size_bytes > 0 && layers > 0);
  if (available_bytes <= 0) {
    return 0;
  }
  return static_cast<std::int64_t>(static_cast<Bytes>(available_bytes) / page_size_bytes /
                                   static_cast<Bytes>(layers));
}

double vllm_v1_max_concurrency(std::int64_t num_blocks, std::int64_t block_size, std::int64_t max_model_len) {
  SIM_ASSERT(block_size > 0 && max_model_len > 0);
  const std::int64_t per_request = (max_model_len + block_size - 1) / block_size;
  return static_cast<double>(num_blocks) / static_cast<double>(per_request);
}

std::string vllm_gib(std::int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

VllmCacheCheck vllm_v1_check_enough_kv_cache_memory(std::int64_t available_bytes, Bytes page_size_bytes,
                                                    std::int64_t layers, std::int64_t block_size,
                                                    std::int64_t max_model_len) {
  const Bytes per_block = mul(page_size_bytes, static_cast<Bytes>(layers));
  const std::int64_t blocks = (max_model_len + block_size - 1) / block_size;
  const Bytes needed = mul(per_block, static_cast<Bytes>(blocks));
  // estimate_max_model_len's binary search over 1..max_model_len finds the longest length whose
  // cdiv(length, block_size) blocks fit: every block that fits, full.
  const std::int64_t fitting_blocks =
      available_bytes > 0 ? static_cast<std::int64_t>(static_cast<Bytes>(available_bytes) / per_block) : 0;
  return vllm_v1_kv_cache_refusal(available_bytes, static_cast<std::int64_t>(needed), max_model_len,
                                  std::min(max_model_len, fitting_blocks * block_size));
}

VllmCacheCheck vllm_v1_kv_cache_refusal(std::int64_t available_bytes, std::int64_t needed_bytes,
                                        std::int64_t max_model_len, std::int64_t estimated_max_model_len) {
  VllmCacheCheck c;
  if (available_bytes <= 0) {
    c.refusal =
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
        "the engine.";
    return c;
  }
  if (needed_bytes <= available_bytes) {
    return c;
  }
  c.estimated_max_model_len = estimated_max_model_len;
  const std::string estimated =
      c.estimated_max_model_len > 0
          ? fmt::format("Based on the available memory, the estimated maximum model length is {}.",
                        c.estimated_max_model_len)
          : std::string();
  c.refusal = fmt::format(
      "To serve at least one request with the models's max seq len ({}), ({} GiB KV cache is needed, which "
      "is "
      "larger than the available KV cache memory ({} GiB). {} Try increasing `gpu_memory_utilization` or "
      "decreasing `max_model_len` when initializing the engine.",
      max_model_len, vllm_gib(needed_bytes), vllm_gib(available_bytes), estimated);
  return c;
}

}  // namespace vramsim
