// Pure size decisions of the native allocator (spec §1). Named after PyTorch's helpers so the two can be read
// side by side; each is unit-tested against the spec's worked examples.
#pragma once

#include "sim/alloc/block_pool.h"
#include "sim/alloc/caching_config.h"
#include "sim/core/types.h"

namespace vramsim {

inline constexpr Bytes kMinBlockSize = 512;         // every block is a multiple of this
inline constexpr Bytes kSmallSize = 1 * kMiB;       // rounded sizes <= this use the small pool
inline constexpr Bytes kSmallBuffer = 2 * kMiB;     // small-pool segment; small expandable page
inline constexpr Bytes kLargeBuffer = 20 * kMiB;    // segment for 1-10 MiB requests; large expandable page
inline constexpr Bytes kMinLargeAlloc = 10 * kMiB;  // from here a request gets a segment of its own size
inline constexpr Bytes kRoundLarge = 2 * kMiB;      // ... rounded up to this
inline constexpr Bytes kAllocationCeiling = Bytes{1} << 60;  // larger requests fail at once ("more than 1EB")

// R3: round x up to the next of `divisions` equal steps between powers of two.
Bytes roundup_power2_next_division(Bytes size_bytes, std::uint64_t divisions);

// R1-R4: the block size a request of `orig_bytes` asks for. pre: orig_bytes > 0.
Bytes round_size(Bytes orig_bytes, const CachingConfig& config);

// P1: small pool iff the rounded size is <= 1 MiB.
inline PoolKind get_pool(Bytes rounded_bytes) {
  return rounded_bytes <= kSmallSize ? PoolKind::kSmall : PoolKind::kLarge;
}

// A1-A3: the cudaMalloc size for a new segment serving a rounded request.
Bytes get_allocation_size(Bytes rounded_bytes);

}  // namespace vramsim
