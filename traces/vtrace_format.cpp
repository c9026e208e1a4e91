// The vtrace text format (traces/FORMAT.md): a line-oriented, diffable form of a Snapshot.
//
// Contract: read_vtrace(write_vtrace(s), s.source) == s for every valid Snapshot: strings[0] == "" and the
// other strings non-empty and distinct; event tags below strings.size() and layers -1 or in [0, 2^31);
// blocks tiling their segments with the recorded sums matching; segments sorted by (device, address) without
// overlaps; a trace entry for every segment's device; sizes below 2^60, addresses below 2^63. The reader
// rejects every malformed line with InputError "<source>: line N: <problem>". Sizes in bytes, times in ns.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "traces/trace_io.h"
#include "traces/utf8.h"

namespace vramsim {
namespace {

constexpr std::string_view kMagic = "vramsim-trace";
constexpr std::string_view kVersion = "1";
constexpr std::uint64_t kSizeLimit = std::uint64_t{1} << 60;
constexpr std::uint64_t kAddressLimit = std::uint64_t{1} << 63;
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kMaxDevices = 1024;
constexpr std::uint64_t kLayerLimit = std::uint64_t{1} << 31;  // TraceEvent::layer is a non-negative int32

// Bytes that would break the whitespace-separated, '#'-commented line structure are written as %XX.
bool needs_escape(unsigned char c) { return c <= 0x20 || c == 0x7f || c == '%' || c == '#'; }

std::string encode_field(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (needs_escape(c)) {
      out += fmt::format("%{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

// kHexValue[c]: the value of hex digit c, -1 for any other byte.
constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> table{};
  for (int c = 0; c < 256; ++c) {
    table[static_cast<std::size_t>(c)] = c >= '0' && c <= '9'   ? static_cast<std::int8_t>(c - '0')
                                         : c >= 'a' && c <= 'f' ? static_cast<std::int8_t>(c - 'a' + 10)
                                         : c >= 'A' && c <= 'F' ? static_cast<std::int8_t>(c - 'A' + 10)
                                                                : std::int8_t{-1};
  }
  return table;
}();

int hex_digit(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

std::string_view state_keyword(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated:
      return "allocated";
    case BlockState::kActivePendingFree:
      return "pending_free";
    case BlockState::kInactive:
      return "inactive";
  }
  return "inactive";
}

// Keeps a bad token printable on one line.
std::string shown(std::string_view token) {
  constexpr std::size_t kMaxShown = 40;
  std::string out = "\"";
  for (std::size_t i = 0; i < token.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : token[i];
  }
  out += token.size() > kMaxShown ? "...\"" : "\"";
  return out;
}

class VtraceReader {
 public:
  VtraceReader(std::string_view text, std::string_view source) : text_(text), source_(source) {
    out_.source = std::string(source);
    out_.has_final_state = false;
  }

  Snapshot read() {
    std::size_t pos = 0;
    bool magic_seen = false;
    while (pos < text_.size() || (!magic_seen && pos == 0)) {
      const std::size_t end = std::min(text_.find('\n', pos), text_.size());
      std::string_view line = text_.substr(pos, end - pos);
      pos = end + 1;
      ++line_no_;
      if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
      }
      if (magic_seen && read_event_fast(line)) {
        continue;
      }
      tokenize(line);
      if (!magic_seen) {
        if (tokens_.size() != 2 || tokens_[0] != kMagic) {
          fail(fmt::format("expected the header \"{} {}\" on the first line", kMagic, kVersion));
        }
        if (tokens_[1] != kVersion) {
          fail(fmt::format("unsupported vtrace version {} (this build reads version {})", shown(tokens_[1]),
                           kVersion));
        }
        magic_seen = true;
        continue;
      }
      if (tokens_.empty() || tokens_[0].front() == '#') {
        continue;
      }
      dispatch();
    }
    close_segment();
    finish();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail_at(std::size_t line, std::string_view problem) const {
    throw InputError(fmt::format("{}: line {}: {}", source_, line, problem));
  }
  [[noreturn]] void fail(std::string_view problem) const { fail_at(line_no_, problem); }

  // Any byte above ' ' is part of a token: one comparison for almost every byte of a line.
  static bool separates(char c) { return c == ' ' || c == '\t'; }
  static bool in_token(char c) { return static_cast<unsigned char>(c) > ' ' || !separates(c); }

  void tokenize(std::string_view line) {
    tokens_.clear();
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && separates(line[i])) {
        ++i;
      }
      const std::size_t start = i;
      while (i < line.size() && in_token(line[i])) {
        ++i;
      }
      if (i > start) {
        tokens_.push_back(line.substr(start, i - start));
      }
    }
  }

  void expect_fields(std::size_t count, std::string_view usage) const {
    if (tokens_.size() != count + 1) {
      fail(fmt::format("'{}' takes {} field{} ({}), got {}", tokens_[0], count, count == 1 ? "" : "s", usage,
                       tokens_.size() - 1));
    }
  }

  // Decimal or 0x-hex, below `limit`.
  std::uint64_t parse_uint(std::string_view token, std::string_view what, std::uint64_t limit) const {
    if (!token.empty() && token[0] == '-') {
      fail(fmt::format("{} must not be negative, got {}", what, shown(token)));
    }
    int base = 10;
    std::string_view digits = token;
    if (token.size() > 2 && token[0] == '0' && (token[1] == 'x' || token[1] == 'X')) {
      base = 16;
      digits.remove_prefix(2);
    }
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (ec == std::errc::result_out_of_range) {
      fail(fmt::format("{} {} is too large", what, shown(token)));
    }
    if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty()) {
      fail(fmt::format("bad {} {} (expected a decimal or 0x-hex integer)", what, shown(token)));
    }
    if (limit != kNoLimit && value >= limit) {
      fail(fmt::format("{} {} is too large (must be below {})", what, shown(token),
                       limit == kSizeLimit      ? "2^60"
                       : limit == kAddressLimit ? "2^63"
                       : limit == kLayerLimit   ? "2^31"
                                                : std::to_string(limit)));
    }
    return value;
  }

