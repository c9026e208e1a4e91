// The checkout's paths, the one test source compiled with them (test_paths.h says why).
#include "test_paths.h"

namespace vramsim::test {

std::filesystem::path source_dir() { return VRAMSIM_SOURCE_DIR; }
std::filesystem::path shared_dir() { return VRAMSIM_SHARED_DIR; }

}  // namespace vramsim::test
