// memory_summary(): torch.cuda.memory_summary()'s table (torch/cuda/memory.py). Rules used for the expected
// text: each line is "|" + 75 characters + "|"; the title line is " {_:16} PyTorch CUDA memory summary,
// device ID {device:<17d} " (18 spaces before "PyTorch"); a size cell is f"{sz:6d} {prefix}" where the prefix
// steps B -> KiB -> MiB ... while the *reference* value is >= 768 KiB (dividing sz by 1,024 each step); a
// count cell is f"{cnt:7d} {prefix} " with the 750,000 threshold. The reference value of each column is that
// column's value in the metric's "all" row, for the "all" row and for both pool rows alike.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/report/memory_stats.h"

using namespace vramsim;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("memory_summary: the whole table after malloc(1,000)", "[quick][report]") {
  SimulatedDevice device;
  MemoryStatsObserver stats;
  PyTorchCachingPolicy policy(CachingConfig{}, device, stats);
  REQUIRE(policy.allocate(AllocRequest{1'000, 0, 0}).ok());
  // §7.6 step 1: allocated/active 1,024 B, requested 1,000 B, reserved 2,097,152 B (2,048 KiB: the reference
  // 2,097,152 >= 786,432), inactive_split 2,096,128 B (2,047 KiB), one allocation / segment / split block,
  // all in the small pool. The large-pool rows of the KiB metrics print "0 KiB" (reference from the "all"
  // row); freed columns have reference 0 and print in bytes.
  const std::string expected =
      "|===========================================================================|\n"
      "|                  PyTorch CUDA memory summary, device ID 0                 |\n"
      "|---------------------------------------------------------------------------|\n"
      "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
      "|===========================================================================|\n"
      "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocated memory      |   1024 B   |   1024 B   |   1024 B   |      0 B   |\n"
      "|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |\n"
      "|       from small pool |   1024 B   |   1024 B   |   1024 B   |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active memory         |   1024 B   |   1024 B   |   1024 B   |      0 B   |\n"
      "|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |\n"
      "|       from small pool |   1024 B   |   1024 B   |   1024 B   |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Requested memory      |   1000 B   |   1000 B   |   1000 B   |      0 B   |\n"
      "|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |\n"
      "|       from small pool |   1000 B   |   1000 B   |   1000 B   |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved memory   |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |\n"
      "|       from large pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |\n"
      "|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable memory |   2047 KiB |   2047 KiB |   2047 KiB |      0 B   |\n"
      "|       from large pool |      0 KiB |      0 KiB |      0 KiB |      0 B   |\n"
      "|       from small pool |   2047 KiB |   2047 KiB |   2047 KiB |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocations           |       1    |       1    |       1    |       0    |\n"
      "|       from large pool |       0    |       0    |       0    |       0    |\n"
      "|       from small pool |       1    |       1    |       1    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active allocs         |       1    |       1    |       1    |       0    |\n"
      "|       from large pool |       0    |       0    |       0    |       0    |\n"
      "|       from small pool |       1    |       1    |       1    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved segments |       1    |       1    |       1    |       0    |\n"
      "|       from large pool |       0    |       0    |       0    |       0    |\n"
      "|       from small pool |       1    |       1    |       1    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable allocs |       1    |       1    |       1    |       0    |\n"
      "|       from large pool |       0    |       0    |       0    |       0    |\n"
      "|       from small pool |       1    |       1    |       1    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize allocations  |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
      "|===========================================================================|\n";
  const std::string got = memory_summary(stats.stats(), 0);
  const auto want_lines = lines_of(expected);
  const auto got_lines = lines_of(got);
  REQUIRE(got_lines.size() == want_lines.size());
  for (std::size_t i = 0; i < want_lines.size(); ++i) {
    INFO("line " << i);
    CHECK(got_lines[i] == want_lines[i]);
    CHECK(got_lines[i].size() == 77);
  }
}

TEST_CASE("memory_summary: each column's unit follows the 'all' row's value in that column",
          "[quick][report]") {
  SimulatedDevice device;
  MemoryStatsObserver stats;
  PyTorchCachingPolicy policy(CachingConfig{}, device, stats);
  REQUIRE(policy.allocate(AllocRequest{1'000, 0, 0}).ok());              // 1,024 B, small
  const AllocResult b = policy.allocate(AllocRequest{1'048'577, 0, 0});  // s = 1,049,088, large
  REQUIRE(b.ok());
  policy.free(b.block, 0);
  // allocated_bytes: all (current 1,024, peak 1,050,112, allocated 1,050,112, freed 1,049,088);
  // large (0, 1,049,088, 1,049,088, 1,049,088); small (1,024, 1,024, 1,024, 0).
  // "all": current reference 1,024 -> "1024 B"; the others are >= 786,432 -> KiB: 1,025 / 1,025 / 1,024.
  // large: current reference 1,024 -> "0 B"; others KiB: 1,024 each.
  // small: current reference 1,024 -> "1024 B"; peak/allocated reference 1,050,112 -> 1,024 // 1,024 = 1 KiB;
  //        freed reference 1,049,088 -> 0 KiB.
  const auto lines = lines_of(memory_summary(stats.stats(), 0));
  std::size_t row = 0;
  while (row < lines.size() && lines[row].find("Allocated memory") == std::string::npos) {
    ++row;
  }
  REQUIRE(row + 2 < lines.size());
  CHECK(lines[row] == "| Allocated memory      |   1024 B   |   1025 KiB |   1025 KiB |   1024 KiB |");
  CHECK(lines[row + 1] == "|       from large pool |      0 B   |   1024 KiB |   1024 KiB |   1024 KiB |");
  CHECK(lines[row + 2] == "|       from small pool |   1024 B   |      1 KiB |      1 KiB |      0 KiB |");
}

TEST_CASE("memory_summary: header counts are left-aligned in fixed fields", "[quick][report]") {
  DeviceStats s;
  s.num_ooms = 12;
  s.num_alloc_retries = 3;
  const auto lines = lines_of(memory_summary(s, 1));
  REQUIRE(lines.size() > 4);
  // "  {_:9} CUDA OOMs: {num_ooms:<12d} | {_:6} cudaMalloc retries: {num_alloc_retries:<8d}  "
  CHECK(lines[1] == "|                  PyTorch CUDA memory summary, device ID 1                 |");
  CHECK(lines[3] == "|            CUDA OOMs: 12           |        cudaMalloc retries: 3         |");
}

TEST_CASE("memory_summary: large counts switch to K at 750,000", "[quick][report]") {
  DeviceStats s;
  s.allocation[kStatAll].allocated = 2'500'000;  // reference >= 750,000 -> 2,500 K
  s.allocation[kStatAll].freed = 749'999;        // reference < 750,000 -> plain
  const auto lines = lines_of(memory_summary(s, 0));
  std::size_t row = 0;
  while (row < lines.size() && lines[row].find("| Allocations") == std::string::npos) {
    ++row;
  }
  REQUIRE(row < lines.size());
  CHECK(lines[row] == "| Allocations           |       0    |       0    |    2500 K  |  749999    |");
}
