// Streams, record_stream and deferred frees (spec §6, ST1-ST5, T13, T14) and garbage collection (§4.5, T20).
#include <catch2/catch.hpp>

#include "caching_fixture.h"

using namespace vramsim;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;

namespace {
constexpr Bytes kBase = SimulatedDevice::kBaseAddress;
constexpr StreamId kMain = 0;
constexpr StreamId kSide = 7;
}  // namespace

TEST_CASE("ST1: lookups only consider blocks of the requesting stream", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(4 * kMiB, kSide);
  REQUIRE(a.ok());
  f.free(a);  // the whole 20 MiB segment of stream 7 is cached
  const AllocResult b = f.alloc(4 * kMiB, kMain);
  REQUIRE(b.ok());
  CHECK(b.addr != a.addr);
  CHECK(f.recorder.count("segment_alloc") == 2);
  CHECK(f.recorder.of("segment_alloc")[1].stream == kMain);
  // RC frees across all streams (RC4).
  f.free(b);
  f.policy.empty_cache();
  CHECK(f.recorder.count("segment_free") == 2);
  CHECK(f.reserved() == 0);
  check_accounting(f);
}

TEST_CASE("T13: record_stream delays reuse until the other stream's work is done", "[quick][alloc]") {
  CachingFixture f;
  // tmp: 16 bytes on the side stream -> 512-byte block at the front of a small segment of stream 7.
  const AllocResult tmp = f.alloc(16, kSide);
  REQUIRE(tmp.ok());
  f.policy.record_stream(tmp.block, kMain);
  f.free(tmp);  // ST3: allocation drops now, the block stays active until the main stream's event completes
  CHECK(f.stat("allocation.all.current") == 0);
  CHECK(f.stat("allocated_bytes.all.current") == 0);
  CHECK(f.stat("active.all.current") == 1);
  CHECK(f.stat("active_bytes.all.current") == 512);
  CHECK(f.stat("requested_bytes.all.current") == 16);
  CHECK(f.recorder.count("free_requested") == 1);
  CHECK(f.recorder.count("free_completed") == 0);
  auto layout = f.layout(kBase);
  REQUIRE(layout.size() == 2);
  CHECK(layout[0].pending);
  check_accounting(f);

  // While the main stream is busy, a same-size request on the side stream gets another address.
  const AllocResult tmp2 = f.alloc(16, kSide);
  REQUIRE(tmp2.ok());
  CHECK(tmp2.addr != tmp.addr);
  CHECK(tmp2.addr == kBase + 512);
  check_accounting(f);

  // The main stream finishes: the block is really freed (free_completed, active drops) ...
  f.policy.complete_stream_events(tmp.block);
  CHECK(f.recorder.count("free_completed") == 1);
  CHECK(f.recorder.of("free_completed")[0].addr == tmp.addr);
  CHECK(f.stat("active.all.current") == 1);  // tmp2
  CHECK(f.stat("active_bytes.all.current") == 512);
  check_accounting(f);
  // ... and the next same-size request on the side stream gets the original address back.
  const AllocResult tmp3 = f.alloc(16, kSide);
  REQUIRE(tmp3.ok());
  CHECK(tmp3.addr == tmp.addr);
  check_accounting(f);
}

TEST_CASE("ST2/ST4: record_stream on the block's own stream is ignored", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(4 * kMiB, kSide);
  REQUIRE(a.ok());
  f.policy.record_stream(a.block, kSide);
  f.free(a);
  const std::vector<std::string> tail = {"free_requested", "free_completed"};
  const auto actions = f.recorder.actions();
  REQUIRE(actions.size() >= 2);
  CHECK(std::vector<std::string>(actions.end() - 2, actions.end()) == tail);
  CHECK(f.stat("active.all.current") == 0);
  check_accounting(f);
}

TEST_CASE("ST5: empty_cache completes pending frees, then releases whole segments", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(4 * kMiB, kSide);
  REQUIRE(a.ok());
  f.policy.record_stream(a.block, kMain);
  f.policy.record_stream(a.block, 3);
  f.free(a);
  CHECK(f.stat("active_bytes.all.current") == static_cast<std::int64_t>(4 * kMiB));
  check_accounting(f);
  f.policy.empty_cache();
  CHECK(f.recorder.count("free_completed") == 1);
  CHECK(f.recorder.count("segment_free") == 1);
  CHECK(f.stat("active_bytes.all.current") == 0);
  CHECK(f.stat("num_sync_all_streams") == 1);
  CHECK(f.reserved() == 0);
  check_accounting(f);
}

TEST_CASE("pending blocks do not merge, their neighbours merge around them", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(4 * kMiB);  // [0, 4)
  const AllocResult b = f.alloc(4 * kMiB);  // [4, 8), tail [8, 20)
  REQUIRE((a.ok() && b.ok()));
  f.policy.record_stream(b.block, kSide);
  f.free(b);  // pending
  f.free(a);  // its next neighbour is pending: no merge (M1)
  auto layout = f.layout(kBase);
  REQUIRE(layout.size() == 3);
  CHECK((!layout[0].allocated && !layout[0].pending && layout[0].size_bytes == 4 * kMiB));
  CHECK(layout[1].pending);
  check_accounting(f);
  f.policy.complete_stream_events(b.block);  // now b merges with both neighbours
  layout = f.layout(kBase);
  REQUIRE(layout.size() == 1);
  CHECK(layout[0].size_bytes == 20 * kMiB);
  CHECK(f.stat("inactive_split.large_pool.current") == 0);
  check_accounting(f);
}

