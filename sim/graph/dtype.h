// Element types of the tensors the step simulator creates, with PyTorch's names and sizes.
#pragma once

#include <cstdint>
#include <string_view>

#include "sim/core/types.h"

namespace vramsim {

enum class DType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kInt64, kBool, kUInt8 };

// Bytes per element (bool is one byte, as torch.bool is).
constexpr Bytes dtype_size_bytes(DType d) {
  switch (d) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
    case DType::kBool:
    case DType::kUInt8:
      return 1;
  }
  return 4;
}

constexpr bool is_floating(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}

// torch's spelling: "float32", "bfloat16", "int64", ...
constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kUInt8:
      return "uint8";
  }
  return "?";
}

// Type promotion of two floating dtypes (torch.result_type for tensors of equal dimension category):
// fp32 wins over half types; fp16 with bf16 gives fp32.
constexpr DType promote(DType a, DType b) {
  if (a == b) {
    return a;
  }
  if (!is_floating(a)) {
    return b;
  }
  if (!is_floating(b)) {
    return a;
  }
  return DType::kFloat32;
}

}  // namespace vramsim