  std::int64_t parse_int(std::string_view token, std::string_view what) const {
    std::int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value, 10);
    if (ec == std::errc::result_out_of_range) {
      fail(fmt::format("{} {} does not fit 64 bits", what, shown(token)));
    }
    if (ec != std::errc() || ptr != token.data() + token.size()) {
      fail(fmt::format("bad {} {} (expected a decimal integer)", what, shown(token)));
    }
    return value;
  }

  bool parse_flag(std::string_view token, std::string_view what, std::string_view yes,
                  std::string_view no) const {
    if (token == yes) {
      return true;
    }
    if (token == no) {
      return false;
    }
    fail(fmt::format("bad {} {} (expected {} or {})", what, shown(token), yes, no));
  }

  std::string decode(std::string_view token, std::string_view what) const {
    if (token.find('%') == std::string_view::npos) {  // most tags: copied as they are
      if (!is_valid_utf8(token)) {
        fail(fmt::format("{} is not valid UTF-8 (write other bytes as %XX)", what));
      }
      return std::string(token);
    }
    std::string out;
    out.reserve(token.size());
    for (std::size_t i = 0; i < token.size(); ++i) {
      if (token[i] != '%') {
        out += token[i];
        continue;
      }
      const int hi = i + 2 < token.size() ? hex_digit(token[i + 1]) : -1;
      const int lo = i + 2 < token.size() ? hex_digit(token[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        fail(fmt::format("bad percent escape in {} {} (expected %XX)", what, shown(token)));
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (!is_valid_utf8(out)) {
      fail(fmt::format("{} is not valid UTF-8 (write other bytes as %XX)", what));
    }
    return out;
  }

  int parse_device(std::string_view token) const {
    const std::uint64_t limit = declared_devices_ ? *declared_devices_ : kMaxDevices;
    const std::uint64_t device = parse_uint(token, "device", kNoLimit);
    if (device >= limit) {
      fail(fmt::format("device {} is out of range (the trace has {} device{})", device, limit,
                       limit == 1 ? "" : "s"));
    }
    return static_cast<int>(device);
  }

  void dispatch() {
    const std::string_view keyword = tokens_[0];
    if (keyword[0] >= '0' && keyword[0] <= '9') {
      close_segment();
      body_started_ = true;
      read_event();
    } else if (keyword == "segment") {
      close_segment();
      body_started_ = true;
      read_segment();
    } else if (keyword == "block") {
      read_block();
    } else if (keyword == "devices" || keyword == "final_state" || keyword == "tag" ||
               keyword.starts_with("settings")) {
      read_header_line(keyword);
    } else {
      fail(fmt::format("unknown line type {}", shown(keyword)));
    }
  }

  void read_header_line(std::string_view keyword) {
    if (body_started_) {
      fail(fmt::format("'{}' must come before the first segment or event line", keyword));
    }
    if (keyword != "tag" && !seen_headers_.insert(std::string(keyword)).second) {
      fail(fmt::format("duplicate '{}' line", keyword));
    }
    if (keyword == "devices") {
      expect_fields(1, "the number of devices");
      declared_devices_ = parse_uint(tokens_[1], "device count", kMaxDevices + 1);
    } else if (keyword == "final_state") {
      expect_fields(1, "yes or no");
      out_.has_final_state = parse_flag(tokens_[1], "final_state", "yes", "no");
    } else if (keyword == "tag") {
      expect_fields(1, "a percent-encoded string");
      std::string text = decode(tokens_[1], "tag");
      const auto [it, inserted] =
          tag_index_.try_emplace(text, static_cast<std::uint32_t>(out_.strings.size()));
      if (!inserted) {
        fail(fmt::format("duplicate tag {}", shown(text)));
      }
      out_.strings.push_back(std::move(text));
    } else {
      read_settings_line(keyword);
    }
  }

  void read_settings_line(std::string_view keyword) {
    RecordedAllocatorSettings& settings =
        out_.allocator_settings ? *out_.allocator_settings : out_.allocator_settings.emplace();
    if (keyword == "settings") {
      if (tokens_.size() > 2) {
        fail("'settings' takes one percent-encoded string (write spaces as %20)");
      }
      settings.alloc_conf = tokens_.size() == 2 ? decode(tokens_[1], "settings") : std::string();
    } else if (keyword == "settings.max_split_size") {
      expect_fields(1, "bytes, or -1 for unlimited");
      settings.max_split_size = parse_int(tokens_[1], "max_split_size");
      if (settings.max_split_size < -1) {
        fail(fmt::format("max_split_size must be -1 (unlimited) or a size, got {}", settings.max_split_size));
      }
    } else if (keyword == "settings.garbage_collection_threshold") {
      expect_fields(1, "a fraction in [0, 1]");
      const std::string_view token = tokens_[1];
      double value = 0.0;
      const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
      if (ec != std::errc() || ptr != token.data() + token.size() || !(value >= 0.0 && value <= 1.0)) {
        fail(
            fmt::format("bad garbage_collection_threshold {} (expected a fraction in [0, 1])", shown(token)));
      }
      settings.garbage_collection_threshold = value;
    } else if (keyword == "settings.expandable_segments") {
      expect_fields(1, "0 or 1");
      settings.expandable_segments = parse_flag(tokens_[1], "expandable_segments", "1", "0");
    } else if (keyword == "settings.roundup_power2_divisions") {
      expect_fields(settings.roundup_power2_divisions.size(), "one value per size interval");
      for (std::size_t i = 0; i < settings.roundup_power2_divisions.size(); ++i) {
        settings.roundup_power2_divisions[i] = parse_uint(tokens_[i + 1], "divisions", kNoLimit);
      }
    } else {
      fail(fmt::format("unknown line type {}", shown(keyword)));
    }
  }

  void read_segment() {
    expect_fields(8, "device address total_size stream small|large expandable pool_a pool_b");
    if (!out_.has_final_state) {
      fail("segment line in a trace without final state (add 'final_state yes' to the header)");
    }
    SnapshotSegment seg;
    seg.device = parse_device(tokens_[1]);
    seg.address = parse_uint(tokens_[2], "segment address", kAddressLimit);
    seg.total_size_bytes = parse_uint(tokens_[3], "segment size", kSizeLimit);
    if (seg.total_size_bytes == 0) {
      fail("a segment cannot be empty");
    }
    seg.stream = parse_uint(tokens_[4], "stream", kNoLimit);
    seg.is_small_pool = parse_flag(tokens_[5], "pool", "small", "large");
    seg.is_expandable = parse_flag(tokens_[6], "expandable flag", "1", "0");
    seg.pool_id_first = parse_int(tokens_[7], "pool id");
    seg.pool_id_second = parse_int(tokens_[8], "pool id");
    out_.segments.push_back(std::move(seg));
    segment_lines_.push_back(line_no_);
    segment_open_ = true;
    segment_offset_ = 0;
  }

  void read_block() {
    if (!segment_open_) {
      fail("block line outside a segment (blocks must directly follow their segment line)");
    }
    expect_fields(4, "address size requested allocated|pending_free|inactive");
    SnapshotSegment& seg = out_.segments.back();
    SnapshotBlock block;
    block.address = parse_uint(tokens_[1], "block address", kAddressLimit);
    block.size_bytes = parse_uint(tokens_[2], "block size", kSizeLimit);
    block.requested_bytes = parse_uint(tokens_[3], "requested size", kSizeLimit);
    const std::string_view state = tokens_[4];
    if (state == "allocated") {
      block.state = BlockState::kActiveAllocated;
    } else if (state == "pending_free") {
      block.state = BlockState::kActivePendingFree;
    } else if (state == "inactive") {
      block.state = BlockState::kInactive;
    } else {
      fail(
          fmt::format("unknown block state {} (expected allocated, pending_free or inactive)", shown(state)));
    }
    if (block.address != seg.address + segment_offset_) {
      fail(fmt::format("block at {:#x} does not start where the previous block of its segment ends ({:#x})",
                       block.address, seg.address + segment_offset_));
    }
    if (block.size_bytes == 0) {
      fail("a block cannot be empty");
    }
    if (block.size_bytes > seg.total_size_bytes - segment_offset_) {
      fail(fmt::format("block {:#x} + {} extends past the end of its segment ({:#x})", block.address,
                       block.size_bytes, seg.address + seg.total_size_bytes));
    }
    segment_offset_ += block.size_bytes;
    if (block.state != BlockState::kInactive) {
      seg.active_bytes += block.size_bytes;
      seg.requested_bytes += block.requested_bytes;
      if (block.state == BlockState::kActiveAllocated) {
        seg.allocated_bytes += block.size_bytes;
      }
    }
    seg.blocks.push_back(block);
  }

  void close_segment() {
    if (!segment_open_) {
      return;
    }
    segment_open_ = false;
    const SnapshotSegment& seg = out_.segments.back();
    if (segment_offset_ != seg.total_size_bytes) {
      fail_at(segment_lines_.back(), fmt::format("the blocks of segment {:#x} cover {} of its {} bytes",
                                                 seg.address, segment_offset_, seg.total_size_bytes));
    }
  }

  // The fast road for the common event line (issue 40: replay at the speed of reading): one pass over the
  // line that scans, parses and checks each field in place, without tokenizing first. It accepts exactly the
  // lines read_event() accepts with the same result, but only the common shapes (decimal numbers of at most
  // 19 digits or 0x-hex of at most 15, op=/cat=/phase= naming a known escape-free tag, layer=); anything else
  // (errors included) returns false having stored nothing, and the general road reads the line and words any
  // error. Updating last_tag_ early is harmless: it only caches a valid (token, id) pair.
  bool read_event_fast(std::string_view line) {
    const char* p = line.data();
    const char* const end = p + line.size();
    std::uint64_t device = 0;
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::uint64_t stream = 0;
    std::int64_t time_ns = 0;
    const std::uint64_t device_limit = declared_devices_ ? *declared_devices_ : kMaxDevices;
    if (!fast_uint(p, end, device) || device >= device_limit || !skip_separators(p, end)) {
      return false;
    }
    const std::optional<TraceAction> action = fast_action(p, end);
    if (!action || !skip_separators(p, end) || !fast_uint(p, end, addr) || addr >= kAddressLimit ||
        !skip_separators(p, end) || !fast_uint(p, end, size) || size >= kSizeLimit ||
        !skip_separators(p, end) || !fast_uint(p, end, stream) || !skip_separators(p, end) ||
        !fast_int(p, end, time_ns)) {
      return false;
    }
    TraceEvent event;
    event.action = *action;
    event.addr = addr;
    event.size_bytes = size;
    event.stream = stream;
    event.time_ns = time_ns;
    while (p != end && separates(*p)) {
      ++p;
    }
    if (p != end && !fast_event_fields(p, end, event)) {
      return false;
    }
    close_segment();
    body_started_ = true;
    if (device >= out_.device_traces.size()) {
      out_.device_traces.resize(static_cast<std::size_t>(device) + 1);
      // An event line takes at least 16 bytes ("0 alloc 0 0 0 0\n"): room for every event the text can
      // hold, reserved once, so that each page of the array is touched once instead of the doubling series
      // touching them twice (page faults were a third of a replay's time on the VM of bench/RESULTS.md).
      // Capacity never touched is address space, not memory; capped for the largest texts, and only for the
      // first device met (a trace of many devices grows the others' arrays as it goes).
      constexpr std::size_t kMaxReserved = std::size_t{1} << 24;
      if (!reserved_) {
        reserved_ = true;
        out_.device_traces[static_cast<std::size_t>(device)].events.reserve(
            std::min(text_.size() / 16 + 1, kMaxReserved));
      }
    }
    out_.device_traces[static_cast<std::size_t>(device)].events.push_back(event);
    return true;
  }

  // After a field: true when at least one separator follows and then another field.
  static bool skip_separators(const char*& p, const char* end) {
    if (p == end || !separates(*p)) {
      return false;
    }
    do {
      ++p;
    } while (p != end && separates(*p));
    return p != end;
  }

  // A field that ends at a separator or at the end of the line.
  static bool field_ends(const char* p, const char* end) { return p == end || separates(*p); }

  // The action keyword at p, as parse_trace_action names them (its spellings, tried by length first).
  static std::optional<TraceAction> fast_action(const char*& p, const char* end) {
    const char* q = p;
    while (q != end && !separates(*q)) {
      ++q;
    }
    const std::string_view word(p, static_cast<std::size_t>(q - p));
    p = q;
    if (word == "alloc") {
      return TraceAction::kAlloc;
    }
    if (word.size() == 14 && word == "free_completed") {
      return TraceAction::kFreeCompleted;
    }
    if (word.size() == 14 && word == "free_requested") {
      return TraceAction::kFreeRequested;
    }
    return parse_trace_action(word);
  }

  // Decimal (at most 19 digits) or 0x-hex (at most 15 digits): below 2^64 and 2^60, so no overflow check
  // is needed (a longer run wraps, and is refused by its length).
  static bool fast_uint(const char*& p, const char* end, std::uint64_t& value) {
    value = 0;
    const char* q = p;
    if (end - p > 2 && p[0] == '0' && (p[1] | 0x20) == 'x') {
      q += 2;
      const char* const start = q;
      for (int digit = 0; q != end && (digit = kHexValue[static_cast<unsigned char>(*q)]) >= 0; ++q) {
        value = value * 16 + static_cast<std::uint64_t>(digit);
      }
      if (q == start || q - start > 15 || !field_ends(q, end)) {
        return false;
      }
      p = q;
      return true;
    }
    for (; q != end && static_cast<unsigned char>(*q - '0') < 10; ++q) {
      value = value * 10 + static_cast<std::uint64_t>(*q - '0');
    }
    if (q == p || q - p > 19 || !field_ends(q, end)) {
      return false;
    }
    p = q;
    return true;
  }

  static bool fast_int(const char*& p, const char* end, std::int64_t& value) {
    const bool negative = *p == '-';  // p < end: skip_separators returned true
    const char* q = negative ? p + 1 : p;
    const char* const start = q;
    std::uint64_t magnitude = 0;
    for (; q != end && static_cast<unsigned char>(*q - '0') < 10; ++q) {
      magnitude = magnitude * 10 + static_cast<std::uint64_t>(*q - '0');
    }
    if (q == start || q - start > 18 || !field_ends(q, end)) {
      return false;
    }
    value = negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
    p = q;
    return true;
  }

  // The op=/cat=/phase=/layer= fields after time_ns (p at the first).
  bool fast_event_fields(const char*& p, const char* end, TraceEvent& event) {
    bool layer_seen = false;
    while (p != end) {
      const auto left = end - p;
      std::size_t key = 0;  // 0 op, 1 cat, 2 phase (last_tag_'s order)
      if (left > 3 && p[0] == 'o' && p[1] == 'p' && p[2] == '=') {
        p += 3;
      } else if (left > 4 && std::memcmp(p, "cat=", 4) == 0) {
        key = 1;
        p += 4;
      } else if (left > 6 && std::memcmp(p, "phase=", 6) == 0) {
        key = 2;
        p += 6;
      } else if (left > 6 && std::memcmp(p, "layer=", 6) == 0) {
        p += 6;
        std::uint64_t layer = 0;
        if (layer_seen || !fast_uint(p, end, layer) || layer >= kLayerLimit) {
          return false;
        }
        layer_seen = true;
        event.layer = static_cast<std::int32_t>(layer);
        key = 3;
      } else {
        return false;
      }
      if (key < 3) {
        std::uint32_t& slot = key == 0 ? event.op_tag : key == 1 ? event.category_tag : event.phase_tag;
        if (slot != kNoTag || !fast_tag(p, end, key, slot)) {
          return false;
        }
      }
      while (p != end && separates(*p)) {
        ++p;
      }
    }
    return true;
  }

  // A known, escape-free tag value at p: the previous event's token of the same key first (one memcmp).
  bool fast_tag(const char*& p, const char* end, std::size_t key, std::uint32_t& slot) {
    auto& last = last_tag_[key];
    const auto left = static_cast<std::size_t>(end - p);
    const std::size_t n = last.token.size();
    if (n != 0 && n <= left && std::memcmp(p, last.token.data(), n) == 0 && field_ends(p + n, end)) {
      slot = last.id;
      p += n;
      return true;
    }
    const char* q = p;
    while (q != end && !separates(*q) && *q != '%') {
      ++q;
    }
    const std::string_view value(p, static_cast<std::size_t>(q - p));
    if (!field_ends(q, end) || value.empty()) {
      return false;
    }
    const auto known = tag_index_.find(value);
    if (known == tag_index_.end()) {
      return false;
    }
    slot = known->second;
    last = LastTag{value, known->second};
    p = q;
    return true;
  }

  void read_event() {
    if (tokens_.size() < 6) {
      fail(fmt::format("an event line needs 6 fields (device action addr size stream time_ns), got {}",
                       tokens_.size()));
    }
    const int device = parse_device(tokens_[0]);
    const std::optional<TraceAction> action = parse_trace_action(tokens_[1]);
    if (!action) {
      fail(fmt::format("unknown action {}", shown(tokens_[1])));
    }
    TraceEvent event;
    event.action = *action;
    event.addr = parse_uint(tokens_[2], "address", kAddressLimit);
    event.size_bytes = parse_uint(tokens_[3], "size", kSizeLimit);
    event.stream = parse_uint(tokens_[4], "stream", kNoLimit);
    event.time_ns = parse_int(tokens_[5], "time_ns");
    bool layer_seen = false;
    for (std::size_t i = 6; i < tokens_.size(); ++i) {
      const std::string_view token = tokens_[i];
      const std::size_t eq = token.find('=');
      const std::string_view key = token.substr(0, eq == std::string_view::npos ? 0 : eq);
      const std::string_view value = eq == std::string_view::npos ? std::string_view() : token.substr(eq + 1);
      if (key == "layer") {
        if (layer_seen) {
          fail(fmt::format("duplicate field {}", shown(token)));
        }
        layer_seen = true;
        event.layer = static_cast<std::int32_t>(parse_uint(value, "layer", kLayerLimit));
        continue;
      }
      std::uint32_t* slot = nullptr;
      if (key == "op") {
        slot = &event.op_tag;
      } else if (key == "cat") {
        slot = &event.category_tag;
      } else if (key == "phase") {
        slot = &event.phase_tag;
      } else {
        fail(fmt::format(
            "unknown event field {} (expected op=<name>, cat=<name>, phase=<name> or layer=<index>)",
            shown(token)));
      }
      if (*slot != kNoTag) {
        fail(fmt::format("duplicate field {}", shown(token)));
      }
      // A tag seen before and written without escapes is its own decoded text (already checked when it
      // was first read): look it up in place, without building a string per event. Consecutive events
      // mostly repeat the op, category and phase, so the last one of each is compared first.
      LastTag& last = last_tag_[key == "op" ? 0 : key == "cat" ? 1 : 2];
      if (!value.empty() && value == last.token) {
        *slot = last.id;
        continue;
      }
      if (!value.empty() && value.find('%') == std::string_view::npos) {
        if (const auto known = tag_index_.find(value); known != tag_index_.end()) {
          *slot = known->second;
          last = LastTag{value, known->second};
          continue;
        }
      }
      std::string text = decode(value, "tag");
      if (text.empty()) {
        fail(fmt::format("empty value in {}", shown(token)));
      }
      const auto [it, inserted] =
          tag_index_.try_emplace(std::move(text), static_cast<std::uint32_t>(out_.strings.size()));
      if (inserted) {
        out_.strings.push_back(it->first);
      }
      *slot = it->second;
    }
    if (static_cast<std::size_t>(device) >= out_.device_traces.size()) {
      out_.device_traces.resize(static_cast<std::size_t>(device) + 1);
    }
    out_.device_traces[static_cast<std::size_t>(device)].events.push_back(event);
  }

  // Sizes the trace list and puts segments in (device, address) order, rejecting overlaps.
  void finish() {
    std::size_t devices = declared_devices_ ? static_cast<std::size_t>(*declared_devices_) : 0;
    devices = std::max(devices, out_.device_traces.size());
    for (const SnapshotSegment& seg : out_.segments) {
      devices = std::max(devices, static_cast<std::size_t>(seg.device) + 1);
    }
    out_.device_traces.resize(devices);

    std::vector<std::size_t> order(out_.segments.size());
    std::iota(order.begin(), order.end(), 0);
    const auto& segs = out_.segments;
    const auto key_less = [&segs](std::size_t a, std::size_t b) {
      return segs[a].device != segs[b].device ? segs[a].device < segs[b].device
                                              : segs[a].address < segs[b].address;
    };
    if (!std::is_sorted(order.begin(), order.end(), key_less)) {
      std::stable_sort(order.begin(), order.end(), key_less);
      std::vector<SnapshotSegment> sorted;
      std::vector<std::size_t> lines;
      sorted.reserve(segs.size());
      for (const std::size_t i : order) {
        sorted.push_back(std::move(out_.segments[i]));
        lines.push_back(segment_lines_[i]);
      }
      out_.segments = std::move(sorted);
      segment_lines_ = std::move(lines);
    }
    for (std::size_t i = 1; i < out_.segments.size(); ++i) {
      const SnapshotSegment& prev = out_.segments[i - 1];
      const SnapshotSegment& next = out_.segments[i];
      if (prev.device == next.device && next.address < prev.address + prev.total_size_bytes) {
        fail_at(segment_lines_[i], fmt::format("segment {:#x} overlaps the segment at {:#x} (line {})",
                                               next.address, prev.address, segment_lines_[i - 1]));
      }
    }
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t line_no_ = 0;
  std::vector<std::string_view> tokens_;
  Snapshot out_;
  // Heterogeneous lookup (find by string_view), so that a known tag costs no allocation.
  struct TagHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const noexcept {
      return std::hash<std::string_view>{}(text);
    }
  };
  std::unordered_map<std::string, std::uint32_t, TagHash, std::equal_to<>> tag_index_;
  // The last escape-free token of op=, cat= and phase= (views into the text) and the tag it names.
  struct LastTag {
    std::string_view token;
    std::uint32_t id = kNoTag;
  };
  std::array<LastTag, 3> last_tag_{};
  std::unordered_set<std::string> seen_headers_;
  std::optional<std::uint64_t> declared_devices_;
  bool body_started_ = false;
  bool reserved_ = false;  // the first device's event array has been sized for the whole text
  bool segment_open_ = false;
  Bytes segment_offset_ = 0;
  std::vector<std::size_t> segment_lines_;
};

}  // namespace

Snapshot read_vtrace(std::string_view text, std::string_view source) {
  return VtraceReader(text, source).read();
}

std::string write_vtrace(const Snapshot& snapshot) {
  SIM_ASSERT(!snapshot.strings.empty() && snapshot.strings[0].empty());
  std::string out;
  std::size_t n_blocks = 0;
  std::size_t n_events = 0;
  for (const SnapshotSegment& seg : snapshot.segments) {
    n_blocks += seg.blocks.size();
  }
  for (const DeviceTrace& trace : snapshot.device_traces) {
    n_events += trace.events.size();
  }
  out.reserve(256 + 64 * (snapshot.segments.size() + n_blocks + n_events));
  auto it = std::back_inserter(out);

  std::size_t devices = snapshot.device_traces.size();
  for (const SnapshotSegment& seg : snapshot.segments) {
    devices = std::max(devices, static_cast<std::size_t>(seg.device) + 1);
  }
  fmt::format_to(it, "{} {}\n# format: traces/FORMAT.md\ndevices {}\nfinal_state {}\n", kMagic, kVersion,
                 devices, snapshot.has_final_state ? "yes" : "no");
  if (const auto& settings = snapshot.allocator_settings) {
    const std::string conf = encode_field(settings->alloc_conf);
    fmt::format_to(it, "settings{}{}\n", conf.empty() ? "" : " ", conf);
    fmt::format_to(it, "settings.max_split_size {}\n", settings->max_split_size);
    fmt::format_to(it, "settings.garbage_collection_threshold {}\n", settings->garbage_collection_threshold);
    fmt::format_to(it, "settings.expandable_segments {}\n", settings->expandable_segments ? 1 : 0);
    fmt::format_to(it, "settings.roundup_power2_divisions {}\n",
                   fmt::join(settings->roundup_power2_divisions, " "));
  }
  for (std::size_t i = 1; i < snapshot.strings.size(); ++i) {
    fmt::format_to(it, "tag {}\n", encode_field(snapshot.strings[i]));
  }
  for (const SnapshotSegment& seg : snapshot.segments) {
    fmt::format_to(it, "segment {} {:#x} {} {} {} {} {} {}\n", seg.device, seg.address, seg.total_size_bytes,
                   seg.stream, seg.is_small_pool ? "small" : "large", seg.is_expandable ? 1 : 0,
                   seg.pool_id_first, seg.pool_id_second);
    for (const SnapshotBlock& block : seg.blocks) {
      fmt::format_to(it, "block {:#x} {} {} {}\n", block.address, block.size_bytes, block.requested_bytes,
                     state_keyword(block.state));
    }
  }
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    for (const TraceEvent& event : snapshot.device_traces[d].events) {
      fmt::format_to(it, "{} {} {:#x} {} {} {}", d, trace_action_name(event.action), event.addr,
                     event.size_bytes, event.stream, event.time_ns);
      if (event.op_tag != kNoTag) {
        SIM_ASSERT(event.op_tag < snapshot.strings.size());
        fmt::format_to(it, " op={}", encode_field(snapshot.strings[event.op_tag]));
      }
      if (event.layer != kNoLayer) {
        SIM_ASSERT(event.layer >= 0);
        fmt::format_to(it, " layer={}", event.layer);
      }
      if (event.phase_tag != kNoTag) {
        SIM_ASSERT(event.phase_tag < snapshot.strings.size());
        fmt::format_to(it, " phase={}", encode_field(snapshot.strings[event.phase_tag]));
      }
      if (event.category_tag != kNoTag) {
        SIM_ASSERT(event.category_tag < snapshot.strings.size());
        fmt::format_to(it, " cat={}", encode_field(snapshot.strings[event.category_tag]));
      }
      out += '\n';
    }
  }
  return out;
}

}  // namespace vramsim
