// PyTorchCachingPolicy + MemoryStatsObserver: the §7 statistics (T15, T18 = the §7.6 walk-through, §7.5
// resets), the OOM ladder (§4.1, §4.3, §4.4, §4.6), the 2^60 ceiling and the memory-fraction limit (§4.7,
// T10).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "caching_fixture.h"
#include "sim/alloc/caching_config.h"

using namespace vramsim;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;
using vramsim::test::RecordedEvent;

namespace {
constexpr Bytes kBase = SimulatedDevice::kBaseAddress;
constexpr std::int64_t kMiBi = static_cast<std::int64_t>(kMiB);
}  // namespace

TEST_CASE("T15: malloc(1,024), free, empty_cache", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult a = f.alloc(1'024);
  REQUIRE(a.ok());
  CHECK(f.stat("active_bytes.all.current") == 1'024);
  f.free(a);
  f.policy.empty_cache();
  CHECK(f.stat("active_bytes.all.current") == 0);
  CHECK(f.stat("active_bytes.all.freed") == 1'024);
  CHECK(f.stat("active_bytes.all.allocated") == 1'024);
  CHECK(f.reserved() == 0);
  CHECK(f.stat("reserved_bytes.all.freed") == 2'097'152);
  CHECK(f.stat("num_sync_all_streams") == 1);
  CHECK(f.stat("num_device_free") == 1);
  CHECK(f.recorder.actions().back() == "segment_free");
  CHECK(f.device.used_bytes() == 0);
  check_accounting(f);
}

TEST_CASE("T18: the §7.6 walk-through, every number", "[quick][alloc]") {
  CachingFixture f;
  const Bytes A = kBase;             // first cudaMalloc (2 MiB, small)
  const Bytes B = kBase + 2 * kMiB;  // second cudaMalloc (20 MiB, large)

  // 1. a = malloc(1,000): s = 1,024, small, miss -> 2 MiB segment at A.
  const AllocResult a = f.alloc(1'000);
  REQUIRE(a.ok());
  CHECK(a.addr == A);
  CHECK(f.stat("segment.small_pool.current") == 1);
  CHECK(f.stat("segment.all.current") == 1);
  CHECK(f.stat("reserved_bytes.small_pool.current") == 2'097'152);
  CHECK(f.stat("allocation.all.current") == 1);
  CHECK(f.stat("allocated_bytes.all.current") == 1'024);
  CHECK(f.stat("active_bytes.all.current") == 1'024);
  CHECK(f.stat("requested_bytes.all.current") == 1'000);
  CHECK(f.stat("inactive_split.small_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.small_pool.current") == 2'096'128);
  REQUIRE(f.recorder.events.size() == 2);
  CHECK(f.recorder.events[0].action == "segment_alloc");
  CHECK(f.recorder.events[0].addr == A);
  CHECK(f.recorder.events[0].size_bytes == 2'097'152);
  CHECK(f.recorder.events[1].action == "alloc");
  CHECK(f.recorder.events[1].addr == A);
  CHECK(f.recorder.events[1].size_bytes == 1'000);  // the trace's size is orig
  check_accounting(f);

  // 2. b = malloc(5,000,000): s = 5,000,192, large, miss -> 20 MiB at B; remainder 15,971,328.
  const AllocResult b = f.alloc(5'000'000);
  REQUIRE(b.ok());
  CHECK(b.addr == B);
  CHECK(b.block_size_bytes == 5'000'192);
  CHECK(f.stat("inactive_split.large_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 15'971'328);
  CHECK(f.stat("reserved_bytes.large_pool.current") == 20'971'520);
  check_accounting(f);

  // 3. c = malloc(15,000,000): s = 15,000,064 takes the remainder unsplit (971,264 <= 1 MiB).
  const AllocResult c = f.alloc(15'000'000);
  REQUIRE(c.ok());
  CHECK(c.addr == B + 5'000'192);
  CHECK(c.block_size_bytes == 15'971'328);  // to B + 20 MiB
  CHECK(f.stat("allocated_bytes.large_pool.current") == 20'971'520);
  CHECK(f.stat("inactive_split.large_pool.current") == 0);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 0);
  CHECK(f.stat("requested_bytes.large_pool.current") == 20'000'000);
  check_accounting(f);

  // 4. free(b): no merge (c is next).
  f.free(b);
  CHECK(f.stat("inactive_split.large_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 5'000'192);
  CHECK(f.stat("allocated_bytes.large_pool.current") == 15'971'328);
  check_accounting(f);

  // 5. d = malloc(3,000,000): s = 3,000,320 from b's block, split (remaining 1,999,872 > 1 MiB).
  const AllocResult d = f.alloc(3'000'000);
  REQUIRE(d.ok());
  CHECK(d.addr == B);
  CHECK(d.block_size_bytes == 3'000'320);
  auto blocks = f.layout(B);
  REQUIRE(blocks.size() == 3);
  CHECK((blocks[1].offset == 3'000'320 && blocks[1].size_bytes == 1'999'872 && !blocks[1].allocated));
  CHECK(f.stat("inactive_split.large_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 1'999'872);
  check_accounting(f);

  // 6. free(c): merges with the 1,999,872 free block -> free [B + 3,000,320, +17,971,200).
  f.free(c);
  blocks = f.layout(B);
  REQUIRE(blocks.size() == 2);
  CHECK((blocks[1].offset == 3'000'320 && blocks[1].size_bytes == 17'971'200 && !blocks[1].allocated));
  CHECK(f.stat("inactive_split.large_pool.current") == 1);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 17'971'200);
  check_accounting(f);

  // 7. free(d): the whole 20 MiB segment is one free block.
  f.free(d);
  blocks = f.layout(B);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].size_bytes == 20'971'520);
  CHECK(f.stat("inactive_split.large_pool.current") == 0);
  CHECK(f.stat("inactive_split_bytes.large_pool.current") == 0);
  check_accounting(f);

  // 8. empty_cache(): segment_free(B, 20,971,520); A stays (a is live).
  f.policy.empty_cache();
  const RecordedEvent last = f.recorder.events.back();
  CHECK(last.action == "segment_free");
  CHECK(last.addr == B);
  CHECK(last.size_bytes == 20'971'520);
  CHECK(f.recorder.count("segment_free") == 1);
  CHECK(f.stat("reserved_bytes.all.current") == 2'097'152);
  CHECK(f.stat("segment.all.current") == 1);
  CHECK(f.stat("reserved_bytes.large_pool.freed") == 20'971'520);
  check_accounting(f);

  // Totals implied by SS1 over the walk-through (peaks are maxima of current, only raised on increases):
  // allocated peak after step 3 = 1,024 + 20,971,520; reserved peak = 2 MiB + 20 MiB.
  CHECK(f.stat("allocated_bytes.all.peak") == 20'972'544);
  CHECK(f.stat("reserved_bytes.all.peak") == 23'068'672);
  CHECK(f.stat("allocation.all.allocated") == 4);  // a, b, c, d
  CHECK(f.stat("allocation.all.freed") == 3);      // b, c, d
  CHECK(f.stat("requested_bytes.large_pool.allocated") == 23'000'000);
  CHECK(f.stat("requested_bytes.large_pool.freed") == 23'000'000);
  CHECK(f.stat("num_device_alloc") == 2);
  CHECK(f.stat("num_device_free") == 1);
  CHECK(f.stat("num_sync_all_streams") == 1);
  CHECK(f.stat("num_alloc_retries") == 0);
  CHECK(f.stat("num_ooms") == 0);
  CHECK(f.stat("max_split_size") == -1);
  // The trace order of §8.5.
  const std::vector<std::string> expected = {
      "segment_alloc",  "alloc",          "segment_alloc", "alloc",          "alloc",
      "free_requested", "free_completed", "alloc",         "free_requested", "free_completed",
      "free_requested", "free_completed", "segment_free"};
  CHECK(f.recorder.actions() == expected);

  SECTION("§7.5 reset_peak_memory_stats: peak := current everywhere") {
    f.stats.reset_peak();
    CHECK(f.stat("allocated_bytes.all.peak") == 1'024);
    CHECK(f.stat("reserved_bytes.all.peak") == 2'097'152);
    CHECK(f.stat("reserved_bytes.large_pool.peak") == 0);
    CHECK(f.stat("oversize_allocations.peak") == 0);
    CHECK(f.stat("allocation.all.allocated") == 4);  // accumulated values untouched
    check_accounting(f);
  }
  SECTION("§7.5 reset_accumulated_memory_stats: allocated/freed and the counters := 0") {
    f.stats.reset_accumulated();
    CHECK(f.stat("allocation.all.allocated") == 0);
    CHECK(f.stat("allocation.all.freed") == 0);
    CHECK(f.stat("reserved_bytes.large_pool.freed") == 0);
    CHECK(f.stat("num_device_alloc") == 0);
    CHECK(f.stat("num_device_free") == 0);
    CHECK(f.stat("num_sync_all_streams") == 0);
    CHECK(f.stat("allocated_bytes.all.current") == 1'024);  // currents untouched
    CHECK(f.stat("allocated_bytes.all.peak") == 20'972'544);
    check_accounting(f, /*accumulated_reset=*/true);
  }
}

TEST_CASE("memory_stats key names (SS3)", "[quick][alloc]") {
  CachingFixture f;
  const auto keys = f.stats.flatten();
  for (const char* k :
       {"allocation.all.current", "allocated_bytes.small_pool.peak", "segment.large_pool.freed",
        "active.all.allocated", "inactive_split.all.current", "inactive_split_bytes.all.current",
        "requested_bytes.all.current", "reserved_bytes.large_pool.current", "oversize_allocations.current",
        "oversize_segments.peak", "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
        "num_device_free", "max_split_size"}) {
    INFO(k);
    CHECK(keys.count(k) == 1);
  }
  CHECK(keys.count("allocated.all.current") == 0);  // the docstring's name is wrong (SS3)
}

TEST_CASE("OOM ladder: release_cached_blocks frees whole free segments, then the retry succeeds",
          "[quick][alloc]") {
  CachingFixture f("", 100 * kMiB);
  const AllocResult a = f.alloc(40 * kMiB);  // segment at kBase
  const AllocResult b = f.alloc(40 * kMiB);  // segment at kBase + 40 MiB
  REQUIRE((a.ok() && b.ok()));
  f.free(a);
  f.recorder.clear();
  // 50 MiB: no cached block fits; the device has 20 MiB free -> fail; RA does nothing (no max_split);
  // RC frees a's whole segment; the retry (num_alloc_retries + 1) gets 50 MiB.
  const AllocResult c = f.alloc(50 * kMiB);
  REQUIRE(c.ok());
  CHECK(f.stat("num_alloc_retries") == 1);
  CHECK(f.stat("num_sync_all_streams") == 1);
  CHECK(f.stat("num_ooms") == 0);
  const std::vector<std::string> order = {"segment_free", "segment_alloc", "alloc"};
  CHECK(f.recorder.actions() == order);
  CHECK(f.recorder.events[0].addr == kBase);
  CHECK(f.recorder.events[1].size_bytes == 50 * kMiB);
  CHECK(f.reserved() == 90 * kMiBi);
  check_accounting(f);

  SECTION("then an OOM: counted once, leaves no block, changes nothing else") {
    const auto before = f.stats.flatten();
    const std::size_t events_before = f.recorder.events.size();
    const AllocResult d = f.alloc(20 * kMiB);  // 10 MiB left on the device, nothing cached
    CHECK_FALSE(d.ok());
    CHECK(f.stat("num_ooms") == 1);
    CHECK(f.stat("num_alloc_retries") == 2);
    REQUIRE(f.recorder.ooms.size() == 1);
    CHECK(f.recorder.ooms[0].rounded_bytes == 20 * kMiB);
    CHECK(f.recorder.ooms[0].allocation_bytes == 20 * kMiB);
    CHECK(f.recorder.ooms[0].device_free_bytes == 10 * kMiB);
    CHECK(f.recorder.ooms[0].allowed_bytes == 0);
    CHECK(f.recorder.events.size() == events_before);  // no alloc, no segment event
    CHECK(f.stat("allocation.all.current") == before.at("allocation.all.current"));
    CHECK(f.reserved() == before.at("reserved_bytes.all.current"));
    check_accounting(f);
  }
}

TEST_CASE("O3: segments released by the ladder stay released after an OOM", "[quick][alloc]") {
  CachingFixture f("", 100 * kMiB);
  const AllocResult a = f.alloc(40 * kMiB);
  const AllocResult b = f.alloc(20 * kMiB);
  REQUIRE((a.ok() && b.ok()));
  f.free(b);  // cached whole 20 MiB segment
  // 80 MiB: 40 MiB free on the device -> fail; RC frees b's segment (60 MiB free) -> retry fails -> OOM.
  const AllocResult c = f.alloc(80 * kMiB);
  CHECK_FALSE(c.ok());
  CHECK(f.stat("num_ooms") == 1);
  CHECK(f.stat("num_alloc_retries") == 1);
  CHECK(f.recorder.count("segment_free") == 1);
  CHECK(f.reserved() == 40 * kMiBi);
  CHECK(f.stat("segment.all.current") == 1);
  CHECK(f.live_segments() == 1);
  CHECK(f.device.used_bytes() == 40 * kMiB);
  check_accounting(f);
}

TEST_CASE("RA (§4.3) with max_split_size", "[quick][alloc]") {
  SECTION("RA3: the smallest single oversize block >= the request is freed, no RC retry") {
    CachingFixture f("max_split_size_mb:1024", 4 * kGiB);
    const AllocResult small = f.alloc(1'200 * kMiB);  // oversize (>= 1 GiB)
    const AllocResult large = f.alloc(2'560 * kMiB);
    REQUIRE((small.ok() && large.ok()));
    f.free(small);
    f.free(large);
    // 2 GiB: the 2.5 GiB block is >= s + 20 MiB (G5 miss); the device has 0.25 GiB free -> fail.
    // RA key = max(2 GiB, 1 GiB): the first free block >= 2 GiB is the 2.5 GiB one -> freed -> retry ok.
    const AllocResult r = f.alloc(2 * kGiB);
    REQUIRE(r.ok());
    CHECK(f.stat("num_alloc_retries") == 0);
    CHECK(f.stat("num_sync_all_streams") == 0);
    REQUIRE(f.recorder.count("segment_free") == 1);
    CHECK(f.recorder.of("segment_free")[0].addr == large.addr);
    CHECK(f.layout(small.addr).size() == 1);  // the 1,200 MiB block is still cached
    CHECK(f.stat("oversize_segments.current") == 2);
    check_accounting(f);
  }
  SECTION("RA4: oversize blocks freed from the largest down; a false outcome keeps them released") {
    CachingFixture f("max_split_size_mb:1024", 3 * kGiB);
    const AllocResult one = f.alloc(1'536 * kMiB);
    REQUIRE(one.ok());
    f.free(one);
    // 2 GiB on a device with 1.5 GiB free: no cached block >= 2 GiB; RA4 frees the 1.5 GiB block, released <
    // key -> false; RC finds nothing more; the retry (3 GiB free) succeeds.
    const AllocResult r = f.alloc(2 * kGiB);
    REQUIRE(r.ok());
    CHECK(f.stat("num_alloc_retries") == 1);
    CHECK(f.recorder.count("segment_free") == 1);
    CHECK(f.reserved() == static_cast<std::int64_t>(2 * kGiB));
    check_accounting(f);
  }
  SECTION("T16: OOM with max_split_size_mb:1024 set still reports an OOM") {
    CachingFixture f("max_split_size_mb:1024", 1 * kGiB);
    const AllocResult r = f.alloc(2 * kGiB);
    CHECK_FALSE(r.ok());
    CHECK(f.stat("num_ooms") == 1);
    check_accounting(f);
  }
}

TEST_CASE("the 2^60 ceiling: OOM at once, before anything else", "[quick][alloc]") {
  CachingFixture f;
  const AllocResult keep = f.alloc(4 * kMiB);
  const AllocResult cached = f.alloc(40 * kMiB);
  REQUIRE((keep.ok() && cached.ok()));
  f.free(cached);
  f.recorder.clear();
  const AllocResult r = f.alloc(Bytes{1} << 60);
  CHECK_FALSE(r.ok());
  CHECK(f.stat("num_ooms") == 1);
  CHECK(f.stat("num_alloc_retries") == 0);
  CHECK(f.stat("num_sync_all_streams") == 0);  // no release_cached_blocks ran
  CHECK(f.recorder.events.empty());            // the cached 40 MiB segment was not released
  CHECK(f.recorder.ooms.size() == 1);
  CHECK(f.reserved() == 60 * kMiBi);
  check_accounting(f);
}

TEST_CASE("T10: set_per_process_memory_fraction limits segment creation", "[quick][alloc]") {
  const Bytes total = 8 * kGiB;  // 8,589,934,592
  CachingFixture f("", total);
  const AllocResult tiny = f.alloc(512);  // the already reserved 2 MiB small segment
  REQUIRE(tiny.ok());
  const std::int64_t max_reserved = f.stat("reserved_bytes.all.peak");
  REQUIRE(max_reserved == 2'097'152);
  f.policy.set_memory_fraction(0.5);  // allowed = 4,294,967,296

  // int(0.499 * total) = 4,286,377,361; minus 2 MiB = 4,284,280,209 -> s = 4,284,280,320 ->
  // seg = 2,043 * 2 MiB = 4,284,481,536; 2 MiB + seg = 4,286,578,688 <= 4,294,967,296: succeeds.
  const AllocResult ok = f.alloc(4'286'377'361ULL - static_cast<Bytes>(max_reserved));
  REQUIRE(ok.ok());
  CHECK(ok.block_size_bytes == 4'284'481'536ULL);
  f.free(ok);
  f.policy.empty_cache();
  // int(0.5 * total) = 4 GiB: seg 4 GiB + the 2 MiB small segment > allowed -> OOM, though the device has
  // room.
  const AllocResult too_big = f.alloc(4'294'967'296ULL);
  CHECK_FALSE(too_big.ok());
  CHECK(f.stat("num_ooms") == 1);
  REQUIRE(f.recorder.ooms.size() == 1);
  CHECK(f.recorder.ooms[0].allowed_bytes == 4'294'967'296ULL);
  CHECK(f.recorder.ooms[0].allocation_bytes == 4'294'967'296ULL);
  check_accounting(f);
}

TEST_CASE("B2: the fraction check is strict (equality allowed) and never limits cache reuse",
          "[quick][alloc]") {
  CachingFixture f("", 8 * kGiB);
  f.policy.set_memory_fraction(0.5);  // allowed = 4 GiB
  REQUIRE(f.alloc(512).ok());         // 2 MiB small segment
  // 4 GiB - 2 MiB: total_allocated + seg == allowed exactly -> allowed.
  const AllocResult exact = f.alloc(4 * kGiB - 2 * kMiB);
  REQUIRE(exact.ok());
  CHECK(f.reserved() == static_cast<std::int64_t>(4 * kGiB));
  // A small request served from the cached remainder of the small segment: no limit applies.
  CHECK(f.alloc(512 * kKiB).ok());
  // Any new segment now exceeds the limit, although the device has 4 GiB free.
  CHECK_FALSE(f.alloc(1'048'577).ok());
  CHECK(f.stat("num_ooms") == 1);
  check_accounting(f);
}

TEST_CASE("per_process_memory_fraction as a config key sets the limit at construction", "[quick][alloc]") {
  CachingFixture f("per_process_memory_fraction:0.5", 8 * kGiB);  // allowed = 4 GiB
  CHECK(f.alloc(4 * kGiB).ok());                                  // equality is allowed
  CHECK_FALSE(f.alloc(20 * kMiB).ok());
  CHECK(f.recorder.ooms.at(0).allowed_bytes == 4 * kGiB);
  check_accounting(f);
}

// PyTorch's test/test_cuda.py, TestCuda.test_allocator_memory_fraction_setting: with
// PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.0, 0.5 or 1.0 the process starts and
// get_per_process_memory_fraction reads the value back; -0.1 and 1.1 are refused ("per_process_memory_fraction
// is invalid"). What 0 does is c10/cuda/CUDACachingAllocator.cpp's: the DeviceCachingAllocator constructor calls
// setMemoryFraction(CUDAAllocatorConfig::per_process_memory_fraction()), which for a fraction below 1 sets
// allowed_memory_maximum = size_t(fraction * totalGlobalMem) = 0, so alloc_block refuses every cudaMalloc (and 1
// leaves it unset: no limit).
TEST_CASE("test_allocator_memory_fraction_setting: fraction 0 is accepted and refuses every cudaMalloc",
          "[quick][alloc]") {
  for (const double fraction : {0.0, 0.5, 1.0}) {
    const CachingConfig config =
        parse_alloc_conf(fmt::format("per_process_memory_fraction:{}", fraction), "PYTORCH_CUDA_ALLOC_CONF");
    REQUIRE(config.per_process_memory_fraction.has_value());
    CHECK(*config.per_process_memory_fraction == fraction);
  }
  CHECK_FALSE(parse_alloc_conf("", "x").per_process_memory_fraction.has_value());
  for (const char* bad : {"per_process_memory_fraction:-0.1", "per_process_memory_fraction:1.1"}) {
    CHECK_THROWS_WITH(parse_alloc_conf(bad, "x"), Catch::Contains("per_process_memory_fraction is invalid"));
  }

  CachingFixture zero("per_process_memory_fraction:0", 8 * kGiB);
  CHECK_FALSE(zero.alloc(512).ok());  // even a 2 MiB small segment: 0 + 2 MiB > 0
  CHECK(zero.stat("num_ooms") == 1);
  CHECK(zero.recorder.ooms.at(0).allowed_bytes == 0);
  CHECK(zero.reserved() == 0);
  check_accounting(zero);

  CachingFixture one("per_process_memory_fraction:1", 8 * kGiB);
  CHECK(one.alloc(8 * kGiB).ok());  // the whole device
}
