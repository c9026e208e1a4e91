#include "sim/core/size_format.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

Bytes parse_size(std::string_view text, std::string_view what) {
  auto fail = [&](std::string_view why) -> Bytes {
    throw InputError(fmt::format("{}: invalid size '{}': {}", what, text, why));
  };
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) {
    ++i;
  }
  if (i == 0) {
    return fail("expected a number followed by an optional unit (e.g. 80GiB)");
  }
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i) {
    return fail("not a number");
  }
  std::string unit(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') {
    unit.erase(unit.begin());
  }
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "KB") {
    scale = 1e3;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024;
  } else if (unit == "MB") {
    scale = 1e6;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "GB") {
    scale = 1e9;
  } else if (unit == "T" || unit == "TiB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "TB") {
    scale = 1e12;
  } else {
    return fail("unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  }
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes >= std::ldexp(1.0, 60)) {
    return fail("too large (limit is 2^60 bytes)");
  }
  return static_cast<Bytes>(std::llround(bytes));
}

std::string format_size(Bytes size_bytes) {
  const double s = static_cast<double>(size_bytes);
  if (size_bytes <= 1024) {
    return fmt::format("{} bytes", size_bytes);
  }
  if (size_bytes <= kMiB) {
    return fmt::format("{:.2f} KiB", s / 1024.0);
  }
  if (size_bytes <= kGiB) {
    return fmt::format("{:.2f} MiB", s / (1024.0 * 1024.0));
  }
  return fmt::format("{:.2f} GiB", s / (1024.0 * 1024.0 * 1024.0));
}

std::string format_bytes_short(Bytes size_bytes) {
  const double s = static_cast<double>(size_bytes);
  if (size_bytes >= kGiB) {
    return fmt::format("{:.2f} GiB", s / static_cast<double>(kGiB));
  }
  if (size_bytes >= kMiB) {
    return fmt::format("{:.2f} MiB", s / static_cast<double>(kMiB));
  }
  if (size_bytes >= kKiB) {
    return fmt::format("{:.2f} KiB", s / static_cast<double>(kKiB));
  }
  return fmt::format("{} B", size_bytes);
}

}  // namespace vramsim
