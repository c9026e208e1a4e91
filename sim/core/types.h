// Vocabulary shared by every layer. Units are in the names: *_bytes, *_ns.
#pragma once

#include <cstdint>

namespace vramsim {

using Bytes = std::uint64_t;     // a size or an address on the simulated device
using TimeNs = std::int64_t;     // simulated or recorded time, nanoseconds
using StreamId = std::uint64_t;  // CUDA stream handle value (0 = legacy default stream)

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;

}  // namespace vramsim
