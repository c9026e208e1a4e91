#include "sim/alloc/caching_config.h"

#include <algorithm>
#include <bit>
#include <charconv>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

const std::vector<CachingOption>& caching_options() {
  static const std::vector<CachingOption> kOptions = {
      {"max_split_size_mb", "unlimited",
       "blocks at least this large (MiB, >= 20) are never split; requests below it never take them"},
      {"max_non_split_rounding_mb", "20",
       "an oversize request may reuse a cached oversize block at most this much (MiB) larger"},
      {"roundup_power2_divisions", "0 (off)",
       "round requests up to N divisions per power of two; N or [MiB:N,...,>:N] per size interval"},
      {"garbage_collection_threshold", "0 (off)",
       "with a memory fraction set, free old cached segments once reserved exceeds this share of it"},
      {"expandable_segments", "False", "grow one virtual reservation per stream by mapping pages"},
      {"per_process_memory_fraction", "unset", "limit reserved memory to this fraction of the capacity"},
      {"backend", "native", "only 'native' is modelled by this policy"},
      {"release_lock_on_cudamalloc", "False", "accepted; no effect in a sequential replay"},
      {"pinned_use_cuda_host_register", "False", "accepted; host memory is not modelled"},
      {"pinned_num_register_threads", "1", "accepted; host memory is not modelled"},
      {"pinned_use_background_threads", "False", "accepted; host memory is not modelled"},
      {"graph_capture_record_stream_reuse", "False", "accepted; CUDA graphs are not modelled"},
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

struct Tokenizer {
  // PyTorch's tokeniser: split at ',' ':' '[' ']', each a token of its own; spaces dropped.
  std::vector<std::string> tokens;
  explicit Tokenizer(std::string_view s) {
    std::string cur;
    for (char c : s) {
      if (c == ' ') {
        continue;
      }
      if (c == ',' || c == ':' || c == '[' || c == ']') {
        if (!cur.empty()) {
          tokens.push_back(cur);
          cur.clear();
        }
        tokens.emplace_back(1, c);
      } else {
        cur.push_back(c);
      }
    }
    if (!cur.empty()) {
      tokens.push_back(cur);
    }
  }
};

class Parser {
 public:
  Parser(std::string_view conf, std::string_view origin) : m_tok(conf), m_origin(origin) {}

  [[noreturn]] void fail(std::string_view key, std::string_view why) const {
    throw InputError(fmt::format("{}: {}: {}", m_origin, key.empty() ? "alloc-conf" : key, why));
  }
  bool done() const { return m_i >= m_tok.tokens.size(); }
  const std::string& peek() const { return m_tok.tokens[m_i]; }
  std::string next(std::string_view key) {
    if (done()) {
      fail(key, "value missing");
    }
    return m_tok.tokens[m_i++];
  }
  void expect(std::string_view key, std::string_view t) {
    const std::string got = next(key);
    if (got != t) {
      fail(key, fmt::format("expected '{}' but found '{}'", t, got));
    }
  }
  std::uint64_t number(std::string_view key) {
    const std::string t = next(key);
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) {
      fail(key, fmt::format("'{}' is not a non-negative integer", t));
    }
    return v;
  }
  double real(std::string_view key) {
    const std::string t = next(key);
    double v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) {
      fail(key, fmt::format("'{}' is not a number", t));
    }
    return v;
  }
  bool boolean(std::string_view key) {
    const std::string t = next(key);
    if (t == "True" || t == "true" || t == "1") {
      return true;
    }
    if (t == "False" || t == "false" || t == "0") {
      return false;
    }
    fail(key, fmt::format("'{}' is not True or False", t));
  }

 private:
  Tokenizer m_tok;
  std::string_view m_origin;
  std::size_t m_i = 0;
};

