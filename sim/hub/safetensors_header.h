// The header of a .safetensors file (huggingface/safetensors, safetensors/src/tensor.rs): a little-endian
// u64 N, then N bytes of JSON {"__metadata__": {str: str}, NAME: {"dtype", "shape", "data_offsets"}, ...},
// then the tensors' bytes. Only the 8-byte prefix and the JSON are read; the data is never mapped or read
// (its length comes from the file's size).
//
// Checked as SafeTensors::read_metadata and Metadata::validate check it: N at most 100,000,000
// (MAX_HEADER_SIZE; HeaderTooLarge), 8 + N within the file (InvalidHeaderLength), the header UTF-8 JSON
// (InvalidHeader / InvalidHeaderDeserialization), a dtype the crate knows, the tensors sorted by
// data_offsets covering [0, data length) with no gap or overlap (InvalidOffset, MetadataIncompleteBuffer),
// and shape x dtype bits / 8 equal to each span (checked arithmetic: ValidationOverflow, MisalignedSlice,
// TensorInvalidInfo).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramsim {

// MAX_HEADER_SIZE in safetensors/src/tensor.rs.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                // as the header spells it: "BF16", "I32", "F8_E4M3", ...
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::uint64_t begin = 0;          // data_offsets, relative to the end of the header
  std::uint64_t end = 0;
  std::uint64_t size_bytes() const { return end - begin; }
  std::int64_t numel() const;  // the product of `shape` (validated not to overflow)
};

struct SafetensorsHeader {
  std::string path;
  std::uint64_t header_size_bytes = 0;     // N
  std::uint64_t data_size_bytes = 0;       // file size - 8 - N
  std::vector<SafetensorsTensor> tensors;  // in data_offsets order
};

// Bits per element of a safetensors dtype (Dtype::bitsize: F4 4, F6_E2M3 / F6_E3M2 6, BOOL / U8 / I8 /
// F8_E5M2 / F8_E4M3 / F8_E8M0 8, I16 / U16 / F16 / BF16 16, I32 / U32 / F32 32, I64 / U64 / F64 / C64 64),
// or 0 for a name the crate does not know.
int safetensors_dtype_bits(std::string_view dtype);

// The header of the file `bytes` begins (the prefix and at least the header, or fewer bytes for a truncated
// file), for a file of `file_size_bytes`. Throws InputError "<source>: byte <offset in the file>: <problem>"
// for every input the crate refuses.
SafetensorsHeader parse_safetensors_header(std::string_view bytes, std::uint64_t file_size_bytes,
                                           std::string_view source);

// The same, reading only the first 8 + N bytes of `path`.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace vramsim
