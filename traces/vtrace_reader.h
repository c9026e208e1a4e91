// The vtrace reader (traces/FORMAT.md), shared by its two roads: the general one (vtrace_reader.cpp), which
// tokenizes a line and reads every line type with a one-line error for each problem, and the fast one
// (vtrace_fast_path.cpp) for the common event line. Internal to traces/: callers use read_vtrace
// (traces/trace_io.h).
//
// Contract: read_vtrace(write_vtrace(s), s.source) == s for every valid Snapshot: strings[0] == "" and the
// other strings non-empty and distinct; event tags below strings.size() and layers -1 or in [0, 2^31);
// blocks tiling their segments with the recorded sums matching; segments sorted by (device, address) without
// overlaps; a trace entry for every segment's device; sizes below 2^60, addresses below 2^63. The reader
// rejects every malformed line with InputError "<source>: line N: <problem>". Sizes in bytes, times in ns.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "traces/snapshot.h"

namespace vramsim::vtrace {

inline constexpr std::string_view kMagic = "vramsim-trace";
inline constexpr std::string_view kVersion = "1";
inline constexpr std::uint64_t kSizeLimit = std::uint64_t{1} << 60;
inline constexpr std::uint64_t kAddressLimit = std::uint64_t{1} << 63;
inline constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint64_t kMaxDevices = 1024;
inline constexpr std::uint64_t kLayerLimit = std::uint64_t{1}
                                             << 31;  // TraceEvent::layer is a non-negative int32

// kHexValue[c]: the value of hex digit c, -1 for any other byte.
inline constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> table{};
  for (int c = 0; c < 256; ++c) {
    table[static_cast<std::size_t>(c)] = c >= '0' && c <= '9'   ? static_cast<std::int8_t>(c - '0')
                                         : c >= 'a' && c <= 'f' ? static_cast<std::int8_t>(c - 'a' + 10)
                                         : c >= 'A' && c <= 'F' ? static_cast<std::int8_t>(c - 'A' + 10)
                                                                : std::int8_t{-1};
  }
  return table;
}();

// Keeps a bad token printable on one line.
std::string shown(std::string_view token);

class VtraceReader {
 public:
  VtraceReader(std::string_view text, std::string_view source) : text_(text), source_(source) {
    out_.source = std::string(source);
    out_.has_final_state = false;
  }

  Snapshot read();

 private:
  [[noreturn]] void fail_at(std::size_t line, std::string_view problem) const;
  [[noreturn]] void fail(std::string_view problem) const { fail_at(line_no_, problem); }

  // Any byte above ' ' is part of a token: one comparison for almost every byte of a line.
  static bool separates(char c) { return c == ' ' || c == '\t'; }
  static bool in_token(char c) { return static_cast<unsigned char>(c) > ' ' || !separates(c); }

  void tokenize(std::string_view line);

  void expect_fields(std::size_t count, std::string_view usage) const;

  // Decimal or 0x-hex, below `limit`.
  std::uint64_t parse_uint(std::string_view token, std::string_view what, std::uint64_t limit) const;

  std::int64_t parse_int(std::string_view token, std::string_view what) const;

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

  std::string decode(std::string_view token, std::string_view what) const;

  int parse_device(std::string_view token) const;

  void dispatch();

  void read_header_line(std::string_view keyword);

  void read_settings_line(std::string_view keyword);

  void read_segment();

  void read_block();

  void close_segment();

  // The fast road for the common event line (issue 40: replay at the speed of reading): one pass over the
  // line that scans, parses and checks each field in place, without tokenizing first. It accepts exactly the
  // lines read_event() accepts with the same result, but only the common shapes (decimal numbers of at most
  // 19 digits or 0x-hex of at most 15, op=/cat=/phase= naming a known escape-free tag, layer=); anything else
  // (errors included) returns false having stored nothing, and the general road reads the line and words any
  // error. Updating last_tag_ early is harmless: it only caches a valid (token, id) pair.
  bool read_event_fast(std::string_view line);

  // After a field: true when at least one separator follows and then another field.
  static bool skip_separators(const char*& p, const char* end);

  // A field that ends at a separator or at the end of the line.
  static bool field_ends(const char* p, const char* end) { return p == end || separates(*p); }

  // The action keyword at p, as parse_trace_action names them (its spellings, tried by length first).
  static std::optional<TraceAction> fast_action(const char*& p, const char* end);

  // Decimal (at most 19 digits) or 0x-hex (at most 15 digits): below 2^64 and 2^60, so no overflow check
  // is needed (a longer run wraps, and is refused by its length).
  static bool fast_uint(const char*& p, const char* end, std::uint64_t& value);

  static bool fast_int(const char*& p, const char* end, std::int64_t& value);

  // The op=/cat=/phase=/layer= fields after time_ns (p at the first).
  bool fast_event_fields(const char*& p, const char* end, TraceEvent& event);

  // A known, escape-free tag value at p: the previous event's token of the same key first (one memcmp).
  bool fast_tag(const char*& p, const char* end, std::size_t key, std::uint32_t& slot);

  void read_event();
  void read_annotation();
  // The string-table index of a percent-encoded, non-empty field value (added when new); `token` names the
  // field in errors.
  std::uint32_t intern(std::string_view token, std::string_view value);

  // Sizes the trace list and puts segments in (device, address) order, rejecting overlaps.
  void finish();

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

}  // namespace vramsim::vtrace
