// no-cache (sim/alloc/policies/no_cache.cpp): one cudaMalloc per tensor at the driver's granularity
// (Note [cudaMalloc granularity]): > 1 MiB rounds up to 2 MiB pages, <= 1 MiB to 512 bytes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "policy_rig.h"

using namespace vramsim;
using vramsim::test::PolicyRig;

TEST_CASE("no-cache: 1 MiB + 1 byte costs one 2 MiB segment", "[quick][alloc]") {
  PolicyRig rig("no-cache");
  const AllocResult r = rig.alloc(kMiB + 1);
  REQUIRE(r.ok());
  CHECK(r.block_size_bytes == 2 * kMiB);  // 1 MiB + 1 > 1 MiB -> whole 2 MiB pages: 2 MiB
  CHECK(rig.rec.actions() == std::vector<std::string>{"segment_alloc", "alloc"});
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kMiB);
  CHECK(rig.rec.of("segment_alloc")[0].addr == r.addr);
  CHECK(rig.reserved() == 2 * 1048576);
  CHECK(rig.allocated() == 2 * 1048576);
  CHECK(rig.requested() == 1048577);
  CHECK(rig.device.used_bytes() == 2 * kMiB);
}

TEST_CASE("no-cache: the granularity rule at its edges", "[quick][alloc]") {
  PolicyRig rig("no-cache");
  // (request, bytes charged): 1 -> 512; 1000 -> 1024 (2 x 512); 1 MiB -> 1 MiB (a multiple of 512);
  // 2 MiB -> 2 MiB; 2 MiB + 1 -> 4 MiB; 25 MiB - 7 -> 26 MiB (13 pages).
  const std::vector<std::pair<Bytes, Bytes>> cases = {{1, 512},
                                                      {1000, 1024},
                                                      {kMiB, kMiB},
                                                      {2 * kMiB, 2 * kMiB},
                                                      {2 * kMiB + 1, 4 * kMiB},
                                                      {25 * kMiB - 7, 26 * kMiB}};
  Bytes total = 0;
  for (const auto& [request, charged] : cases) {
    INFO("request " << request);
    const AllocResult r = rig.alloc(request);
    REQUIRE(r.ok());
    CHECK(r.block_size_bytes == charged);
    total += charged;
  }
  CHECK(rig.device.used_bytes() == total);
  CHECK(rig.rec.count("segment_alloc") == cases.size());
  CHECK(rig.invariants() == "");
}

TEST_CASE("no-cache: a free is free_requested, free_completed, segment_free, nothing is cached",
          "[quick][alloc]") {
  PolicyRig rig("no-cache");
  const AllocResult a = rig.alloc(3 * kMiB);
  const AllocResult b = rig.alloc(100);
  rig.rec.clear();
  rig.free(a);
  CHECK(rig.rec.actions() == std::vector<std::string>{"free_requested", "free_completed", "segment_free"});
  CHECK(rig.rec.of("segment_free")[0].addr == a.addr);
  CHECK(rig.rec.of("segment_free")[0].size_bytes == 4 * kMiB);
  CHECK(rig.reserved() == 512);
  CHECK(rig.device.used_bytes() == 512);
  // A second request of the same size is a new cudaMalloc.
  rig.rec.clear();
  rig.alloc(3 * kMiB);
  CHECK(rig.rec.count("segment_alloc") == 1);
  // record_stream does not delay anything: cudaFree synchronises the device.
  rig.policy->record_stream(b.block, 7);
  rig.rec.clear();
  rig.free(b);
  CHECK(rig.rec.count("free_completed") == 1);
  CHECK(rig.rec.count("segment_free") == 1);
  // empty_cache has nothing to release.
  rig.rec.clear();
  rig.policy->empty_cache();
  CHECK(rig.rec.events.empty());
  CHECK(rig.reserved() == 4 * 1048576);
}

TEST_CASE("no-cache: a refused cudaMalloc is an OOM", "[quick][alloc]") {
  PolicyRig rig("no-cache", 4 * kMiB);
  REQUIRE(rig.alloc(3 * kMiB).ok());  // 4 MiB: the whole device
  const AllocResult r = rig.alloc(1);
  CHECK_FALSE(r.ok());
  REQUIRE(rig.rec.ooms.size() == 1);
  CHECK(rig.rec.ooms[0].rounded_bytes == 512);
  CHECK(rig.rec.ooms[0].device_free_bytes == 0);
  CHECK(rig.stats.stats().num_ooms == 1);
}
