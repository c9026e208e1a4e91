// The vramsim binary the tests were built with, the one source compiled with its path (test_paths.h says
// why).
#include "test_paths.h"

namespace vramsim::test {

std::string vramsim_binary() { return VRAMSIM_BINARY; }

}  // namespace vramsim::test
