// sim/core/checked_size.h: a size that would wrap is the user's input error, with the computation named.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "sim/core/checked_size.h"
#include "sim/core/error.h"

using namespace vramsim;

TEST_CASE("size_mul and size_add return exact sizes and refuse the ones that wrap", "[core][checked]") {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  // 2^31 x 2^31 = 2^62 fits in int64; 2^62 x 2 = 2^63 does not.
  CHECK(size_mul<std::int64_t>(std::int64_t{1} << 31, std::int64_t{1} << 31, "t") == std::int64_t{1} << 62);
  CHECK_THROWS_MATCHES(size_mul<std::int64_t>(std::int64_t{1} << 62, 2, "vLLM start-up"), InputError,
                       Catch::Message("vLLM start-up: a size overflows 64 bits (shapes too large)"));
  CHECK(size_add<std::int64_t>(kMax - 1, 1, "t") == kMax);
  CHECK_THROWS_MATCHES(size_add<std::int64_t>(kMax, 1, "vLLM KV cache"), InputError,
                       Catch::Message("vLLM KV cache: a size overflows 64 bits (shapes too large)"));
}
