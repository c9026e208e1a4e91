#include "sim/alloc/caching_config.h"

#include "sim/alloc/alloc_conf_environment.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

const std::vector<CachingOption>& caching_options() {
  static const std::vector<CachingOption> kOptions = {
      {"max_split_size_mb", "unlimited",
       "blocks at least this large (MiB, >= 20) are never split; requests below it never take them"},
      {"max_non_split_rounding_mb", "20",
       "an oversize request may reuse a cached oversize block at most this much (MiB, >= 20) larger"},
      {"roundup_power2_divisions", "0 (off)",
       "round requests up to N divisions per power of two; N or [MiB:N,...,>:N] per size interval (powers of "
       "two; 0 in a list turns an interval off)"},
      {"garbage_collection_threshold", "0 (off)",
       "with a memory fraction set, free old cached segments once reserved exceeds this share of it (0, 1)"},
      {"expandable_segments", "False",
       "True|False: grow one virtual reservation per stream by mapping pages"},
      {"per_process_memory_fraction", "unset",
       "limit reserved memory to this fraction of the capacity [0, 1]; 0 refuses every cudaMalloc"},
      {"backend", "native", "native|cudaMallocAsync; only 'native' is modelled by this policy"},
      {"release_lock_on_cudamalloc", "False", "True|False; no effect in a sequential replay"},
      {"pinned_use_cuda_host_register", "False", "True|False; host memory is not modelled"},
      {"pinned_num_register_threads", "1", "a power of two <= 128; host memory is not modelled"},
      {"pinned_reserve_segment_size_mb", "0", "> 0; host memory is not modelled"},
      {"pinned_use_background_threads", "False", "True|False; host memory is not modelled"},
      {"pinned_free_catch_all", "False", "True|False; host memory is not modelled"},
      {"graph_capture_record_stream_reuse", "False", "True|False; CUDA graphs are not modelled"},
      {"throw_on_cudamalloc_oom", "False", "True|False; accepted, not modelled"},
  };
  return kOptions;
}

std::size_t roundup_interval_index(Bytes size_bytes) {
  // floor(log2(size)) - 20, clamped to [0, 15] (spec R4).
  if (size_bytes < kMiB) {
    return 0;
  }
  const int log2 = std::bit_width(size_bytes) - 1;
  const int idx = log2 - 20;
  return static_cast<std::size_t>(std::clamp(idx, 0, kRoundupIntervals - 1));
}

namespace {

// c10/core/AllocatorConfig.h, ConfigTokenizer: split at ',' ':' '[' ']', each a token of its own; whitespace
// (std::isspace) dropped.
std::vector<std::string> tokenize(std::string_view s) {
  std::vector<std::string> tokens;
  std::string cur;
  for (const char c : s) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!cur.empty()) {
        tokens.push_back(cur);
        cur.clear();
      }
      tokens.emplace_back(1, c);
    } else if (std::isspace(static_cast<unsigned char>(c)) == 0) {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) {
    tokens.push_back(cur);
  }
  return tokens;
}

// The keys each of PyTorch's two parsers owns (AcceleratorAllocatorConfig::keys_ and
// CUDAAllocatorConfig::getKeys()). Each parser reads its own keys and skips the other's; the CUDA parser
// refuses a key neither owns.
constexpr std::array<std::string_view, 6> kGenericKeys = {
    "max_split_size_mb",        "max_non_split_rounding_mb", "garbage_collection_threshold",
    "roundup_power2_divisions", "expandable_segments",       "pinned_use_background_threads"};
constexpr std::array<std::string_view, 11> kCudaKeys = {"backend",
                                                        "release_lock_on_cudamalloc",
                                                        "release_lock_on_hipmalloc",
                                                        "pinned_use_cuda_host_register",
                                                        "pinned_use_hip_host_register",
                                                        "graph_capture_record_stream_reuse",
                                                        "pinned_reserve_segment_size_mb",
                                                        "pinned_num_register_threads",
                                                        "per_process_memory_fraction",
                                                        "pinned_free_catch_all",
                                                        "throw_on_cudamalloc_oom"};

