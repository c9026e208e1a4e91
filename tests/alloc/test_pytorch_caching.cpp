// PyTorchCachingPolicy against the spec's placement rules: pools (§2.1), best fit (§2.2), splitting (§3.1),
// merging (§3.2) and the test cases T1-T3, T5-T7, T9 of §9. Default config, stream 0, fresh allocator unless
// a case says otherwise. SimulatedDevice hands out segment bases from kBaseAddress upwards in creation
// order (each aligned to 2 MiB), so the n-th segment's base is known.
#include <catch2/catch.hpp>

#include "caching_fixture.h"

using namespace vramsim;
using vramsim::test::BlockView;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;

namespace {
constexpr Bytes kBase = SimulatedDevice::kBaseAddress;
}  // namespace

TEST_CASE("T1: 1 MiB requests are small-pool (<= 1 MiB), two per 2 MiB segment", "[quick][alloc]") {
  CachingFixture f;
  // s = 1,048,576 (already a multiple of 512) -> small pool, 2 MiB segments.
  const AllocResult a = f.alloc(1'048'576);
  CHECK(f.stat("segment.small_pool.current") == 1);
  const AllocResult b = f.alloc(1'048'576);  // takes the 1 MiB remainder of the first segment, unsplit
  CHECK(f.stat("segment.small_pool.current") == 1);
  const AllocResult c = f.alloc(1'048'576);  // new segment
  CHECK(f.stat("segment.small_pool.current") == 2);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a.addr == kBase);
  CHECK(b.addr == kBase + 1'048'576);
  CHECK(c.addr == kBase + 2'097'152);  // the second segment's base
  CHECK(a.block_size_bytes == 1'048'576);
  CHECK(b.block_size_bytes == 1'048'576);
  CHECK(c.block_size_bytes == 1'048'576);
  CHECK(f.reserved() == 4'194'304);
  CHECK(f.stat("reserved_bytes.small_pool.current") == 4'194'304);
  CHECK(f.stat("reserved_bytes.large_pool.current") == 0);
  const auto segs = f.recorder.of("segment_alloc");
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].size_bytes == 2'097'152);
  CHECK(segs[1].size_bytes == 2'097'152);
  CHECK(segs[0].pool == PoolKind::kSmall);
  // First segment: [0, 1 MiB) a, [1 MiB, 2 MiB) b. Second: c at 0 plus a free 1 MiB remainder.
  const auto first = f.layout(segs[0].addr);
  REQUIRE(first.size() == 2);
  CHECK((first[0].offset == 0 && first[0].allocated && first[1].offset == 1'048'576 && first[1].allocated));
  const auto second = f.layout(segs[1].addr);
  REQUIRE(second.size() == 2);
  CHECK((second[0].allocated && second[0].size_bytes == 1'048'576));
  CHECK((!second[1].allocated && second[1].size_bytes == 1'048'576));
  // §7.3: the only idle block in a split segment is the second segment's remainder.
  CHECK(f.stat("inactive_split.small_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.small_pool.current") == 1'048'576);
  check_accounting(f);
}

