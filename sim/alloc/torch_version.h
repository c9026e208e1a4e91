// The PyTorch release whose caching-allocator rules a run follows (`--torch-version X.Y`).
//
// The allocator's rules changed across releases; each difference vramsim models is one row of
// torch_version_rules() with the first release that has the newer rule and the PyTorch change it comes from
// (docs/replay.md, "PyTorch versions", prints the same table). A version is major.minor only: patch releases
// of one minor release share the allocator code (they are cut from one release branch).
//
// Which release a change landed in is read from the merge date of its pull request against the release
// branch cuts (a release contains what main had at its cut); where the source tells no more than a range
// (a key absent from one dated copy and present in a later one), the row says "inferred".
#pragma once

#include <compare>
#include <string>
#include <string_view>
#include <vector>

namespace vramsim {

struct TorchVersion {
  int major = 2;
  int minor = 14;

  auto operator<=>(const TorchVersion&) const = default;
  std::string text() const;
};

// The range vramsim models. Older releases lack roundup_power2_divisions and garbage_collection_threshold
// and parse PYTORCH_CUDA_ALLOC_CONF differently; they are refused rather than guessed. The newest is the
// release of the main-branch sources the policy was written from (2025-26); no difference after the last
// row of torch_version_rules() is modelled.
inline constexpr TorchVersion kOldestModelledTorch{1, 12};
inline constexpr TorchVersion kNewestModelledTorch{2, 14};

// "2.6", "2.6.1", "2.6.0+cu124", "2.7.0a0+git1234" -> {2, 6}. Throws InputError("<origin>: ...") for text
// that is not a version, and for a version outside [kOldestModelledTorch, kNewestModelledTorch] (naming the
// range). 1.x releases other than 1.12 and 1.13 are outside it.
TorchVersion parse_torch_version(std::string_view text, std::string_view origin);

// One version-dependent rule of the caching allocator.
enum class TorchRule {
  kGarbageCollectionThresholdKey,  // garbage_collection_threshold accepted
  kRoundupDivisionsKey,            // roundup_power2_divisions:N accepted
  kRoundupDivisionsList,           // roundup_power2_divisions:[MiB:N,...,>:N] accepted
  kExpandableSegmentsKey,          // expandable_segments accepted (and the mechanism exists)
  kPinnedRegisterKeys,             // pinned_use_cuda_host_register, pinned_num_register_threads accepted
  kReleaseSkipsExpandable,         // release_available_cached_blocks and GC skip expandable blocks
  kMaxNonSplitRoundingKey,         // max_non_split_rounding_mb accepted (before: the G5 tolerance is 20 MiB)
  kSplitSizeMinimumInclusive,      // max_split_size_mb:20 accepted (before: must be > 20)
  kAllocConfEnvironment,           // PYTORCH_ALLOC_CONF read (before: only PYTORCH_CUDA_ALLOC_CONF)
  kMemPoolUseOnOom,                // torch.cuda.MemPool(use_on_oom=True) exists
  kMemPoolFallbackFirst,           // the use_on_oom pools are tried before any cached memory is freed
};

struct TorchRuleInfo {
  TorchRule rule;
  TorchVersion since;       // first release with the newer rule
  std::string_view before;  // the rule in older releases
  std::string_view after;   // the rule from `since` on
  std::string_view source;  // the PyTorch change (pull request, file) and how the release was told
};

// Every modelled difference, oldest first.
const std::vector<TorchRuleInfo>& torch_version_rules();

// Whether `version` follows the newer form of `rule`.
bool torch_has(TorchVersion version, TorchRule rule);

// The row of `rule`.
const TorchRuleInfo& torch_rule_info(TorchRule rule);

}  // namespace vramsim
