#include "sim/alloc/torch_version.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

std::string TorchVersion::text() const { return fmt::format("{}.{}", major, minor); }

namespace {

// Reads a decimal number at the front of `s` (at most 3 digits); returns the characters read, 0 if none.
std::size_t read_number(std::string_view s, int& out) {
  std::size_t n = 0;
  while (n < s.size() && n < 4 && s[n] >= '0' && s[n] <= '9') {
    ++n;
  }
  if (n == 0 || n > 3) {
    return 0;
  }
  std::from_chars(s.data(), s.data() + n, out);
  return n;
}

}  // namespace

TorchVersion parse_torch_version(std::string_view text, std::string_view origin) {
  TorchVersion v;
  const std::size_t major_len = read_number(text, v.major);
  bool ok = major_len > 0 && major_len < text.size() && text[major_len] == '.';
  std::size_t minor_len = 0;
  if (ok) {
    minor_len = read_number(text.substr(major_len + 1), v.minor);
    const std::size_t end = major_len + 1 + minor_len;
    // What may follow X.Y: nothing, a patch (".1"), a local version ("+cu124") or a pre-release ("a0").
    ok = minor_len > 0 && (end == text.size() || text[end] == '.' || text[end] == '+' ||
                           (text[end] >= 'a' && text[end] <= 'z'));
  }
  if (!ok) {
    throw InputError(fmt::format("{}: '{}' is not a PyTorch version (expected X.Y, e.g. 2.6)", origin, text));
  }
  if (v < kOldestModelledTorch || v > kNewestModelledTorch) {
    throw InputError(fmt::format("{}: PyTorch {} is not modelled (vramsim models {} to {})", origin, v.text(),
                                 kOldestModelledTorch.text(), kNewestModelledTorch.text()));
  }
  return v;
}

const std::vector<TorchRuleInfo>& torch_version_rules() {
  static const std::vector<TorchRuleInfo> kRules = {
      {TorchRule::kGarbageCollectionThresholdKey,
       {1, 12},
       "unknown key",
       "accepted, (0, 1)",
       "pytorch#74261 (garbage collection without GPU sync, 2022-03)"},
      {TorchRule::kRoundupDivisionsKey,
       {1, 12},
       "unknown key",
       "roundup_power2_divisions:N accepted",
       "pytorch#74213 (rounding to power-of-two divisions, 2022-03)"},
      {TorchRule::kRoundupDivisionsList,
       {2, 0},
       "only the single-number form (a '[' is not a number)",
       "the per-interval list [MiB:N,...,>:N] too",
       "pytorch#87290 (divisions per power-of-two interval, 2022-11)"},
      {TorchRule::kExpandableSegmentsKey,
       {2, 1},
       "unknown key",
       "expandable_segments:True|False",
       "pytorch#96995 (expandable blocks in allocator, merged 2023-04, after the 2.0 release)"},
      {TorchRule::kPinnedRegisterKeys,
       {2, 2},
       "unknown keys",
       "pinned_use_cuda_host_register, pinned_num_register_threads (a power of two <= 128)",
       "inferred: absent from the 2.1-era CUDAAllocatorConfig.cpp, recorded in the allocator_settings of "
       "PyTorch "
       "2.6 snapshots"},
      {TorchRule::kReleaseSkipsExpandable,
       {2, 5},
       "release_available_cached_blocks and GC reach expandable blocks and fail an internal assert",
       "they skip expandable blocks (an OOM retry then unmaps them in release_cached_blocks)",
       "pytorch#134338 (2024-08)"},
      {TorchRule::kMaxNonSplitRoundingKey,
       {2, 6},
       "unknown key; an oversize request reuses a cached oversize "
       "block at most 20 MiB (kLargeBuffer) larger",
       "max_non_split_rounding_mb sets that tolerance (>= 20 MiB, default 20)",
       "pytorch#136174 (opened 2024-09-16, after the 2.5 branch cut)"},
      {TorchRule::kSplitSizeMinimumInclusive,
       {2, 9},
       "max_split_size_mb and max_non_split_rounding_mb must be > 20",
       "must be >= 20",
       "c10/core/AllocatorConfig.cpp (AcceleratorAllocatorConfig, pytorch#149601, 2025); "
       "c10/cuda/CUDAAllocatorConfig.cpp before it: 'must be > 20'"},
      {TorchRule::kAllocConfEnvironment,
       {2, 9},
       "only PYTORCH_CUDA_ALLOC_CONF is read",
       "PYTORCH_ALLOC_CONF is read, PYTORCH_CUDA_ALLOC_CONF kept as its alias",
       "AcceleratorAllocatorConfig::instance() (pytorch#149601, 2025; torchtitan#1577 moved to the new name "
       "in "
       "2025-08)"},
      {TorchRule::kMemPoolUseOnOom,
       {2, 8},
       "no use_on_oom argument",
       "MemPool(use_on_oom=True) serves default-pool requests from the pool's free blocks when cudaMalloc "
       "fails",
       "pytorch#151487 (add option to use mempool on OOM, 2025-04)"},
      {TorchRule::kMemPoolFallbackFirst,
       {2, 11},
       "the use_on_oom pools are tried last, after release_available_cached_blocks and release_cached_blocks",
       "they are tried right after the first cudaMalloc fails, before any cached memory is freed",
       "pytorch#169699 (reorder OOM mitigation steps, opened 2025-12-05); inferred, uncertain: opened near "
       "the "
       "2.10 branch cut, taken as after it"},
  };
  return kRules;
}

const TorchRuleInfo& torch_rule_info(TorchRule rule) {
  const auto& rules = torch_version_rules();
  return *std::find_if(rules.begin(), rules.end(), [rule](const TorchRuleInfo& r) { return r.rule == rule; });
}

bool torch_has(TorchVersion version, TorchRule rule) { return version >= torch_rule_info(rule).since; }

}  // namespace vramsim