TEST_CASE("T2: the second block of a reused small segment", "[quick][alloc]") {
  CachingFixture f;
  // 1,022,568 -> s = 1,022,976 (1,998 * 512): one 2 MiB small segment; freeing it merges back to 2 MiB.
  const AllocResult first = f.alloc(1'022'568);
  REQUIRE(first.ok());
  f.free(first);
  const AllocResult kept = f.alloc(508'400);   // s = 508,416 (993 * 512), front of the whole 2 MiB block
  const AllocResult third = f.alloc(511'284);  // s = 511,488 (999 * 512), front of the remainder
  REQUIRE((kept.ok() && third.ok()));
  CHECK(f.recorder.count("segment_alloc") == 1);
  CHECK(third.addr == kBase + 508'416);
  const auto blocks = f.layout(kBase);
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].offset == 0);
  CHECK(blocks[0].size_bytes == 508'416);
  CHECK(blocks[0].allocated);
  CHECK(blocks[0].requested_bytes == 508'400);
  CHECK(blocks[1].offset == 508'416);
  CHECK(blocks[1].size_bytes == 511'488);  // [508,416, 1,019,904)
  CHECK(blocks[1].allocated);
  CHECK(blocks[1].requested_bytes == 511'284);
  CHECK(blocks[2].offset == 1'019'904);
  CHECK(blocks[2].size_bytes == 2'097'152 - 1'019'904);  // inactive to the end of the segment
  CHECK_FALSE(blocks[2].allocated);
  check_accounting(f);
}

TEST_CASE("T3: roundup_power2_divisions changes active_bytes growth, not requested_bytes", "[quick][alloc]") {
  const Bytes req = 88'080'384;  // 84 MiB
  SECTION("default: 84 MiB") {
    CachingFixture f;
    REQUIRE(f.alloc(req).ok());
    CHECK(f.stat("active_bytes.all.current") == 88'080'384);
    CHECK(f.stat("requested_bytes.all.current") == 88'080'384);
  }
  SECTION("divisions 4: 96 MiB") {
    CachingFixture f("roundup_power2_divisions:4");
    REQUIRE(f.alloc(req).ok());
    CHECK(f.stat("active_bytes.all.current") == 100'663'296);
    CHECK(f.stat("requested_bytes.all.current") == 88'080'384);
  }
  SECTION("the list table, then a D5 reset") {
    CachingFixture f("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
    REQUIRE(f.alloc(req).ok());  // interval 6: 8 divisions -> 88 MiB
    CHECK(f.stat("active_bytes.all.current") == 92'274'688);
    CHECK(f.stat("requested_bytes.all.current") == 88'080'384);
    REQUIRE(f.alloc(419'430'400).ok());  // interval 8: 2 divisions -> 512 MiB
    CHECK(f.stat("active_bytes.all.current") == 92'274'688 + 536'870'912);
    CHECK(f.stat("requested_bytes.all.current") == 88'080'384 + 419'430'400);
    // _set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40") resets the table (D5).
    // Both earlier blocks stay live, so the next request cannot reuse a cached block: growth is exactly s.
    f.set_settings("garbage_collection_threshold:0.5,max_split_size_mb:40");
    for (std::uint64_t d : f.policy.config().roundup_power2_divisions) {
      CHECK(d == 0);
    }
    const std::int64_t before = f.stat("active_bytes.all.current");
    REQUIRE(f.alloc(req).ok());
    CHECK(f.stat("active_bytes.all.current") - before == 88'080'384);
  }
}

TEST_CASE("T19: roundup_power2_divisions:1 under our documented version (2.5+: 'off')", "[quick][alloc]") {
  // eb42ad6 would hand out an unaligned 1,312,500-byte block; 2.5+ (caching_config.h) rounds to 512:
  // 1,312,500 -> 2,564 * 512 = 1,312,768 (large pool, 20 MiB segment, split).
  CachingFixture f("roundup_power2_divisions:1");
  const AllocResult r = f.alloc(1'312'500);
  REQUIRE(r.ok());
  CHECK(r.block_size_bytes == 1'312'768);
  CHECK(f.stat("allocated_bytes.large_pool.current") == 1'312'768);
  CHECK(f.stat("requested_bytes.large_pool.current") == 1'312'500);
  check_accounting(f);
}

TEST_CASE("T5: a large remainder of <= 1 MiB is not split off", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(2 * kMiB);  // s = 2 MiB, large, 20 MiB segment, split (18 MiB > 1 MiB)
  REQUIRE(a.ok());
  CHECK(a.addr == kBase);
  CHECK(a.block_size_bytes == 2 * kMiB);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 18 * static_cast<std::int64_t>(kMiB));
  const std::int64_t before = f.allocated();
  // 17 MiB + 1 -> s = 17,826,304; remaining 18,874,368 - 17,826,304 = 1,048,064 is not > 1 MiB.
  const AllocResult b = f.alloc(17 * kMiB + 1);
  REQUIRE(b.ok());
  CHECK(b.addr == kBase + 2 * kMiB);
  CHECK(b.block_size_bytes == 18'874'368);
  CHECK(f.allocated() - before == 18'874'368);
  CHECK(f.recorder.count("segment_alloc") == 1);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 0);
  check_accounting(f);
}

TEST_CASE("§3.1 split examples", "[quick][alloc]") {
  SECTION("s = 512 in a fresh small segment") {
    CachingFixture f;
    REQUIRE(f.alloc(1).ok());
    const auto blocks = f.layout(kBase);
    REQUIRE(blocks.size() == 2);
    CHECK((blocks[0].offset == 0 && blocks[0].size_bytes == 512 && blocks[0].allocated));
    CHECK((blocks[1].offset == 512 && blocks[1].size_bytes == 2'096'640 && !blocks[1].allocated));
  }
  SECTION("s = 1,049,088 in a fresh 20 MiB segment") {
    CachingFixture f;
    REQUIRE(f.alloc(1'048'577).ok());
    CHECK(f.recorder.of("segment_alloc").at(0).size_bytes == 20'971'520);
    const auto blocks = f.layout(kBase);
    REQUIRE(blocks.size() == 2);
    CHECK((blocks[0].offset == 0 && blocks[0].size_bytes == 1'049'088));
    CHECK((blocks[1].offset == 1'049'088 && blocks[1].size_bytes == 19'922'432));
  }
  SECTION("s = 2 MiB from a free 3 MiB large block: remaining 1 MiB is not > 1 MiB") {
    CachingFixture f;
    const AllocResult three = f.alloc(3 * kMiB);    // [0, 3 MiB) of a 20 MiB segment
    const AllocResult filler = f.alloc(17 * kMiB);  // the 17 MiB remainder, whole
    REQUIRE((three.ok() && filler.ok()));
    CHECK(filler.addr == kBase + 3 * kMiB);
    f.free(three);
    const AllocResult two = f.alloc(2 * kMiB);
    REQUIRE(two.ok());
    CHECK(two.addr == kBase);
    CHECK(two.block_size_bytes == 3 * kMiB);
    CHECK(f.allocated() == static_cast<std::int64_t>(20 * kMiB));
  }
  SECTION("s = 11 MiB + 512: 12 MiB segment, remaining 1,048,064, no split") {
    CachingFixture f;
    const AllocResult r = f.alloc(11'534'848);
    REQUIRE(r.ok());
    CHECK(r.block_size_bytes == 12'582'912);
    CHECK(f.layout(kBase).size() == 1);
  }
  SECTION("s = 10 MiB exactly: 10 MiB segment, one block") {
    CachingFixture f;
    const AllocResult r = f.alloc(10 * kMiB);
    REQUIRE(r.ok());
    CHECK(r.block_size_bytes == 10 * kMiB);
    CHECK(f.recorder.of("segment_alloc").at(0).size_bytes == 10 * kMiB);
  }
  SECTION("max_split 200 MiB: an oversize request is never split, whatever the remainder") {
    CachingFixture f("max_split_size_mb:200");
    const AllocResult big = f.alloc(310 * kMiB);
    REQUIRE(big.ok());
    f.free(big);
    // s = 300 MiB >= max_split; the 310 MiB block is < 300 + 20 MiB (G5 passes); remaining 10 MiB stays.
    const AllocResult r = f.alloc(300 * kMiB);
    REQUIRE(r.ok());
    CHECK(r.addr == kBase);
    CHECK(r.block_size_bytes == 310 * kMiB);
    CHECK(f.layout(kBase).size() == 1);
  }
}

TEST_CASE("§2.2 G2: best fit takes the smallest fitting size, then the lowest address", "[quick][alloc]") {
  CachingFixture f;
  // Free blocks 3 MiB @X, 5 MiB @Y, 5 MiB @Z (Y < Z), each at the front of its own 20 MiB segment whose rest
  // is held by a live filler (so the blocks cannot merge).
  const AllocResult x = f.alloc(3 * kMiB);    // segment 0 at kBase
  const AllocResult fx = f.alloc(17 * kMiB);  // rest of segment 0
  const AllocResult y = f.alloc(5 * kMiB);    // miss (3 MiB free? no, x is live): segment 1
  const AllocResult fy = f.alloc(15 * kMiB);  // rest of segment 1
  const AllocResult z = f.alloc(5 * kMiB);    // segment 2
  const AllocResult fz = f.alloc(15 * kMiB);  // rest of segment 2
  REQUIRE((x.ok() && fx.ok() && y.ok() && fy.ok() && z.ok() && fz.ok()));
  CHECK(f.recorder.count("segment_alloc") == 3);
  CHECK(y.addr == kBase + 20 * kMiB);
  CHECK(z.addr == kBase + 40 * kMiB);
  f.free(x);
  f.free(y);
  f.free(z);
  const AllocResult four = f.alloc(4 * kMiB);
  REQUIRE(four.ok());
  CHECK(four.addr == y.addr);
  CHECK(four.block_size_bytes == 5 * kMiB);  // remaining 1 MiB is not > 1 MiB: no split
  CHECK(f.recorder.count("segment_alloc") == 3);
  // 5 MiB + 512 (s = 5,243,392) fits no free block (Z is 5,242,880) -> a new 20 MiB segment.
  const AllocResult bigger = f.alloc(5 * kMiB + 512);
  REQUIRE(bigger.ok());
  REQUIRE(f.recorder.count("segment_alloc") == 4);
  CHECK(f.recorder.of("segment_alloc").back().size_bytes == 20'971'520);
  CHECK(bigger.addr == kBase + 60 * kMiB);
  check_accounting(f);
}

TEST_CASE("T6: oversize rules G4/G5 with max_split_size_mb:200", "[quick][alloc]") {
  CachingFixture f("max_split_size_mb:200");
  CHECK(f.stat("max_split_size") == 209'715'200);
  const AllocResult big = f.alloc(300 * kMiB);  // 314,572,800 >= max_split: oversize segment and allocation
  REQUIRE(big.ok());
  CHECK(f.stat("oversize_segments.current") == 1);
  CHECK(f.stat("oversize_allocations.current") == 1);
  f.free(big);
  CHECK(f.stat("oversize_allocations.current") == 0);
  CHECK(f.stat("oversize_allocations.freed") == 1);
  CHECK(f.stat("oversize_segments.current") == 1);  // still cached

  SECTION("290 MiB reuses the 300 MiB block whole (314,572,800 < 304,087,040 + 20 MiB)") {
    const AllocResult r = f.alloc(290 * kMiB);
    REQUIRE(r.ok());
    CHECK(r.addr == big.addr);
    CHECK(r.block_size_bytes == 314'572'800);
    CHECK(f.recorder.count("segment_alloc") == 1);
    CHECK(f.stat("oversize_allocations.current") == 1);
    CHECK(f.stat("oversize_allocations.allocated") == 2);
    CHECK(f.stat("oversize_segments.current") == 1);
    CHECK(f.allocated() == 314'572'800);
  }
  SECTION("250 MiB misses (314,572,800 >= 262,144,000 + 20 MiB) and gets its own segment") {
    const AllocResult r = f.alloc(250 * kMiB);
    REQUIRE(r.ok());
    CHECK(r.addr != big.addr);
    CHECK(r.block_size_bytes == 262'144'000);
    REQUIRE(f.recorder.count("segment_alloc") == 2);
    CHECK(f.recorder.of("segment_alloc")[1].size_bytes == 262'144'000);
    CHECK(f.stat("oversize_segments.current") == 2);
    CHECK(f.stat("oversize_allocations.current") == 1);
  }
  SECTION("100 MiB misses (G4: a normal request never takes an oversize block)") {
    const AllocResult r = f.alloc(100 * kMiB);
    REQUIRE(r.ok());
    CHECK(r.addr != big.addr);
    CHECK(r.block_size_bytes == 104'857'600);
    REQUIRE(f.recorder.count("segment_alloc") == 2);
    CHECK(f.recorder.of("segment_alloc")[1].size_bytes == 104'857'600);
    CHECK(f.stat("oversize_segments.current") == 1);  // 100 MiB < 200 MiB: not oversize
    CHECK(f.stat("oversize_allocations.current") == 0);
  }
  check_accounting(f);
}

TEST_CASE("T7: order sensitivity without expandable segments", "[quick][alloc]") {
  SECTION("8 x 16 MiB, free all, 4 x 32 MiB -> 8 + 4 segments, 256 MiB") {
    CachingFixture f;
    std::vector<AllocResult> small;
    for (int i = 0; i < 8; ++i) {
      small.push_back(f.alloc(16 * kMiB));  // >= 10 MiB: a 16 MiB segment each, no remainder
    }
    for (const AllocResult& r : small) {
      f.free(r);
    }
    for (int i = 0; i < 4; ++i) {
      REQUIRE(f.alloc(32 * kMiB).ok());  // no free block >= 32 MiB
    }
    CHECK(f.stat("segment.all.current") == 12);
    CHECK(f.reserved() == 256 * static_cast<std::int64_t>(kMiB));
    check_accounting(f);
  }
  SECTION("4 x 32 MiB, free all, 8 x 16 MiB -> 4 segments split in two, 128 MiB") {
    CachingFixture f;
    std::vector<AllocResult> big;
    for (int i = 0; i < 4; ++i) {
      big.push_back(f.alloc(32 * kMiB));  // segments at kBase + 32 MiB * i
    }
    for (const AllocResult& r : big) {
      f.free(r);
    }
    // Each 32 MiB block splits (16 MiB remainder > 1 MiB); the next request takes that 16 MiB remainder
    // (smallest fitting), so request i lands at segment i / 2, offset (i % 2) * 16 MiB = kBase + 16 MiB * i.
    for (int i = 0; i < 8; ++i) {
      const AllocResult r = f.alloc(16 * kMiB);
      REQUIRE(r.ok());
      CHECK(r.addr == kBase + 16 * kMiB * static_cast<Bytes>(i));
    }
    CHECK(f.stat("segment.all.current") == 4);
    CHECK(f.reserved() == 128 * static_cast<std::int64_t>(kMiB));
    for (int i = 0; i < 4; ++i) {
      const auto blocks = f.layout(kBase + 32 * kMiB * static_cast<Bytes>(i));
      REQUIRE(blocks.size() == 2);
      CHECK(blocks[0].size_bytes == 16 * kMiB);
      CHECK(blocks[1].size_bytes == 16 * kMiB);
    }
    check_accounting(f);
  }
}

TEST_CASE("T9: the 1 MiB pool boundary", "[quick][alloc]") {
  const char* confs[] = {"", "expandable_segments:True"};
  for (const char* conf : confs) {
    INFO("config '" << conf << "'");
    {
      CachingFixture f(conf, 80 * kGiB);
      const AllocResult a = f.alloc(2 * kMiB);
      REQUIRE(a.ok());
      f.free(a);
      REQUIRE(f.alloc(512 * kKiB).ok());  // small pool: the cached large 20 MiB can't serve it
      CHECK(f.reserved() == 22 * static_cast<std::int64_t>(kMiB));
      CHECK(f.stat("reserved_bytes.large_pool.current") == 20 * static_cast<std::int64_t>(kMiB));
      CHECK(f.stat("reserved_bytes.small_pool.current") == 2 * static_cast<std::int64_t>(kMiB));
      check_accounting(f);
    }
    {
      CachingFixture f(conf, 80 * kGiB);
      const AllocResult a = f.alloc(2 * kMiB);
      REQUIRE(a.ok());
      f.free(a);
      const AllocResult b = f.alloc(2 * kMiB);
      REQUIRE(b.ok());
      CHECK(b.addr == a.addr);
      CHECK(f.reserved() == 20 * static_cast<std::int64_t>(kMiB));
      check_accounting(f);
    }
  }
}

TEST_CASE("M4: blocks of different segments never merge, even at adjacent addresses", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(12 * kMiB);  // 12 MiB segment at kBase
  const AllocResult b = f.alloc(12 * kMiB);  // 12 MiB segment at kBase + 12 MiB: adjacent
  REQUIRE((a.ok() && b.ok()));
  REQUIRE(b.addr == a.addr + 12 * kMiB);
  f.free(a);
  f.free(b);
  CHECK(f.layout(a.addr).size() == 1);
  CHECK(f.layout(b.addr).size() == 1);
  CHECK(f.policy.blocks().free_set(PoolKind::kLarge).size() == 2);
  const AllocResult c = f.alloc(24 * kMiB);  // no free block of 24 MiB exists
  REQUIRE(c.ok());
  CHECK(f.recorder.count("segment_alloc") == 3);
  f.policy.empty_cache();  // both 12 MiB segments go back separately
  CHECK(f.recorder.count("segment_free") == 2);
  check_accounting(f);
}

TEST_CASE("§3.2 M1-M3: free merges with the previous, then the next idle neighbour", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(4 * kMiB);  // [0, 4)
  const AllocResult b = f.alloc(4 * kMiB);  // [4, 8)
  const AllocResult c = f.alloc(4 * kMiB);  // [8, 12), free remainder [12, 20)
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(c.addr == kBase + 8 * kMiB);
  f.free(a);
  f.free(c);  // merges with the 8 MiB tail -> [8, 20)
  auto blocks = f.layout(kBase);
  REQUIRE(blocks.size() == 3);
  CHECK((blocks[2].offset == 8 * kMiB && blocks[2].size_bytes == 12 * kMiB && !blocks[2].allocated));
  CHECK(f.stat("inactive_split.large_pool.current") == 2);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 16 * static_cast<std::int64_t>(kMiB));
  f.free(b);  // absorbs both neighbours: the whole segment is one free block again
  blocks = f.layout(kBase);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].size_bytes == 20 * kMiB);
  CHECK(f.stat("inactive_split.large_pool.current") == 0);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 0);
  check_accounting(f);
}

TEST_CASE("adopt_segment: a pre-existing segment behaves like one the policy created", "[quick][alloc]") {
  // The device already counts the adopted 20 MiB as used (reserved_outside), as a replay's recorded state is.
  SimulatedDevice device(1 * kGiB, 20 * kMiB);
  MemoryStatsObserver stats;
  vramsim::test::RecordingObserver recorder;
  AllocObservers fan;
  fan.add(&stats);
  fan.add(&recorder);
  PyTorchCachingPolicy policy(CachingConfig{}, device, fan);
  const Bytes base = 0x7e0000000000;
  const std::vector<BlockId> ids =
      policy.adopt_segment(base, PoolKind::kLarge, 0, {{4 * kMiB, 4'000'000, true}, {16 * kMiB, 0, false}});
  REQUIRE(ids.size() == 2);
  CHECK(recorder.events.empty());  // adopting emits no events
  CHECK(policy.total_allocated_bytes() == 20 * kMiB);
  const BlockPool& pool = policy.blocks();
  CHECK(pool.block(ids[0]).addr == base);
  CHECK(pool.block(ids[0]).allocated);
  CHECK(pool.block(ids[0]).requested_bytes == 4'000'000);
  CHECK(pool.block(ids[1]).addr == base + 4 * kMiB);
  CHECK(pool.in_free_set(ids[1]));
  CHECK(pool.check_invariants() == "");
  // seed_from: the stats a fresh observer should show for this state (§7.3 counts the free split block).
  stats.seed_from(pool, kUnlimitedSplitSize);
  auto s = stats.flatten();
  CHECK(s.at("reserved_bytes.large_pool.current") == 20 * static_cast<std::int64_t>(kMiB));
  CHECK(s.at("segment.all.current") == 1);
  CHECK(s.at("allocated_bytes.all.current") == 4 * static_cast<std::int64_t>(kMiB));
  CHECK(s.at("requested_bytes.all.current") == 4'000'000);
  CHECK(s.at("inactive_split.large_pool.current") == 1);
  CHECK(s.at("inactive_split_bytes.large_pool.current") == 16 * static_cast<std::int64_t>(kMiB));
  // Freeing the adopted block merges the segment back into one free block.
  policy.free(ids[0], 0);
  s = stats.flatten();
  CHECK(s.at("inactive_split.large_pool.current") == 0);
  CHECK(s.at("inactive_split_bytes.large_pool.current") == 0);
  CHECK(s.at("allocated_bytes.all.current") == 0);
  CHECK(s.at("requested_bytes.all.current") == 0);
  const AllocResult r = policy.allocate(AllocRequest{4 * kMiB, 0, 0});
  REQUIRE(r.ok());
  CHECK(r.addr == base);  // cached memory of the adopted segment is reused
  policy.free(r.block, 0);
  policy.empty_cache();
  REQUIRE(recorder.count("segment_free") == 1);
  CHECK(recorder.of("segment_free")[0].addr == base);
  CHECK(recorder.of("segment_free")[0].size_bytes == 20 * kMiB);
  CHECK(device.used_bytes() == 0);
  CHECK(policy.total_allocated_bytes() == 0);
  CHECK(stats.flatten().at("reserved_bytes.all.current") == 0);
}