bool one_of(std::string_view key, const auto& keys) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// ConfigTokenizer's accessors with PyTorch's failures as InputError "<origin>: <key>: <PyTorch's reason>".
class Parser {
 public:
  Parser(std::string_view conf, std::string_view origin, TorchVersion version)
      : m_tok(tokenize(conf)), m_origin(origin), m_version(version) {}

  TorchVersion version() const { return m_version; }
  // A key the release does not know yet: its parser's "Unrecognized CachingAllocator option" (every release
  // before 2.9 has one parser, CUDAAllocatorConfig::parseArgs, which refuses what it does not know).
  void require_release_has(std::string_view key, TorchRule rule) const {
    if (!torch_has(m_version, rule)) {
      const TorchRuleInfo& info = torch_rule_info(rule);
      fail(key,
           fmt::format("Unrecognized CachingAllocator option: {} (PyTorch {}; the key arrived in {}: {})",
                       key, m_version.text(), info.since.text(), info.source));
    }
  }

  [[noreturn]] void fail(std::string_view key, std::string_view why) const {
    throw InputError(fmt::format("{}: {}: {}", m_origin, key.empty() ? "alloc-conf" : key, why));
  }
  std::size_t size() const { return m_tok.size(); }
  // checkIndex: TORCH_INTERNAL_ASSERT(i < size, "Index out of bounds in ConfigTokenizer")
  const std::string& at(std::size_t i, std::string_view key) const {
    if (i >= m_tok.size()) {
      fail(key, "value missing (PyTorch: Index out of bounds in ConfigTokenizer)");
    }
    return m_tok[i];
  }
  // checkToken's result is not checked by its callers: the separator must exist, whatever it is.
  void separator(std::size_t i, std::string_view key) const { (void)at(i, key); }
  // toSizeT: std::stoull (an optional sign, then decimal digits up to the first other character; "-1" wraps
  // to 2^64 - 1; no digit is std::invalid_argument, too many std::out_of_range).
  std::uint64_t size_t_at(std::size_t i, std::string_view key) const {
    const std::string& t = at(i, key);
    std::size_t pos = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
    const bool negative = pos == 1 && t[0] == '-';
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data() + pos, t.data() + t.size(), v);
    if (ec == std::errc::invalid_argument) {
      fail(key, fmt::format("'{}' is not an integer (std::stoull: invalid_argument)", t));
    }
    if (ec == std::errc::result_out_of_range) {
      fail(key, fmt::format("'{}' is out of range (std::stoull: out_of_range)", t));
    }
    return negative ? ~v + 1 : v;
  }
  // toDouble: std::stod (a prefix that reads as a number; none is std::invalid_argument).
  double double_at(std::size_t i, std::string_view key) const {
    const std::string& t = at(i, key);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(t.c_str(), &end);
    if (end == t.c_str()) {
      fail(key, fmt::format("'{}' is not a number (std::stod: invalid_argument)", t));
    }
    if (errno == ERANGE) {
      fail(key, fmt::format("'{}' is out of range (std::stod: out_of_range)", t));
    }
    return v;
  }
  // toBool: "True" or "False" only.
  bool bool_at(std::size_t i, std::string_view key) const {
    const std::string& t = at(i, key);
    if (t == "True" || t == "False") {
      return t == "True";
    }
    fail(key, fmt::format("Expected 'True' or 'False' at index {} in ConfigTokenizer but got '{}'", i, t));
  }
  // skipKey: the value's index, or the closing ']' of a list value.
  std::size_t skip_key(std::size_t i, std::string_view key) const {
    separator(++i, key);
    if (at(++i, key) != "[") {
      return i;
    }
    while (++i < m_tok.size() && m_tok[i] != "]") {
    }
    if (i >= m_tok.size()) {
      fail(key, "Expected closing bracket ']' in ConfigTokenizer but reached end of config");
    }
    return i;
  }

 private:
  std::vector<std::string> m_tok;
  std::string_view m_origin;
  TorchVersion m_version;
};

