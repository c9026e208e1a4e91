// Hugging Face transformers' KV caches (cache_utils.py), as model.generate() fills them: the attention of
// every layer hands its new key/value states to Cache.update(), which returns the states attention reads.
//
//   dynamic : DynamicCache. The first update keeps the states themselves; every later one concatenates
//             (torch.cat along the sequence): a new tensor one token longer than the last replaces it, so the
//             allocator sees requests that grow by one token per layer per step -- the fragmentation case.
//   static  : StaticCache. Zero-filled (batch, kv_heads, max_cache_len, head_dim) keys and values per layer,
//             allocated before the prefill; update() writes in place (index_copy_) and attention always reads
//             all max_cache_len positions, with a materialised causal mask.
//   paged   : vLLM's paged cache (vllm_paged_cache.h, its own file: a serving engine's, sized by a profile
//             run): one preallocated block pool per layer, written in place.
// The two transformers caches would hold a dozen lines each in files of their own: they live here behind the
// KvCache interface, and make_kv_cache is the registry.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/graph/eager_tape.h"

namespace vramsim {

struct EmitContext;

class KvCache {
 public:
  virtual ~KvCache() = default;
  // cache_position of the forward about to run: the tokens already cached.
  std::int64_t past() const { return m_past; }
  // The key length attention sees for `s` new tokens.
  virtual std::int64_t key_length(std::int64_t s) const = 0;
  // Whether update() returns contiguous tensors (so sdpa's .contiguous() copies nothing).
  virtual bool returns_contiguous() const = 0;
  // Whether attention needs a materialised mask (a static cache's padding positions).
  virtual bool needs_mask() const = 0;
  // Cache.update(key_states, value_states, layer_idx): takes over the caller's references to k and v and
  // returns the states attention reads, each with one reference for the caller.
  virtual std::pair<VarId, VarId> update(EmitContext& ctx, int layer, VarId k, VarId v) = 0;
  // The forward of `s` tokens has finished: they are cached now.
  void advance(std::int64_t s) { m_past += s; }
  // generate() passes logits_to_keep=1: only the last position's logits. false: a training forward that
  // hands the model a cache (PEFT's prefix tuning, peft_prefix.h) computes every position's.
  virtual bool keeps_last_logits() const { return true; }
  // Releases the cached tensors (generate() returns and the cache goes).
  virtual void release(EagerTape& tape) = 0;
  // Bytes of keys and values held now.
  Bytes bytes(const EagerTape& tape) const;

 protected:
  std::vector<VarId> m_keys, m_values;  // per layer; kNoVar before the first update
  std::int64_t m_past = 0;
};

// "dynamic", "static" or "paged" (throws InputError naming --kv-cache otherwise). `max_cache_len`: prompt
// plus new tokens (static only); `block_size` tokens per block and `num_blocks` blocks (paged only). Creates
// the static and paged caches' tensors on the tape (in the current op).
std::unique_ptr<KvCache> make_kv_cache(std::string_view kind, EagerTape& tape, int layers, std::int64_t batch,
                                       std::int64_t kv_heads, std::int64_t head_dim,
                                       std::int64_t max_cache_len, DType dtype, std::int64_t block_size = 16,
                                       std::int64_t num_blocks = 0);
std::vector<std::string_view> kv_cache_names();

}  // namespace vramsim
