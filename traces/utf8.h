// UTF-8 validation shared by the trace readers: every text a trace file carries (pickle strings, vtrace tags)
// must be valid UTF-8, or the reader stops with one line naming where (the JSON writers could not carry it).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace vramsim {

// Strict UTF-8 (no overlongs, no surrogates): what nlohmann::json::dump() accepts. Python's unpickler would
// also take lone surrogates ('surrogatepass'), but JSON cannot carry them.
// Length of the valid UTF-8 sequence starting at p[0] (of the n bytes left), or 0 when it is not one.
inline std::size_t utf8_sequence_length(const std::uint8_t* p, std::size_t n) {
  constexpr std::array<std::uint32_t, 5> kMinCodePoint = {0, 0, 0x80, 0x800, 0x10000};  // by sequence length
  const std::uint8_t lead = p[0];
  const std::size_t len = lead < 0x80             ? 1
                          : (lead & 0xe0) == 0xc0 ? 2
                          : (lead & 0xf0) == 0xe0 ? 3
                          : (lead & 0xf8) == 0xf0 ? 4
                                                  : 0;
  if (len == 0 || n < len) {
    return 0;
  }
  std::uint32_t cp = len == 1 ? lead : lead & (0x7fU >> len);
  for (std::size_t k = 1; k < len; ++k) {
    if ((p[k] & 0xc0) != 0x80) {
      return 0;
    }
    cp = (cp << 6) | (p[k] & 0x3fU);
  }
  if (cp < kMinCodePoint[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return len;
}

// Strict UTF-8 (no overlongs, no surrogates): what nlohmann::json::dump() accepts. Python's unpickler would
// also take lone surrogates ('surrogatepass'), but JSON cannot carry them.
inline bool is_valid_utf8(const std::uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n;) {
    std::uint64_t word = 0;
    if (n - i >= 8 && (std::memcpy(&word, p + i, 8), (word & 0x8080808080808080ULL) == 0)) {
      i += 8;  // all ASCII, the common case
      continue;
    }
    const std::size_t len = utf8_sequence_length(p + i, n - i);
    if (len == 0) {
      return false;
    }
    i += len;
  }
  return true;
}

inline bool is_valid_utf8(std::string_view text) {
  return is_valid_utf8(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

// `text` with every byte that starts no valid sequence replaced by U+FFFD, as nlohmann's
// error_handler_t::replace does: what the writers put out for text that did not come from a validated reader
// (a file path, a tag a test or a tool made), so that their output always reads back.
inline std::string to_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(text.data());
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8_sequence_length(p + i, text.size() - i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace vramsim
