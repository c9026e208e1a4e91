// What emscripten 3.1.6's libc++ (LLVM 13 era, Debian 12's emscripten) lacks of the C++20 library that
// vramsim uses, filled in for the WebAssembly build only: the web build force-includes this header
// (-include, CMakeLists.txt); the native build never sees it. Each piece is declared only when the library
// does not announce the feature itself (its __cpp_lib_* macro), so a newer emscripten uses its own.
//   std::bit_cast                 libc++ 14
//   std::from_chars for double    libc++ 17 (floating-point from_chars)
#pragma once

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>
#include <type_traits>

namespace std {

#if !defined(__cpp_lib_bit_cast)
template <class To, class From>
requires(sizeof(To) == sizeof(From) && is_trivially_copyable_v<To> &&
         is_trivially_copyable_v<From>) constexpr To bit_cast(const From& from) noexcept {
  return __builtin_bit_cast(To, from);
}
#endif

#if !defined(__cpp_lib_to_chars)
// from_chars' general format, read by strtod and held to from_chars' rules: no leading space or '+', no
// hexadecimal ("0x1p3" reads as 0 and stops at 'x'), and a value out of double's range is result_out_of_range
// with `value` untouched. musl's strtod (emscripten's libc) rounds correctly, as from_chars must.
inline from_chars_result from_chars(const char* first, const char* last, double& value) {
  const char* digits = first;
  if (digits != last && *digits == '-') {
    ++digits;
  }
  if (digits == last || *digits == ' ' || *digits == '+' || (*digits >= '\t' && *digits <= '\r')) {
    return {first, errc::invalid_argument};
  }
  string text(first, last);  // strtod needs the NUL that the caller's range lacks
  if (last - digits >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    text.resize(static_cast<size_t>(digits - first) + 1);
  }
  char* end = nullptr;
  errno = 0;
  const double parsed = strtod(text.c_str(), &end);
  if (end == text.c_str()) {
    return {first, errc::invalid_argument};
  }
  const char* ptr = first + (end - text.c_str());
  if (errno == ERANGE) {
    return {ptr, errc::result_out_of_range};
  }
  value = parsed;
  return {ptr, errc{}};
}
#endif

}  // namespace std