void parse_divisions(Parser& p, CachingConfig& cfg) {
  constexpr std::string_view key = "roundup_power2_divisions";
  if (p.done()) {
    p.fail(key, "value missing");
  }
  if (p.peek() != "[") {
    const std::uint64_t v = p.number(key);
    if (v == 0 || !std::has_single_bit(v)) {
      p.fail(key, fmt::format("{} is not a power of two", v));
    }
    cfg.roundup_power2_divisions.fill(v);
    return;
  }
  p.expect(key, "[");
  bool first = true;
  std::size_t last_index = 0;
  while (true) {
    const std::string k = p.next(key);
    if (k == "]") {
      break;
    }
    if (k == ",") {
      continue;
    }
    p.expect(key, ":");
    const std::uint64_t v = p.number(key);
    if (v != 0 && !std::has_single_bit(v)) {
      p.fail(key, fmt::format("{} is not a power of two", v));
    }
    if (k == ">") {
      // Spec D4 (2.5/2.6 CUDAAllocatorConfig): from the last explicit index, inclusive, to the end.
      for (std::size_t i = last_index; i < kRoundupIntervals; ++i) {
        cfg.roundup_power2_divisions[i] = v;
      }
      continue;
    }
    std::uint64_t mib = 0;
    auto [ptr, ec] = std::from_chars(k.data(), k.data() + k.size(), mib);
    if (ec != std::errc() || ptr != k.data() + k.size() || mib == 0 || !std::has_single_bit(mib)) {
      p.fail(key, fmt::format("interval '{}' must be a power-of-two size in MiB", k));
    }
    const std::size_t index = std::min<std::size_t>(std::bit_width(mib) - 1, kRoundupIntervals - 1);
    if (first) {
      for (std::size_t i = 0; i < index; ++i) {
        cfg.roundup_power2_divisions[i] = v;  // D3: the first entry also covers everything below it
      }
      first = false;
    }
    cfg.roundup_power2_divisions[index] = v;
    last_index = index;
  }
}

}  // namespace

CachingConfig parse_alloc_conf(std::string_view conf, std::string_view origin, const CachingConfig& base) {
  CachingConfig cfg;
  cfg.expandable_segments = base.expandable_segments;  // D5: survives a re-parse unless named
  cfg.text = std::string(conf);
  Parser p(conf, origin);
  while (!p.done()) {
    const std::string key = p.next("");
    if (key == ",") {
      continue;
    }
    p.expect(key, ":");
    if (key == "max_split_size_mb") {
      const std::uint64_t mb = p.number(key);
      if (mb < 20) {
        p.fail(key, fmt::format("{} MiB is below the minimum of 20 MiB", mb));
      }
      if (mb > (std::uint64_t{1} << 40)) {
        p.fail(key, fmt::format("{} MiB is absurdly large", mb));
      }
      cfg.max_split_size_bytes = mb * kMiB;
    } else if (key == "max_non_split_rounding_mb") {
      const std::uint64_t mb = p.number(key);
      if (mb < 20 || mb > (std::uint64_t{1} << 40)) {
        p.fail(key, fmt::format("{} MiB is out of range (>= 20)", mb));
      }
      cfg.max_non_split_rounding_bytes = mb * kMiB;
    } else if (key == "garbage_collection_threshold") {
      const double t = p.real(key);
      if (!(t > 0.0 && t < 1.0)) {
        p.fail(key, fmt::format("{} must be in (0, 1)", t));
      }
      cfg.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions") {
      parse_divisions(p, cfg);
    } else if (key == "expandable_segments") {
      cfg.expandable_segments = p.boolean(key);
    } else if (key == "per_process_memory_fraction") {
      const double f = p.real(key);
      if (!(f > 0.0 && f <= 1.0)) {
        p.fail(key, fmt::format("{} must be in (0, 1]", f));
      }
      cfg.per_process_memory_fraction = f;
    } else if (key == "backend") {
      const std::string v = p.next(key);
      if (v != "native") {
        p.fail(key, fmt::format("'{}' is not modelled by the native policy (use `--policy`)", v));
      }
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_background_threads" || key == "graph_capture_record_stream_reuse") {
      p.boolean(key);
    } else if (key == "pinned_num_register_threads") {
      p.number(key);
    } else {
      p.fail(key, "unknown option (see `vramsim replay --help` for the list)");
    }
  }
  return cfg;
}

}  // namespace vramsim
