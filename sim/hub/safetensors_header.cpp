// A safetensors file's header, checked as the safetensors crate checks it (see the header for the rules and
// the crate's names of the errors).
#include "sim/hub/safetensors_header.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "traces/json_input.h"

namespace vramsim {
namespace {

using nlohmann::json;

struct DtypeBits {
  std::string_view name;
  int bits;
};
// safetensors/src/tensor.rs, Dtype::bitsize.
constexpr std::array<DtypeBits, 20> kDtypes = {{{"BOOL", 8},    {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
                                                {"U8", 8},      {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
                                                {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16},    {"F16", 16},
                                                {"BF16", 16},   {"I32", 32}, {"U32", 32},    {"F32", 32},
                                                {"C64", 64},    {"F64", 64}, {"I64", 64},    {"U64", 64}}};

std::uint64_t little_endian_u64(std::string_view bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) {
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  }
  return n;
}

// Reads one header: the JSON text, where each tensor's entry begins in the file (for messages).
class HeaderReader {
 public:
  HeaderReader(std::string_view text, std::string_view source) : m_text(text), m_source(source) {}

  [[noreturn]] void fail(std::uint64_t byte, std::string_view problem) const {
    throw InputError(fmt::format("{}: byte {}: {}", m_source, byte, problem));
  }
  // The file offset of the entry `name` (its key's opening quote), or of the header when the key is written
  // with escapes and cannot be found as typed.
  std::uint64_t entry_byte(const std::string& name) const {
    const std::size_t at = m_text.find(fmt::format("\"{}\"", name));
    return 8 + (at == std::string_view::npos ? 0 : at);
  }
  // A JSON integer in 0..2^63-1 (usize in the crate; a float, a sign or a string is refused by serde).
  std::int64_t unsigned_value(const json& v, const std::string& name, std::string_view what) const {
    if (!v.is_number_integer() ||
        (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
      fail(entry_byte(name), fmt::format("tensor '{}': {} must be non-negative integers", name, what));
    }
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(entry_byte(name), fmt::format("tensor '{}': {} value {} is too large", name, what, u));
    }
    return static_cast<std::int64_t>(u);
  }
  SafetensorsTensor tensor(const std::string& name, const json& info) const {
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets")) {
      fail(entry_byte(name),
           fmt::format("tensor '{}': needs \"dtype\", \"shape\" and \"data_offsets\"", name));
    }
    SafetensorsTensor t;
    t.name = name;
    const json& dtype = info.at("dtype");
    if (!dtype.is_string() || safetensors_dtype_bits(dtype.get<std::string>()) == 0) {
      fail(entry_byte(name),
           fmt::format("tensor '{}': unknown dtype {} (safetensors' Dtype: BOOL, F4, F6_E2M3, "
                       "F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, "
                       "U32, F32, C64, F64, I64, U64)",
                       name, dtype.dump()));
    }
    t.dtype = dtype.get<std::string>();
    const json& shape = info.at("shape");
    if (!shape.is_array()) {
      fail(entry_byte(name), fmt::format("tensor '{}': shape must be a list of integers", name));
    }
    for (const json& d : shape) {
      t.shape.push_back(unsigned_value(d, name, "shape"));
    }
    const json& offsets = info.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(entry_byte(name), fmt::format("tensor '{}': data_offsets must be [begin, end]", name));
    }
    t.begin = static_cast<std::uint64_t>(unsigned_value(offsets.at(0), name, "data_offsets"));
    t.end = static_cast<std::uint64_t>(unsigned_value(offsets.at(1), name, "data_offsets"));
    return t;
  }
  // Metadata::validate: sorted by offsets, each tensor begins where the previous one ends, its span is
  // shape x bits / 8 (overflow-checked, whole bytes); the last ends at the end of the file.
  void validate(const std::vector<SafetensorsTensor>& tensors, std::uint64_t data_size) const {
    std::uint64_t start = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const SafetensorsTensor& t : tensors) {
      const std::uint64_t at = entry_byte(t.name);
      if (t.end < t.begin) {
        fail(at,
             fmt::format("tensor '{}': data_offsets [{}, {}] end before they begin", t.name, t.begin, t.end));
      }
      if (t.begin < start) {
        fail(at, fmt::format("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", t.name,
                             t.begin, t.end, previous->name, previous->begin, previous->end));
      }
      if (t.begin > start) {
        fail(at, fmt::format("tensor '{}': data_offsets [{}, {}] leave bytes {}..{} of the data unclaimed",
                             t.name, t.begin, t.end, start, t.begin));
      }
      std::optional<std::uint64_t> bits = std::uint64_t{1};
      for (const std::int64_t d : t.shape) {
        bits = bits ? checked_mul(*bits, static_cast<std::uint64_t>(d)) : std::nullopt;
      }
      const auto nbits = bits
                             ? checked_mul(*bits, static_cast<std::uint64_t>(safetensors_dtype_bits(t.dtype)))
                             : std::nullopt;
      if (!nbits) {
        fail(at, fmt::format("tensor '{}': shape x dtype size overflows 64 bits", t.name));
      }
      if (*nbits % 8 != 0) {
        fail(at, fmt::format("tensor '{}': {} elements of {} are not a whole number of bytes", t.name, *bits,
                             t.dtype));
      }
      if (*nbits / 8 != t.end - t.begin) {
        fail(at, fmt::format("tensor '{}': shape [{}] of {} is {} bytes but data_offsets [{}, {}] span {}",
                             t.name, fmt::join(t.shape, ", "), t.dtype, *nbits / 8, t.begin, t.end,
                             t.end - t.begin));
      }
      start = t.end;
      previous = &t;
    }
    if (start != data_size) {
      fail(
          8 + m_text.size() + std::min(start, data_size),
          start > data_size
              ? fmt::format("the tensors' data ends at byte {} of the data, past the file's {} bytes of data "
                            "(truncated file?)",
                            start, data_size)
              : fmt::format("the file has {} bytes of data after the header but the tensors claim {}",
                            data_size, start));
    }
  }