// AcceleratorAllocatorConfig::parseRoundUpPower2Divisions; `i` is the key's index, the value's is returned.
std::size_t parse_divisions(const Parser& p, std::size_t i, CachingConfig& cfg) {
  constexpr std::string_view key = "roundup_power2_divisions";
  p.separator(++i, key);
  if (p.at(++i, key) != "[") {  // the single-number form, kept "for backwards compatibility"
    const std::uint64_t v = p.size_t_at(i, key);
    if (!std::has_single_bit(v)) {
      p.fail(key, fmt::format("For roundups, the divisions has to be power of 2 (got {})", v));
    }
    cfg.roundup_power2_divisions.fill(v);
    return i;
  }
  if (!torch_has(p.version(), TorchRule::kRoundupDivisionsList)) {
    // Before 2.0 the value is read with std::stoi, which throws on the '['.
    const TorchRuleInfo& info = torch_rule_info(TorchRule::kRoundupDivisionsList);
    p.fail(key, fmt::format("'[' is not an integer (std::stoi: invalid_argument; PyTorch {} has only the "
                            "single-number form, the list arrived in {}: {})",
                            p.version().text(), info.since.text(), info.source));
  }
  bool first = true;
  std::size_t last_index = 0;
  while (++i < p.size() && p.at(i, key) != "]") {
    const std::size_t interval = i;
    p.separator(++i, key);
    const std::uint64_t v = p.size_t_at(++i, key);
    if (v != 0 && !std::has_single_bit(v)) {
      p.fail(key,
             fmt::format("For roundups, the divisions has to be power of 2 or 0 to disable roundup (got {})",
                         v));
    }
    if (p.at(interval, key) == ">") {
      // From the last explicit index, inclusive (PyTorch 2.5/2.6; main fills from the index after it).
      for (std::size_t k = last_index; k < kRoundupIntervals; ++k) {
        cfg.roundup_power2_divisions[k] = v;
      }
    } else {
      const std::uint64_t mib = p.size_t_at(interval, key);
      if (!std::has_single_bit(mib)) {
        p.fail(key, fmt::format("For roundups, the intervals have to be power of 2 (got {})", mib));
      }
      const std::size_t index = std::min<std::size_t>(std::bit_width(mib) - 1, kRoundupIntervals - 1);
      if (first) {
        for (std::size_t k = 0; k < index; ++k) {
          cfg.roundup_power2_divisions[k] = v;  // D3: the first entry also covers everything below it
        }
        first = false;
      }
      cfg.roundup_power2_divisions[index] = v;
      last_index = index;
    }
    if (p.at(i + 1, key) != "]") {  // tokenizer[i + 1]: asserts that a token follows
      p.separator(++i, key);
    }
  }
  if (i >= p.size()) {
    p.fail(key, "Expected closing bracket ']' in ConfigTokenizer but reached end of config");
  }
  return i;
}

// max_split_size_mb / max_non_split_rounding_mb: at least kLargeBuffer / kMB = 20, clamped to SIZE_MAX / kMB.
// Before 2.9 (CUDAAllocatorConfig::parseMaxSplitSize) the value must exceed 20.
Bytes megabytes(const Parser& p, std::size_t i, std::string_view key) {
  const std::uint64_t mb = p.size_t_at(i, key);
  if (!torch_has(p.version(), TorchRule::kSplitSizeMinimumInclusive) && mb <= 20) {
    p.fail(key, fmt::format("CachingAllocator option {} too small, must be > 20 (got {}; PyTorch {}, >= 20 "
                            "from {})",
                            key, mb, p.version().text(),
                            torch_rule_info(TorchRule::kSplitSizeMinimumInclusive).since.text()));
  }
  if (mb < 20) {
    p.fail(key, fmt::format("CachingAllocator option {} too small, must be >= 20 (got {})", key, mb));
  }
  return std::min<std::uint64_t>(mb, std::numeric_limits<std::uint64_t>::max() / kMiB) * kMiB;
}

// The keys that arrived after the oldest modelled release (torch_version.h).
void require_key_in_release(const Parser& p, std::string_view key) {
  if (key == "garbage_collection_threshold") {
    p.require_release_has(key, TorchRule::kGarbageCollectionThresholdKey);
  } else if (key == "roundup_power2_divisions") {
    p.require_release_has(key, TorchRule::kRoundupDivisionsKey);
  } else if (key == "expandable_segments") {
    p.require_release_has(key, TorchRule::kExpandableSegmentsKey);
  } else if (key == "max_non_split_rounding_mb") {
    p.require_release_has(key, TorchRule::kMaxNonSplitRoundingKey);
  } else if (key == "pinned_use_cuda_host_register" || key == "pinned_num_register_threads") {
    p.require_release_has(key, TorchRule::kPinnedRegisterKeys);
  }
}