TEST_CASE("T14: pending frees are completed by the OOM path's release_cached_blocks", "[quick][alloc]") {
  // 40M floats = 160 MiB blocks on a 1 GiB device. y lives on the side stream; each x is used on the side
  // stream (record_stream) and freed, so its free stays pending: no event ever completes by itself.
  CachingFixture f("", 1 * kGiB);
  const Bytes n = 160 * kMiB;
  const AllocResult y = f.alloc(n, kSide);
  REQUIRE(y.ok());
  for (int i = 1; i <= 100; ++i) {
    INFO("iteration " << i);
    const AllocResult x = f.alloc(n, kMain);
    REQUIRE(x.ok());
    f.policy.record_stream(x.block, kSide);
    f.free(x);
  }
  // y + x1..x5 = 960 MiB fit; x6 needs RC (completing x1..x5 and freeing their segments) and a retry. After
  // that, y + x6..x10 fill the device again and x11 retries, and so on: retries at x6, x11, ..., x96 = 19.
  CHECK(f.stat("num_ooms") == 0);
  CHECK(f.stat("num_alloc_retries") == 19);
  CHECK(f.stat("num_sync_all_streams") == 19);
  f.policy.empty_cache();
  CHECK(f.reserved() == static_cast<std::int64_t>(n));  // only y's segment is left
  CHECK(f.stat("active.all.current") == 1);
  check_accounting(f);
}

TEST_CASE("T20 / §4.5: GC frees only whole free segments at least as old as the average", "[quick][alloc]") {
  // Device of 2,000 MiB, fraction 0.5 -> allowed = 1,000 MiB; t = 0.5 -> limit 500 MiB.
  CachingFixture f("garbage_collection_threshold:0.5", 2'000 * kMiB);
  f.policy.set_memory_fraction(0.5);
  // Every large-pool lookup bumps the age counter (G1); the comments give its value after each step.
  const AllocResult p = f.alloc(350 * kMiB);  // counter 1, miss, new 350 MiB segment (total 350)
  REQUIRE(p.ok());
  f.free(p);
  const AllocResult q = f.alloc(340 * kMiB);  // counter 2, hit: split, a 10 MiB remainder (split, never a
  REQUIRE(q.ok());                            // GC candidate) stays free
  const AllocResult x = f.alloc(100 * kMiB);  // counter 3, total 450
  const AllocResult y = f.alloc(100 * kMiB);  // counter 4, total 550
  const AllocResult z = f.alloc(50 * kMiB);  // counter 5; GC runs (550 > 500) but has no candidate; total 600
  REQUIRE((x.ok() && y.ok() && z.ok()));
  CHECK(f.recorder.count("segment_free") == 0);
  // A lookup that only bumps the counter: 5 MiB from the 10 MiB split remainder, freed again (merges back).
  auto bump = [&f](int times) {
    for (int i = 0; i < times; ++i) {
      const AllocResult r = f.alloc(5 * kMiB);
      REQUIRE(r.ok());
      f.free(r);
    }
  };

  SECTION("the spec's example: only the oldest is freed") {
    f.free(x);  // inserted at counter 5
    bump(8);    // counter 13
    f.free(y);  // inserted at 13
    bump(2);    // counter 15
    f.free(z);  // inserted at 15
    // 200 MiB: counter 16, miss. GC: total 600 > 500, target 100 MiB. Ages X 11, Y 3, Z 1 (the spec's 10, 2,
    // 0 shifted by the trigger's own lookup, which always counts): average 5 -> only X (100 MiB) qualifies;
    // reclaimed 100 >= target -> done. Then a new 200 MiB segment: 500 + 200 <= 1,000.
    const AllocResult r = f.alloc(200 * kMiB);
    REQUIRE(r.ok());
    REQUIRE(f.recorder.count("segment_free") == 1);
    CHECK(f.recorder.of("segment_free")[0].addr == x.addr);
    CHECK(f.reserved() == static_cast<std::int64_t>(700 * kMiB));
    CHECK(f.stat("num_alloc_retries") == 0);
    check_accounting(f);
  }
  SECTION("a pass never stops half-way") {
    f.free(x);  // inserted at 5
    bump(2);    // counter 7
    f.free(y);  // inserted at 7
    bump(7);    // counter 14
    f.free(z);  // inserted at 14
    // Trigger at counter 15: ages X 10, Y 8, Z 1, average 19/3 = 6.33. The pass frees X (reaching the target)
    // and still frees Y, which also qualifies. Z stays.
    const AllocResult r = f.alloc(200 * kMiB);
    REQUIRE(r.ok());
    CHECK(f.recorder.count("segment_free") == 2);
    CHECK(f.layout(z.addr).size() == 1);
    CHECK(f.reserved() == static_cast<std::int64_t>(600 * kMiB));
    check_accounting(f);
  }
}

TEST_CASE("GC1: no garbage collection without a memory fraction", "[quick][alloc]") {
  CachingFixture f("garbage_collection_threshold:0.5", 2'000 * kMiB);
  const AllocResult x = f.alloc(600 * kMiB);
  REQUIRE(x.ok());
  f.free(x);
  REQUIRE(f.alloc(700 * kMiB).ok());  // device has room: a new segment, nothing released
  CHECK(f.recorder.count("segment_free") == 0);
  check_accounting(f);
}
