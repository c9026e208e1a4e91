// Byte sizes computed from user-typed shapes, where a product or sum that would wrap is the user's input
// error and never a silently wrong number: the throwing form of checked.h for code that computes many sizes
// in a row (a model's start-up lines, a kernel's workspace). `what` names the computation in the one-line
// error: size_mul(a, b, "vLLM start-up") throws "vLLM start-up: a size overflows 64 bits (shapes too large)".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "sim/core/checked.h"
#include "sim/core/error.h"

namespace vramsim {

[[noreturn]] inline void throw_size_overflow(std::string_view what) {
  throw InputError(std::string(what) + ": a size overflows 64 bits (shapes too large)");
}

// a * b, or InputError naming `what` when it does not fit in T.
template <typename T>
requires std::is_integral_v<T> T size_mul(T a, T b, std::string_view what) {
  const std::optional<T> out = checked_mul(a, b);
  if (!out) {
    throw_size_overflow(what);
  }
  return *out;
}

// a + b, or InputError naming `what` when it does not fit in T.
template <typename T>
requires std::is_integral_v<T> T size_add(T a, T b, std::string_view what) {
  const std::optional<T> out = checked_add(a, b);
  if (!out) {
    throw_size_overflow(what);
  }
  return *out;
}

}  // namespace vramsim
