// The native caching allocator's settings, parsed from the PYTORCH_CUDA_ALLOC_CONF syntax users already
// write ("expandable_segments:True,max_split_size_mb:128"). One options table (caching_config.cpp) lists
// every key with its default, unit and meaning; `vramsim replay --alloc-conf` and the recorded
// `allocator_settings` of a snapshot both end up here, so no setting is parsed twice.
//
// Version: the rules follow PyTorch 2.5-2.6 (the releases that recorded the real snapshots we validate on),
// which differ from the older eb42ad6 reading in spec §11 in: roundup_power2_divisions:1 means "off" (plain
// 512-byte rounding), max_non_split_rounding_mb exists, and GC / RA skip expandable blocks. What is refused,
// and why, follows the newest parsers (AcceleratorAllocatorConfig and CUDAAllocatorConfig of PyTorch 2.9+),
// whose messages vramsim repeats; `torch_version` (the base's, in parse_alloc_conf) turns on the rules of an
// older release where they differ (torch_version.h lists each difference and its source).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/alloc/torch_version.h"
#include "sim/core/types.h"

namespace vramsim {

inline constexpr Bytes kUnlimitedSplitSize = std::numeric_limits<Bytes>::max();
inline constexpr int kRoundupIntervals = 16;  // [1 MiB, 2 MiB) ... [32 GiB, inf)

struct CachingConfig {
  Bytes max_split_size_bytes = kUnlimitedSplitSize;
  Bytes max_non_split_rounding_bytes = 20 * kMiB;  // G5 tolerance
  double garbage_collection_threshold = 0.0;       // 0 = off; else in (0, 1)
  bool expandable_segments = false;
  std::array<std::uint64_t, kRoundupIntervals> roundup_power2_divisions{};  // 0 = no power-of-two rounding
  // Unset: no limit (PyTorch's 1.0). 0 is a limit too: DeviceCachingAllocator::setMemoryFraction allows
  // floor(0 x total) = 0 bytes, so every cudaMalloc is refused (c10/cuda/CUDACachingAllocator.cpp).
  std::optional<double> per_process_memory_fraction;
  TorchVersion torch_version = kNewestModelledTorch;  // whose rules parse and run (torch_version.h)
  std::string text;                                   // the string this came from, for reports

  bool operator==(const CachingConfig&) const = default;
};

// One row of the options table, for `--help` style listings and the README.
struct CachingOption {
  std::string_view key;
  std::string_view default_value;
  std::string_view meaning;
};
const std::vector<CachingOption>& caching_options();

// Parses `conf` on top of `base` as PyTorch does when both of its parsers read the same string
// (torch.cuda.memory._set_allocator_settings, or one environment variable): c10/core/AllocatorConfig.cpp's
// AcceleratorAllocatorConfig::parseArgs takes the device-generic keys (max_split_size_mb,
// max_non_split_rounding_mb, garbage_collection_threshold, roundup_power2_divisions, expandable_segments,
// pinned_use_background_threads) and skips the rest; c10/cuda/CUDAAllocatorConfig.cpp's parseArgs takes the
// CUDA keys (backend, per_process_memory_fraction, pinned_*, release_lock_on_cudamalloc, ...) and refuses a
// key neither knows. max_split_size, the divisions table and the GC threshold are reset to defaults first;
// the other settings keep `base`'s value unless named (spec D5). Throws InputError("<origin>: <key>:
// <PyTorch's reason>") where PyTorch refuses: "pinned_num_register_threads:1024" ("Number of register threads
// should be less than or equal to 128, got 1024"), "max_split_size_mb:2", "garbage_collection_threshold:1.2",
// "expandable_segments:true", an unknown key. backend:cudaMallocAsync, which PyTorch accepts, is refused as
// not modelled.
CachingConfig parse_alloc_conf(std::string_view conf, std::string_view origin,
                               const CachingConfig& base = {});

// The same settings under another release's rules: `config` with torch_version = `version`, or InputError
// ("<origin>: PyTorch X.Y has no ...") where `config` uses something that release does not have (expandable
// segments before 2.1, a divisions table that only the list form writes before 2.0, a G5 tolerance other
// than 20 MiB before 2.6). For settings read from a snapshot, whose string was already parsed by PyTorch.
CachingConfig with_torch_version(CachingConfig config, TorchVersion version, std::string_view origin);

// The recorded-settings form of a divisions table as the index used by round_size.
std::size_t roundup_interval_index(Bytes size_bytes);

}  // namespace vramsim