// AcceleratorAllocatorConfig::parseArgs: the device-generic keys; the others are skipped unread.
void parse_generic(const Parser& p, CachingConfig& cfg) {
  for (std::size_t i = 0; i < p.size(); i++) {
    const std::string key = p.at(i, "");
    require_key_in_release(p, key);
    if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
      p.separator(++i, key);
      (key == "max_split_size_mb" ? cfg.max_split_size_bytes : cfg.max_non_split_rounding_bytes) =
          megabytes(p, ++i, key);
    } else if (key == "garbage_collection_threshold") {
      p.separator(++i, key);
      const double t = p.double_at(++i, key);
      if (!(t > 0.0 && t < 1.0)) {
        p.fail(key, fmt::format("garbage_collect_threshold is invalid, set it in (0.0, 1.0) (got {})", t));
      }
      cfg.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions") {
      i = parse_divisions(p, i, cfg);
    } else if (key == "expandable_segments") {
      p.separator(++i, key);
      cfg.expandable_segments = p.bool_at(++i, key);
    } else if (key == "pinned_use_background_threads") {
      p.separator(++i, key);
      (void)p.bool_at(++i, key);
    } else {
      i = p.skip_key(i, key);
    }
    if (i + 1 < p.size()) {
      p.separator(++i, key);
    }
  }
}

// CUDAAllocatorConfig::parseArgs: the CUDA keys; a key neither parser owns is refused.
void parse_cuda(const Parser& p, CachingConfig& cfg) {
  for (std::size_t i = 0; i < p.size(); i++) {
    const std::string key = p.at(i, "");
    require_key_in_release(p, key);
    if (key == "backend") {
      p.separator(++i, key);
      const std::string& v = p.at(++i, key);
      if (v == "cudaMallocAsync") {
        p.fail(key, "'cudaMallocAsync' is not modelled by the native policy (use `--policy`)");
      }
      if (v != "native") {
        p.fail(key, fmt::format(
                        "Unknown allocator backend, options are native and cudaMallocAsync (got '{}')", v));
      }
    } else if (key == "pinned_num_register_threads") {
      p.separator(++i, key);
      const std::uint64_t n = p.size_t_at(++i, key);
      if (!std::has_single_bit(n)) {
        p.fail(key, fmt::format("Number of register threads has to be power of 2, got {}", n));
      }
      if (n > 128) {  // pinned_max_register_threads()
        p.fail(key, fmt::format("Number of register threads should be less than or equal to 128, got {}", n));
      }
    } else if (key == "pinned_reserve_segment_size_mb") {
      p.separator(++i, key);
      if (p.size_t_at(++i, key) == 0) {
        p.fail(key, "Pinned reserve segment size has to be greater than 0");
      }
    } else if (key == "per_process_memory_fraction") {
      p.separator(++i, key);
      const double f = p.double_at(++i, key);
      if (!(f >= 0.0 && f <= 1.0)) {
        p.fail(key, fmt::format("per_process_memory_fraction is invalid, set it in [0.0, 1.0] (got {})", f));
      }
      cfg.per_process_memory_fraction = f;
    } else if (one_of(key, kCudaKeys)) {  // the True/False keys
      p.separator(++i, key);
      (void)p.bool_at(++i, key);
    } else if (one_of(key, kGenericKeys)) {
      i = p.skip_key(i, key);
    } else {
      p.fail(key, fmt::format("Unrecognized key '{}' in CUDA allocator config. (see `vramsim replay --help` "
                              "for the list)",
                              key));
    }
    if (i + 1 < p.size()) {
      p.separator(++i, key);
    }
  }
}

}  // namespace

CachingConfig parse_alloc_conf(std::string_view conf, std::string_view origin, const CachingConfig& base) {
  return parse_alloc_conf_pair(conf, origin, conf, origin, base);
}

