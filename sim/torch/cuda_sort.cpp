// CUB's DispatchRadixSort (cub/device/dispatch/dispatch_radix_sort.cuh, CCCL 2.x): the policy the device's
// PTX version selects, the tile size its RegBoundScaling gives for the pair's dominant type, and the
// temporary allocations InvokeOnesweep aliases into one blob (each rounded up to 256 bytes, plus 255 bytes
// of alignment slack: AliasTemporaries). The ATen scripts follow Indexing.cu and Embedding.cu of PyTorch 2.x.
#include "sim/torch/cuda_sort.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/graph/eager_tape.h"  // tensor_bytes: sizes checked against the tensor limit

namespace vramsim {
namespace {

constexpr Bytes kCubAlignBytes = 256;  // AliasTemporaries' ALIGN_BYTES
constexpr int kOnesweepRadixBits = 8;  // ONESWEEP_RADIX_BITS of every policy
constexpr int kRadixDigits = 1 << kOnesweepRadixBits;
constexpr Bytes kOffsetBytes = 8;        // OffsetT: 64-bit (PyTorch passes num_items as int64_t)
constexpr Bytes kAtomicOffsetBytes = 4;  // AtomicOffsetT = PortionOffsetT = int
constexpr std::int64_t kMaxSmemPerBlock = 48 * 1024;
constexpr std::int64_t kPortionLimit = (std::int64_t{1} << 28) - 1;

std::int64_t div_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// RegBoundScaling<threads, items, T>: a policy's nominal 4-byte tile scaled to the dominant type's size.
struct Tile {
  std::int64_t threads;
  std::int64_t items;
  std::int64_t size() const { return threads * items; }
};
Tile reg_bound_scaling(std::int64_t threads, std::int64_t items, std::int64_t type_bytes) {
  const std::int64_t scaled_items =
      std::max<std::int64_t>(1, items * 4 / std::max<std::int64_t>(4, type_bytes));
  const std::int64_t scaled_threads =
      std::min<std::int64_t>(threads, div_up(kMaxSmemPerBlock / (type_bytes * scaled_items), 32) * 32);
  return {scaled_threads, scaled_items};
}

// The onesweep policy's nominal tile for keys of 4 and 8 bytes (Policy700, Policy800, Policy900).
Tile onesweep_tile(int key_bytes, int value_bytes, int compute_capability) {
  const std::int64_t dominant = std::max(key_bytes, value_bytes);
  if (compute_capability >= 90) {
    const std::int64_t items = key_bytes == 4 ? (value_bytes < 8 ? 17 : 29) : (value_bytes < 8 ? 30 : 24);
    return reg_bound_scaling(384, items, dominant);
  }
  if (compute_capability >= 80) {
    return reg_bound_scaling(384, key_bytes == 4 ? 17 : 21, dominant);
  }
  return reg_bound_scaling(256, key_bytes == 4 && value_bytes == 4 ? 46 : 23, dominant);
}

Bytes round_up(Bytes n, Bytes to) { return (n + to - 1) / to * to; }

Bytes alias_temporaries(std::initializer_list<Bytes> sizes) {
  Bytes total = kCubAlignBytes - 1;
  for (Bytes s : sizes) {
    total += round_up(s, kCubAlignBytes);
  }
  return total;
}

// DeviceScan / DeviceSelect::UniqueByKey: one decoupled look-back tile state, (tiles + 32 padding) status
// words. An estimate: the scan policies' tiles differ by CUB version and type; these kernels' scratch is a
// few KiB against the sort's buffers of the index tensor's size.
Bytes cub_lookback_temp_bytes(std::int64_t num_items, std::int64_t tile_items, Bytes word_bytes) {
  constexpr std::int64_t kTileStatusPadding = 32;
  return alias_temporaries(
      {static_cast<Bytes>(div_up(num_items, tile_items) + kTileStatusPadding) * word_bytes});
}

}  // namespace

int ScratchScript::alloc(Bytes size_bytes) {
  SIM_ASSERT(size_bytes > 0);
  m_steps.push_back(ScratchStep{size_bytes, -1});
  return static_cast<int>(m_steps.size()) - 1;
}

void ScratchScript::free(int handle) {
  SIM_ASSERT(handle >= 0 && handle < static_cast<int>(m_steps.size()) && m_steps[handle].alloc_bytes > 0);
  m_steps.push_back(ScratchStep{0, handle});
}

int cub_num_bits(std::int64_t max_key) {
  int bits = 1;  // get_num_bits(0) = 1
  while (bits < 63 && (max_key >> bits) > 0) {
    ++bits;
  }
  return bits;
}

Bytes cub_radix_sort_pairs_temp_bytes(std::int64_t num_items, int key_bytes, int value_bytes, int num_bits,
                                      int compute_capability) {
  SIM_ASSERT(num_items >= 0 && num_bits > 0);
  const std::int64_t dominant = std::max(key_bytes, value_bytes);
  // SingleTilePolicy <256, 19> of every policy from SM70: one block sorts it, and CUB asks for 1 byte.
  if (num_items <= reg_bound_scaling(256, 19, dominant).size()) {
    return 1;
  }
  const std::int64_t tile = onesweep_tile(key_bytes, value_bytes, compute_capability).size();
  const std::int64_t portion = kPortionLimit / tile * tile;
  const std::int64_t passes = div_up(num_bits, kOnesweepRadixBits);
  const std::int64_t portions = div_up(num_items, portion);
  const std::int64_t max_blocks = div_up(std::min(num_items, portion), tile);
  const bool extra_buffers = passes > 1;
  return alias_temporaries({
      static_cast<Bytes>(portions * passes * kRadixDigits) * kOffsetBytes,  // bins
      static_cast<Bytes>(max_blocks * kRadixDigits) * kAtomicOffsetBytes,   // lookback
      extra_buffers ? static_cast<Bytes>(num_items) * key_bytes : 0,        // extra key buffer
      extra_buffers ? static_cast<Bytes>(num_items) * value_bytes : 0,      // extra value buffer
      static_cast<Bytes>(portions * passes) * kAtomicOffsetBytes,           // counters
  });
}

ScratchScript index_put_with_sort_scratch(std::int64_t num_indices, std::int64_t rows, int compute_capability,
                                          int host_indices, Bytes values_copy_bytes) {
  ScratchScript s;
  if (num_indices == 0) {
    return s;
  }
  const Bytes index_bytes = tensor_bytes({num_indices}, DType::kInt64);  // positions
  // computeLinearIndex, index by index: (wrapIndexOnce's index.remainder(size) * stride).to(device); on
  // the host only the copy is a device tensor. The first becomes linearIndex, the others are added into it.
  for (int i = 0; i < host_indices; ++i) {
    const int copy = s.alloc(index_bytes);
    if (i > 0) {
      s.free(copy);
    }
  }
  const int remainder = s.alloc(index_bytes);
  const int product = s.alloc(index_bytes);
  s.free(remainder);
  if (host_indices > 0) {
    s.free(product);  // linearIndex += index
  }
  if (values_copy_bytes > 0) {
    s.alloc(values_copy_bytes);  // expandedValue.contiguous()
  }
  s.alloc(index_bytes);  // sorted_indices
  s.alloc(index_bytes);  // orig_indices
  s.alloc(index_bytes);  // range = arange(num_indices)
  // keys are row numbers: get_num_bits(largestIndex(self) / sliceSize) = bits of rows - 1
  const int temp = s.alloc(cub_radix_sort_pairs_temp_bytes(
      num_indices, 8, 8, cub_num_bits(std::max<std::int64_t>(rows - 1, 0)), compute_capability));
  s.free(temp);
  return s;
}

EmbeddingBackwardScratch embedding_dense_backward_scratch(std::int64_t num_indices,
                                                          std::int64_t embedding_dim, DType grad_dtype,
                                                          int compute_capability) {
  EmbeddingBackwardScratch e;
  constexpr std::int64_t kFeatureKernelMaxIndices = 3072;  // embedding_backward_feature_kernel below this
  if (num_indices <= kFeatureKernelMaxIndices) {
    return e;
  }
  const Bytes index_bytes = tensor_bytes({num_indices}, DType::kInt64);  // token ids
  ScratchScript& b = e.before_grad;
  b.alloc(index_bytes);                    // sorted_indices
  b.alloc(index_bytes);                    // orig_indices
  const int range = b.alloc(index_bytes);  // arange, freed when the dispatch lambda returns
  // radix_sort_pairs(..., num_indices, false): the nbits argument is commented out, all 64 bits
  const int temp = b.alloc(cub_radix_sort_pairs_temp_bytes(num_indices, 8, 8, 64, compute_capability));
  b.free(temp);
  b.free(range);

  constexpr std::int64_t kScanTileItems = 896;  // see cub_lookback_temp_bytes
  ScratchScript& a = e.after_grad;
  a.alloc(index_bytes);                       // segment_offsets
  a.alloc(8);                                 // num_of_segments_tensor
  const int keys_out = a.alloc(index_bytes);  // unique_by_key's keys_out (PyTorch passes nullptr)
  const int unique_temp = a.alloc(cub_lookback_temp_bytes(num_indices, kScanTileItems, 8));
  a.free(unique_temp);
  a.free(keys_out);
  a.alloc(index_bytes);  // partials_per_segment
  a.alloc(index_bytes);  // partials_per_segment_offset
  const int scan_temp = a.alloc(cub_lookback_temp_bytes(num_indices, kScanTileItems, 16));  // exclusive_sum
  a.free(scan_temp);
  a.alloc(8);            // num_of_partial_segments_tensor
  a.alloc(index_bytes);  // partial_segment_offset
  // grad_weight_per_segment: (numel, stride) in acc_type (fp32 for half and bfloat16)
  const DType acc =
      grad_dtype == DType::kFloat16 || grad_dtype == DType::kBFloat16 ? DType::kFloat32 : grad_dtype;
  a.alloc(tensor_bytes({num_indices, embedding_dim}, acc));
  return e;
}

}  // namespace vramsim
