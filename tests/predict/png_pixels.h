// The pixels of a PNG screenshot, so that a test can say what a page drew (a blank page has no pixel of any
// series' colour). Reads what headless chromium writes: 8-bit RGB or RGBA, not interlaced (PNG
// specification, ISO/IEC 15948: IHDR, IDAT, filter types 0-4 with the Paeth predictor). Needs zlib; without
// it (VRAMSIM_TEST_HAVE_ZLIB undefined) decode() returns nothing and the caller reports the check skipped.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#ifdef VRAMSIM_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

namespace vramsim::test {

struct Rgb {
  int r = 0, g = 0, b = 0;
};

struct PngImage {
  std::uint32_t width = 0, height = 0;
  std::vector<Rgb> pixels;  // row-major; alpha dropped (chromium's screenshots are opaque)
};

inline std::uint32_t png_u32(const std::string& s, std::size_t at) {
  return (std::uint32_t{static_cast<unsigned char>(s[at])} << 24) |
         (std::uint32_t{static_cast<unsigned char>(s[at + 1])} << 16) |
         (std::uint32_t{static_cast<unsigned char>(s[at + 2])} << 8) | static_cast<unsigned char>(s[at + 3]);
}

inline std::optional<PngImage> decode_png(const std::string& file) {
#ifdef VRAMSIM_TEST_HAVE_ZLIB
  if (file.size() < 33 || file.rfind("\x89PNG\r\n\x1a\n", 0) != 0) {
    return std::nullopt;
  }
  PngImage img;
  int channels = 0;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    const std::uint32_t length = png_u32(file, at);
    const std::string type = file.substr(at + 4, 4);
    if (at + 12 + length > file.size()) {
      return std::nullopt;
    }
    if (type == "IHDR") {
      img.width = png_u32(file, at + 8);
      img.height = png_u32(file, at + 12);
      const int depth = file[at + 16], color = file[at + 17], interlace = file[at + 20];
      channels = color == 2 ? 3 : color == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0) {
        return std::nullopt;
      }
    } else if (type == "IDAT") {
      idat += file.substr(at + 8, length);
    }
    at += 12 + length;
  }
  const std::size_t stride = static_cast<std::size_t>(img.width) * static_cast<std::size_t>(channels);
  std::vector<unsigned char> raw((stride + 1) * img.height);
  uLongf raw_size = raw.size();
  if (channels == 0 ||
      uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    return std::nullopt;
  }
  std::vector<unsigned char> prev(stride, 0), row(stride);
  img.pixels.reserve(static_cast<std::size_t>(img.width) * img.height);
  for (std::uint32_t y = 0; y < img.height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(channels) ? row[x - channels] : 0;
      const int b = prev[x];
      const int c = x >= static_cast<std::size_t>(channels) ? prev[x - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          return std::nullopt;
      }
      row[x] = static_cast<unsigned char>(in[x] + predictor);
    }
    for (std::size_t x = 0; x < stride; x += static_cast<std::size_t>(channels)) {
      img.pixels.push_back(Rgb{row[x], row[x + 1], row[x + 2]});
    }
    prev.swap(row);
  }
  return img;
#else
  (void)file;
  return std::nullopt;
#endif
}

// Pixels within `tolerance` per channel of `colour`, the way an area of fill `colour` and opacity `alpha`
// over white shows (alpha 1: the colour itself).
inline std::size_t pixels_like(const PngImage& img, Rgb colour, double alpha = 1.0, int tolerance = 3) {
  const auto blend = [alpha](int c) { return static_cast<int>(alpha * c + (1 - alpha) * 255 + 0.5); };
  const Rgb want{blend(colour.r), blend(colour.g), blend(colour.b)};
  std::size_t n = 0;
  for (const Rgb& p : img.pixels) {
    n += std::abs(p.r - want.r) <= tolerance && std::abs(p.g - want.g) <= tolerance &&
                 std::abs(p.b - want.b) <= tolerance
             ? 1
             : 0;
  }
  return n;
}

inline Rgb hex_colour(const std::string& hex) {  // "#RRGGBB"
  const auto byte = [&](std::size_t at) { return std::stoi(hex.substr(at, 2), nullptr, 16); };
  return Rgb{byte(1), byte(3), byte(5)};
}

}  // namespace vramsim::test