CachingConfig parse_alloc_conf_pair(std::string_view generic, std::string_view generic_origin,
                                    std::string_view cuda, std::string_view cuda_origin,
                                    const CachingConfig& base) {
  // D5: parseArgs resets max_split_size, the divisions table and the GC threshold; everything else keeps its
  // value unless named (expandable_segments, max_non_split_rounding_mb, per_process_memory_fraction).
  CachingConfig cfg = base;
  cfg.max_split_size_bytes = kUnlimitedSplitSize;
  cfg.roundup_power2_divisions.fill(0);
  cfg.garbage_collection_threshold = 0.0;
  cfg.text = generic == cuda ? std::string(generic) : fmt::format("{} | {}", generic, cuda);
  parse_generic(Parser(generic, generic_origin, cfg.torch_version), cfg);
  parse_cuda(Parser(cuda, cuda_origin, cfg.torch_version), cfg);
  return cfg;
}

CachingConfig with_torch_version(CachingConfig config, TorchVersion version, std::string_view origin) {
  config.torch_version = version;
  auto refuse = [&](TorchRule rule, std::string_view what) {
    const TorchRuleInfo& info = torch_rule_info(rule);
    throw InputError(fmt::format("{}: PyTorch {} has no {} (it arrived in {}: {})", origin, version.text(),
                                 what, info.since.text(), info.source));
  };
  if (config.expandable_segments && !torch_has(version, TorchRule::kExpandableSegmentsKey)) {
    refuse(TorchRule::kExpandableSegmentsKey, "expandable segments");
  }
  if (config.max_non_split_rounding_bytes != 20 * kMiB &&
      !torch_has(version, TorchRule::kMaxNonSplitRoundingKey)) {
    refuse(TorchRule::kMaxNonSplitRoundingKey, "max_non_split_rounding_mb");
  }
  const auto& d = config.roundup_power2_divisions;
  const bool uniform = std::all_of(d.begin(), d.end(), [&d](std::uint64_t v) { return v == d.front(); });
  if (!uniform && !torch_has(version, TorchRule::kRoundupDivisionsList)) {
    refuse(TorchRule::kRoundupDivisionsList, "per-interval roundup_power2_divisions");
  }
  if (d.front() != 0 && !torch_has(version, TorchRule::kRoundupDivisionsKey)) {
    refuse(TorchRule::kRoundupDivisionsKey, "roundup_power2_divisions");
  }
  if (config.garbage_collection_threshold > 0.0 &&
      !torch_has(version, TorchRule::kGarbageCollectionThresholdKey)) {
    refuse(TorchRule::kGarbageCollectionThresholdKey, "garbage_collection_threshold");
  }
  return config;
}

std::optional<AllocConfEnvironment> alloc_conf_environment(const char* alloc_conf,
                                                           const char* cuda_alloc_conf,
                                                           TorchVersion version) {
  if (!torch_has(version, TorchRule::kAllocConfEnvironment)) {
    alloc_conf = nullptr;  // CUDAAllocatorConfig::instance() before 2.9: getenv("PYTORCH_CUDA_ALLOC_CONF")
  }
  if (alloc_conf == nullptr && cuda_alloc_conf == nullptr) {
    return std::nullopt;
  }
  AllocConfEnvironment e;
  // AcceleratorAllocatorConfig::instance(): PYTORCH_ALLOC_CONF, else the deprecated PYTORCH_CUDA_ALLOC_CONF.
  e.generic_origin = alloc_conf != nullptr ? "PYTORCH_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
  e.generic = alloc_conf != nullptr ? alloc_conf : cuda_alloc_conf;
  // CUDAAllocatorConfig::instance(): PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF.
  e.cuda_origin = cuda_alloc_conf != nullptr ? "PYTORCH_CUDA_ALLOC_CONF" : "PYTORCH_ALLOC_CONF";
  e.cuda = cuda_alloc_conf != nullptr ? cuda_alloc_conf : alloc_conf;
  return e;
}

CachingConfig parse_alloc_conf_environment(const AllocConfEnvironment& e, const CachingConfig& base) {
  return parse_alloc_conf_pair(e.generic, e.generic_origin, e.cuda, e.cuda_origin, base);
}

}  // namespace vramsim
