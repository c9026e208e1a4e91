// The order in which replay and compare take a folder's rank files (sim/cli/rank_files.h): digit runs compare
// as numbers (rank10 after rank9), and names equal as numbers (rank01, rank1) in byte order, so the order
// does not depend on the directory listing's. Expected orders written out by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/cli/rank_files.h"

using vramsim::cli::natural_less;

TEST_CASE("rank files: natural order, ties broken by bytes", "[quick][cli]") {
  CHECK(natural_less("rank9", "rank10"));
  CHECK_FALSE(natural_less("rank10", "rank9"));
  CHECK(natural_less("rank2.json", "rank2.vtrace"));  // '.json' < '.vtrace' by bytes
  // "rank01" and "rank1" are rank 1 both: '0' < '1' puts rank01 first, and never both ways.
  CHECK(natural_less("rank01", "rank1"));
  CHECK_FALSE(natural_less("rank1", "rank01"));
  CHECK_FALSE(natural_less("rank1", "rank1"));
  // A strict weak ordering: the sorted result is the same from any starting order.
  const std::vector<std::string> expected = {"rank0", "rank01", "rank1", "rank001x", "rank2", "rank10"};
  std::vector<std::string> names = {"rank10", "rank1", "rank2", "rank001x", "rank01", "rank0"};
  std::sort(names.begin(), names.end(), natural_less);
  CHECK(names == expected);
  std::reverse(names.begin(), names.end());
  std::sort(names.begin(), names.end(), natural_less);
  CHECK(names == expected);
}
