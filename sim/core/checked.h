// Overflow-checked integer arithmetic for sizes computed from user input (dimensions, batch, sequence
// length): a wrapped product would be a silently wrong number, so callers turn `false` into an InputError
// that names what the user typed.
#pragma once

#include <optional>
#include <type_traits>

namespace vramsim {

// a * b, or nullopt when it does not fit in T.
template <typename T>
requires std::is_integral_v<T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

// a + b, or nullopt when it does not fit in T.
template <typename T>
requires std::is_integral_v<T>
constexpr std::optional<T> checked_add(T a, T b) {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace vramsim
