// The native caching allocator's settings, parsed from the PYTORCH_CUDA_ALLOC_CONF syntax users already
// write ("expandable_segments:True,max_split_size_mb:128"). One options table (caching_config.cpp) lists
// every key with its default, unit and meaning; `vramsim replay --alloc-conf` and the recorded
// `allocator_settings` of a snapshot both end up here, so no setting is parsed twice.
//
// Version: the rules follow PyTorch 2.5-2.6 (the releases that recorded the real snapshots we validate on),
// which differ from the older eb42ad6 reading in spec §11 in: roundup_power2_divisions:1 means "off" (plain
// 512-byte rounding), max_split_size_mb must be >= 20, max_non_split_rounding_mb exists, and GC / RA skip
// expandable blocks.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

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
  double per_process_memory_fraction = 0.0;  // 0 = not set (newer releases accept it as a config key)
  std::string text;                          // the string this came from, for reports

  bool operator==(const CachingConfig&) const = default;
};

// One row of the options table, for `--help` style listings and the README.
struct CachingOption {
  std::string_view key;
  std::string_view default_value;
  std::string_view meaning;
};
const std::vector<CachingOption>& caching_options();

// Parses `conf` on top of `base` the way PyTorch does (spec D5): max_split_size, the divisions table and the
// GC threshold are reset to defaults first; expandable_segments keeps its previous value unless named. Throws
// InputError("<origin>: <key>: <problem>") on an unknown key, a malformed value or a value out of range (e.g.
// "max_split_size_mb:2", "garbage_collection_threshold:1.2").
CachingConfig parse_alloc_conf(std::string_view conf, std::string_view origin,
                               const CachingConfig& base = {});

// The recorded-settings form of a divisions table as the index used by round_size.
std::size_t roundup_interval_index(Bytes size_bytes);

}  // namespace vramsim
