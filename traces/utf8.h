// UTF-8 validation shared by the trace readers: every text a trace file carries (pickle strings, vtrace tags)
// must be valid UTF-8, or the reader stops with one line naming where (the JSON writers could not carry it).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace vramsim {

// Strict UTF-8 (no overlongs, no surrogates): what nlohmann::json::dump() accepts. Python's unpickler would
// also take lone surrogates ('surrogatepass'), but JSON cannot carry them.
inline bool is_valid_utf8(const std::uint8_t* p, std::size_t n) {
  constexpr std::array<std::uint32_t, 5> kMinCodePoint = {0, 0, 0x80, 0x800, 0x10000};  // by sequence length
  for (std::size_t i = 0; i < n;) {
    std::uint64_t word = 0;
    if (n - i >= 8 && (std::memcpy(&word, p + i, 8), (word & 0x8080808080808080ULL) == 0)) {
      i += 8;  // all ASCII, the common case
      continue;
    }
    const std::uint8_t lead = p[i];
    const std::size_t len = lead < 0x80             ? 1
                            : (lead & 0xe0) == 0xc0 ? 2
                            : (lead & 0xf0) == 0xe0 ? 3
                            : (lead & 0xf8) == 0xf0 ? 4
                                                    : 0;
    if (len == 0 || n - i < len) {
      return false;
    }
    std::uint32_t cp = len == 1 ? lead : lead & (0x7fU >> len);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) {
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3fU);
    }
    if (cp < kMinCodePoint[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += len;
  }
  return true;
}

inline bool is_valid_utf8(std::string_view text) {
  return is_valid_utf8(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

}  // namespace vramsim
