// Spec §1 (constants, round_size, the divisions helper, seg_size) and §2.1 P1 (pool choice).
// Every expected value is a row of the spec's worked-example tables or is worked out by hand in a comment.
#include <catch2/catch.hpp>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/size_classes.h"

using namespace vramsim;

namespace {

// A config whose divisions table holds `d` in every interval (what `roundup_power2_divisions:d` parses to,
// spec D1), built directly so these tests do not depend on the parser.
CachingConfig divisions(std::uint64_t d) {
  CachingConfig c;
  c.roundup_power2_divisions.fill(d);
  return c;
}

}  // namespace

TEST_CASE("size constants match spec §1.1", "[quick][alloc]") {
  CHECK(kMinBlockSize == 512);
  CHECK(kSmallSize == 1'048'576);
  CHECK(kSmallBuffer == 2'097'152);
  CHECK(kLargeBuffer == 20'971'520);
  CHECK(kMinLargeAlloc == 10'485'760);
  CHECK(kRoundLarge == 2'097'152);
  CHECK(kAllocationCeiling == 1'152'921'504'606'846'976ULL);  // 2^60
  CHECK(kRoundupIntervals == 16);
  CHECK(kUnlimitedSplitSize == 18'446'744'073'709'551'615ULL);  // 2^64 - 1
  const CachingConfig defaults;
  CHECK(defaults.max_split_size_bytes == kUnlimitedSplitSize);
  CHECK(defaults.garbage_collection_threshold == 0.0);
  CHECK_FALSE(defaults.expandable_segments);
  for (std::uint64_t d : defaults.roundup_power2_divisions) {
    CHECK(d == 0);
  }
}

