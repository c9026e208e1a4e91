// The expensive invariant checks are a run-time switch (sim/core/assert.h): the test programs turn them on
// (tests/main.cpp), for themselves and for the vramsim processes they start, so the suite checks what it
// used to check only in a -DSIM_DEBUG_FULL=ON build.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "sim/core/assert.h"

TEST_CASE("the test programs run the expensive invariant checks, and so do the vramsim processes they start",
          "[quick][core]") {
  CHECK(vramsim::expensive_checks());
  const char* exported = std::getenv("VRAMSIM_DEBUG_FULL");
  REQUIRE(exported != nullptr);
  CHECK(std::string(exported) == "1");
  // SIM_ASSERT_EXPENSIVE evaluates its condition only when the checks are on.
  int evaluated = 0;
  const auto counted = [&] {
    ++evaluated;
    return true;
  };
  SIM_ASSERT_EXPENSIVE(counted());
  CHECK(evaluated == 1);
  vramsim::set_expensive_checks(false);
  SIM_ASSERT_EXPENSIVE(counted());
  CHECK(evaluated == 1);
  vramsim::set_expensive_checks(true);
}
