// Invariant checks at three cost levels (after mimalloc's internal.h):
//   SIM_ASSERT            always on; O(1) checks whose failure means the model is wrong.
//   SIM_ASSERT_INTERNAL   debug builds (NDEBUG unset) only.
//   SIM_ASSERT_EXPENSIVE  only with -DSIM_DEBUG_FULL=ON; may walk whole data structures.
// A failed assertion prints file:line and the condition, then aborts: these are bugs, not input errors.
#pragma once

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

#if defined(SIM_DEBUG_FULL) && SIM_DEBUG_FULL
#define SIM_ASSERT_EXPENSIVE(cond) SIM_ASSERT(cond)
#define SIM_EXPENSIVE_CHECKS 1
#else
#define SIM_ASSERT_EXPENSIVE(cond) static_cast<void>(0)
#define SIM_EXPENSIVE_CHECKS 0
#endif