TEST_CASE("round_size: the §1.2 worked-examples table, default config", "[quick][alloc]") {
  const CachingConfig def;
  CHECK(round_size(1, def) == 512);                  // R1
  CHECK(round_size(511, def) == 512);                // R1
  CHECK(round_size(512, def) == 512);                // R2: already a multiple of 512
  CHECK(round_size(1'000, def) == 1'024);            // R2
  CHECK(round_size(1'048'576, def) == 1'048'576);    // small pool
  CHECK(round_size(1'048'577, def) == 1'049'088);    // large pool
  CHECK(round_size(5'000'000, def) == 5'000'192);    // 9,766 * 512
  CHECK(round_size(88'080'384, def) == 88'080'384);  // T3 default: 84 MiB unchanged
}

TEST_CASE("round_size: the §1.2 worked-examples table, with divisions", "[quick][alloc]") {
  // 1,200 is not > 512 * 4 = 2,048: plain 512 rounding (the helper alone would give 1,280).
  CHECK(round_size(1'200, divisions(4)) == 1'536);
  CHECK(round_size(3'000, divisions(4)) == 3'072);              // f = 2,048, step = 512
  CHECK(round_size(2'500'000, divisions(4)) == 2'621'440);      // f = 2 MiB, step = 512 KiB
  CHECK(round_size(88'080'384, divisions(4)) == 100'663'296);   // f = 64 MiB, step = 16 MiB -> 96 MiB
  CHECK(round_size(88'080'384, divisions(8)) == 92'274'688);    // step = 8 MiB -> 88 MiB
  CHECK(round_size(419'430'400, divisions(2)) == 536'870'912);  // 400 MiB -> 512 MiB
  // Our documented version (2.5/2.6, caching_config.h) treats divisions 1 as "off": the "newer releases" row.
  // 1,312,500 / 512 = 2,563.48 -> 2,564 * 512 = 1,312,768.
  CHECK(round_size(1'312'500, divisions(1)) == 1'312'768);
  // f = 512 KiB, step = 128 KiB: 1,000,000 -> 8 steps = 1,048,576, which is still the small pool.
  CHECK(round_size(1'000'000, divisions(4)) == 1'048'576);
  CHECK(get_pool(round_size(1'000'000, divisions(4))) == PoolKind::kSmall);
}

TEST_CASE("round_size: R2 edge cases", "[quick][alloc]") {
  // orig == 512 * d exactly is not "> 512 * d": plain 512 rounding. 2,048 is a multiple of 512 anyway.
  CHECK(round_size(2'048, divisions(4)) == 2'048);
  // 2,049 > 2,048 -> helper: f = 2,048 (a power of two), step = 512 -> 2,560.
  CHECK(round_size(2'049, divisions(4)) == 2'560);
  // A power of two stays itself under any division count (R3).
  CHECK(round_size(64 * kMiB, divisions(8)) == 64 * kMiB);
  // Divisions 0 (the default table value) never rounds by powers of two.
  CHECK(round_size(2'500'000, divisions(0)) == 2'500'096);  // 4,883 * 512
}

TEST_CASE("round_size: each interval uses its own table entry (R4)", "[quick][alloc]") {
  // Table: interval 6 ([64 MiB, 128 MiB)) = 8, interval 8 ([256 MiB, 512 MiB)) = 2, the rest 0.
  CachingConfig c;
  c.roundup_power2_divisions[6] = 8;
  c.roundup_power2_divisions[8] = 2;
  CHECK(round_size(88'080'384, c) == 92'274'688);    // 84 MiB, interval 6, 8 divisions -> 88 MiB
  CHECK(round_size(419'430'400, c) == 536'870'912);  // 400 MiB, interval 8, 2 divisions -> 512 MiB
  CHECK(round_size(2'500'000, c) == 2'500'096);      // interval 1 = 0: plain 512 rounding
  // Sizes below 1 MiB use interval 0 (R4): with interval 0 = 4, 3,000 -> 3,072.
  CachingConfig small;
  small.roundup_power2_divisions[0] = 4;
  CHECK(round_size(3'000, small) == 3'072);
}

TEST_CASE("roundup_interval_index: floor(log2) - 20, clamped to [0, 15]", "[quick][alloc]") {
  CHECK(roundup_interval_index(1) == 0);
  CHECK(roundup_interval_index(kMiB - 1) == 0);
  CHECK(roundup_interval_index(kMiB) == 0);
  CHECK(roundup_interval_index(2 * kMiB - 1) == 0);
  CHECK(roundup_interval_index(2 * kMiB) == 1);
  CHECK(roundup_interval_index(64 * kMiB) == 6);
  CHECK(roundup_interval_index(128 * kMiB - 1) == 6);
  CHECK(roundup_interval_index(128 * kMiB) == 7);
  CHECK(roundup_interval_index(16 * kGiB) == 14);
  CHECK(roundup_interval_index(32 * kGiB) == 15);
  CHECK(roundup_interval_index(1024 * kGiB) == 15);
}

TEST_CASE("roundup_power2_next_division: R3", "[quick][alloc]") {
  CHECK(roundup_power2_next_division(4, 8) == 4);                  // x <= 4: unchanged
  CHECK(roundup_power2_next_division(3'000, 1) == 3'000);          // d <= 1: unchanged
  CHECK(roundup_power2_next_division(1'312'500, 1) == 1'312'500);  // d <= 1: unchanged (the helper itself)
  CHECK(roundup_power2_next_division(3'000, 0) == 3'000);
  CHECK(roundup_power2_next_division(1'024, 4) == 1'024);  // power of two
  CHECK(roundup_power2_next_division(1'200, 4) == 1'280);  // f = 1,024, step 256: 4 * 256 + 256
  CHECK(roundup_power2_next_division(3'000, 4) == 3'072);  // f = 2,048, step 512
  CHECK(roundup_power2_next_division(3'072, 4) == 3'072);  // already a multiple of the step
  CHECK(roundup_power2_next_division(5, 8) == 8);          // f = 4, step = 4 / 8 = 0 -> 2f
  CHECK(roundup_power2_next_division(7, 4) == 7);          // f = 4, step 1: every x is a multiple
  CHECK(roundup_power2_next_division(6, 2) == 6);          // f = 4, step 2, 6 is a multiple
  CHECK(roundup_power2_next_division(7, 2) == 8);          // f = 4, step 2: 6 + 2
  CHECK(roundup_power2_next_division(7, 3) == 8);          // d' = 2 (3 rounded down to a power of two)
  CHECK(roundup_power2_next_division(88'080'384, 4) == 100'663'296);
  CHECK(roundup_power2_next_division(419'430'400, 2) == 536'870'912);
}

TEST_CASE("get_allocation_size: §1.4 A1-A3 examples", "[quick][alloc]") {
  CHECK(get_allocation_size(512) == 2'097'152);            // A1
  CHECK(get_allocation_size(1'048'576) == 2'097'152);      // A1 boundary (<= 1 MiB)
  CHECK(get_allocation_size(1'049'088) == 20'971'520);     // A2
  CHECK(get_allocation_size(10'485'248) == 20'971'520);    // A2, just under 10 MiB
  CHECK(get_allocation_size(10'485'760) == 10'485'760);    // A3 boundary (>= 10 MiB)
  CHECK(get_allocation_size(10'486'272) == 12'582'912);    // A3: rounded up to 12 MiB
  CHECK(get_allocation_size(104'857'600) == 104'857'600);  // A3: 100 MiB is a multiple of 2 MiB
  CHECK(get_allocation_size(11'534'848) == 12'582'912);    // §3.1 example: 11 MiB + 512 -> 12 MiB
  CHECK(get_allocation_size(314'572'800) == 314'572'800);  // 300 MiB
  CHECK(get_allocation_size(5'243'392) == 20'971'520);     // §2.2: 5 MiB + 512 -> 20 MiB
}

TEST_CASE("get_pool: small iff rounded size <= 1 MiB (P1)", "[quick][alloc]") {
  CHECK(get_pool(512) == PoolKind::kSmall);
  CHECK(get_pool(1'048'064) == PoolKind::kSmall);
  CHECK(get_pool(1'048'576) == PoolKind::kSmall);  // <=, not <
  CHECK(get_pool(1'048'577) == PoolKind::kLarge);
  CHECK(get_pool(1'049'088) == PoolKind::kLarge);
  CHECK(get_pool(20 * kMiB) == PoolKind::kLarge);
  // The choice uses the rounded size: 1,048,577 bytes round to 1,049,088 -> large.
  CHECK(get_pool(round_size(1'048'577, CachingConfig{})) == PoolKind::kLarge);
  CHECK(get_pool(round_size(1'048'576, CachingConfig{})) == PoolKind::kSmall);
}
