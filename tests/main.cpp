// The test programs' main: Catch2's runner, with the expensive invariant checks on (sim/core/assert.h) in this
// process and, through VRAMSIM_DEBUG_FULL, in every vramsim process a test starts.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include "sim/core/assert.h"

int main(int argc, char* argv[]) {
  vramsim::set_expensive_checks(true);
  setenv("VRAMSIM_DEBUG_FULL", "1", 1);
  return Catch::Session().run(argc, argv);
}
