#include "sim/alloc/size_classes.h"

#include <bit>

namespace vramsim {

Bytes roundup_power2_next_division(Bytes size_bytes, std::uint64_t divisions) {
  if (size_bytes <= 4 || divisions <= 1) {
    return size_bytes;
  }
  if (std::has_single_bit(size_bytes)) {
    return size_bytes;
  }
  const Bytes power2_floor = std::bit_floor(size_bytes);
  const Bytes step = power2_floor / std::bit_floor(divisions);
  if (step == 0) {
    return 2 * power2_floor;
  }
  if (size_bytes % step == 0) {
    return size_bytes;
  }
  return (size_bytes / step) * step + step;
}

Bytes round_size(Bytes orig_bytes, const CachingConfig& config) {
  if (orig_bytes < kMinBlockSize) {
    return kMinBlockSize;
  }
  const std::uint64_t divisions = config.roundup_power2_divisions[roundup_interval_index(orig_bytes)];
  // 2.5+: a table entry of 1 means "off", like 0 (spec §11); eb42ad6 returned the size unaligned.
  if (divisions > 1 && orig_bytes > kMinBlockSize * divisions) {
    return roundup_power2_next_division(orig_bytes, divisions);
  }
  return kMinBlockSize * ((orig_bytes + kMinBlockSize - 1) / kMinBlockSize);
}

Bytes get_allocation_size(Bytes rounded_bytes) {
  if (rounded_bytes <= kSmallSize) {
    return kSmallBuffer;
  }
  if (rounded_bytes < kMinLargeAlloc) {
    return kLargeBuffer;
  }
  return kRoundLarge * ((rounded_bytes + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace vramsim
