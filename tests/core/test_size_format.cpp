#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/core/size_format.h"

using namespace vramsim;

TEST_CASE("parse_size accepts the units users write", "[quick][core]") {
  CHECK(parse_size("123", "--capacity") == 123);
  CHECK(parse_size("80GB", "--capacity") == 80'000'000'000ULL);
  CHECK(parse_size("80GiB", "--capacity") == 80ULL * 1024 * 1024 * 1024);
  CHECK(parse_size("1.5MiB", "--capacity") == 1'572'864);
  CHECK(parse_size("2M", "--capacity") == 2 * 1024 * 1024);
}

TEST_CASE("parse_size rejects junk with the option name", "[quick][core]") {
  CHECK_THROWS_WITH(parse_size("-1GB", "--capacity"), Catch::Contains("--capacity"));
  CHECK_THROWS_AS(parse_size("12 parsecs", "--capacity"), InputError);
  CHECK_THROWS_AS(parse_size("", "--capacity"), InputError);
  CHECK_THROWS_AS(parse_size("2000000TiB", "--capacity"), InputError);
}

TEST_CASE("format_size follows PyTorch's format_size (spec O2)", "[quick][core]") {
  CHECK(format_size(1024) == "1024 bytes");
  CHECK(format_size(1025) == "1.00 KiB");
  CHECK(format_size(1048576) == "1024.00 KiB");  // exactly 1 MiB prints in KiB (spec O2)
  CHECK(format_size(20971520) == "20.00 MiB");
  CHECK(format_size(858993459200000000ULL) == "800000000.00 GiB");  // spec T16
}
