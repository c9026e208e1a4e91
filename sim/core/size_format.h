// Human sizes in and out: "80GB", "81920MiB", "1.5GiB", "123456" (bytes) -> bytes, and bytes -> text.
#pragma once

#include <string>
#include <string_view>

#include "sim/core/types.h"

namespace vramsim {

// Parses a size as users write it. Units: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB. Decimal units (KB, MB,
// GB, TB) are powers of 1000 and binary ones (KiB, ...) powers of 1024; a bare K/M/G/T means binary, as
// PyTorch's messages do. Throws InputError("<what>: ...") on anything else, including negative values and
// values of 2^60 bytes or more.
Bytes parse_size(std::string_view text, std::string_view what);

// PyTorch's format_size (spec O2): <= 1024 -> "N bytes", <= 1 MiB -> KiB, <= 1 GiB -> MiB, else GiB,
// two decimals. Used in OOM messages and the memory_summary table.
std::string format_size(Bytes size_bytes);

// Fixed "12.34 GiB" style used by reports (always GiB/MiB/KiB by magnitude, two decimals).
std::string format_bytes_short(Bytes size_bytes);

}  // namespace vramsim