 private:
  std::string_view m_text;
  std::string_view m_source;
};

}  // namespace

std::int64_t SafetensorsTensor::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    n *= d;
  }
  return n;
}

int safetensors_dtype_bits(std::string_view dtype) {
  for (const DtypeBits& d : kDtypes) {
    if (d.name == dtype) {
      return d.bits;
    }
  }
  return 0;
}

SafetensorsHeader parse_safetensors_header(std::string_view bytes, std::uint64_t file_size_bytes,
                                           std::string_view source) {
  const auto fail = [&](std::uint64_t byte, std::string_view problem) {
    throw InputError(fmt::format("{}: byte {}: {}", source, byte, problem));
  };
  if (file_size_bytes < 8 || bytes.size() < 8) {
    fail(0, fmt::format("a file of {} bytes has no 8-byte header length (not a safetensors file?)",
                        std::min<std::uint64_t>(file_size_bytes, bytes.size())));
  }
  const std::uint64_t n = little_endian_u64(bytes);
  if (n > kMaxSafetensorsHeaderBytes) {
    fail(0, fmt::format("header length {} is over safetensors' limit of 100000000 bytes (not a safetensors "
                        "file?)",
                        n));
  }
  if (n + 8 > file_size_bytes || n + 8 > bytes.size()) {
    fail(0, fmt::format("header length {} runs past the end of the file ({} bytes)", n,
                        std::min<std::uint64_t>(file_size_bytes, bytes.size())));
  }
  const std::string_view text = bytes.substr(8, n);
  // nlohmann counts the characters read: the failing one is at file offset 7 + that count.
  const json root = parse_json_input(text, source, kMaxSmallJsonMemory, 7);
  if (!root.is_object()) {
    fail(8, "the header is not a JSON object");
  }
  const HeaderReader reader(text, source);
  SafetensorsHeader h;
  h.path = std::string(source);
  h.header_size_bytes = n;
  h.data_size_bytes = file_size_bytes - 8 - n;
  for (const auto& [name, info] : root.items()) {
    if (name == "__metadata__") {
      bool strings = info.is_object();
      if (strings) {
        for (const auto& [key, value] : info.items()) {
          strings = strings && value.is_string();
        }
      }
      if (!strings) {
        fail(reader.entry_byte(name), "__metadata__ must map strings to strings");
      }
      continue;
    }
    h.tensors.push_back(reader.tensor(name, info));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  reader.validate(h.tensors, h.data_size_bytes);
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: not a readable file", path));
  }
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) {
    throw InputError(fmt::format("{}: cannot be read", path));
  }
  std::string bytes(8, '\0');
  in.read(bytes.data(), 8);
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  if (bytes.size() == 8) {
    // Read the JSON only once its length is known to be within the limit and the file.
    const std::uint64_t n = little_endian_u64(bytes);
    if (n <= kMaxSafetensorsHeaderBytes && n + 8 <= size) {
      bytes.resize(8 + n);
      in.read(bytes.data() + 8, static_cast<std::streamsize>(n));
      bytes.resize(8 + static_cast<std::size_t>(in.gcount()));
    }
  }
  return parse_safetensors_header(bytes, size, path);
}

}  // namespace vramsim
