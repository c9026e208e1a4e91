// Invariant checks at three cost levels (after mimalloc's internal.h):
//   SIM_ASSERT            always on; O(1) checks whose failure means the model is wrong.
//   SIM_ASSERT_INTERNAL   debug builds (NDEBUG unset) only.
//   SIM_ASSERT_EXPENSIVE  only where expensive_checks() is on; may walk whole data structures.
// A failed assertion prints file:line and the condition, then aborts: these are bugs, not input errors.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace vramsim::detail {
[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "vramsim: internal invariant violated at %s:%d: %s\n", file, line, cond);
  std::abort();
}
}  // namespace vramsim::detail

#define SIM_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::vramsim::detail::assert_fail(#cond, __FILE__, __LINE__))

#ifndef NDEBUG
#define SIM_ASSERT_INTERNAL(cond) SIM_ASSERT(cond)
#else
#define SIM_ASSERT_INTERNAL(cond) static_cast<void>(0)
#endif

namespace vramsim {

// The expensive invariant checks (SIM_ASSERT_EXPENSIVE, the stamped layers' whole-tape comparison in
// sim/graph/layer_stamp.cpp): off in a user's run; on in the test programs (tests/main.cpp turns them on and
// exports VRAMSIM_DEBUG_FULL=1 to the vramsim processes the tests start) and wherever VRAMSIM_DEBUG_FULL is
// set to anything but "" or "0". A switch read at run time, not a compile definition: the test suite then
// links the very objects the README's quick start built (one build folder, each library source compiled
// once).
namespace detail {
inline std::atomic<signed char> g_expensive_checks{-1};  // -1: the environment not read yet
inline bool read_expensive_checks() noexcept {
  const char* v = std::getenv("VRAMSIM_DEBUG_FULL");
  const bool on = v != nullptr && v[0] != '\0' && !(v[0] == '0' && v[1] == '\0');
  g_expensive_checks.store(on ? 1 : 0, std::memory_order_relaxed);
  return on;
}
}  // namespace detail

inline bool expensive_checks() noexcept {
  const signed char state = detail::g_expensive_checks.load(std::memory_order_relaxed);
  return state < 0 ? detail::read_expensive_checks() : state != 0;
}
inline void set_expensive_checks(bool on) noexcept {
  detail::g_expensive_checks.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace vramsim

#define SIM_ASSERT_EXPENSIVE(cond)                                   \
  ((!::vramsim::expensive_checks() || (cond)) ? static_cast<void>(0) \
                                              : ::vramsim::detail::assert_fail(#cond, __FILE__, __LINE__))
