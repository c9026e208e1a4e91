// vmm-stitch (sim/alloc/policies/vmm_stitch.cpp): GMLake's stitching of free physical blocks (pBlocks) into
// one new virtual range (sBlock), so that non-adjacent free memory serves one request.
#include <catch2/catch.hpp>

#include "policy_rig.h"

using namespace vramsim;
using vramsim::test::PolicyRig;

TEST_CASE("vmm-stitch: two non-adjacent freed 4 MiB blocks serve one 8 MiB request without new memory",
          "[quick][alloc]") {
  PolicyRig rig("vmm-stitch");
  const AllocResult a = rig.alloc(4 * kMiB);
  const AllocResult b = rig.alloc(4 * kMiB);
  const AllocResult c = rig.alloc(4 * kMiB);
  REQUIRE(rig.rec.count("segment_alloc") == 3);  // three pBlocks, 12 MiB of physical memory
  rig.free(a);
  rig.free(c);  // 8 MiB free, in two pieces that b separates
  const AllocResult s = rig.alloc(8 * kMiB);
  REQUIRE(s.ok());
  CHECK(s.block_size_bytes == 8 * kMiB);
  CHECK(rig.rec.count("segment_alloc") == 3);  // S3: stitched, no new physical memory
  CHECK(rig.device.used_bytes() == 12 * kMiB);
  CHECK(rig.reserved() == 12 * 1048576);
  CHECK(rig.allocated() == 12 * 1048576);  // b + the stitched 8 MiB
  CHECK(s.addr != a.addr);                 // a new virtual range, not either piece's own
  CHECK(s.addr != c.addr);
  CHECK(rig.invariants() == "");
  // Freeing the sBlock gives both pieces back to their pBlocks; empty_cache then returns them.
  rig.free(s);
  CHECK(rig.allocated() == 4 * 1048576);
  rig.policy->empty_cache();
  CHECK(rig.rec.count("segment_free") == 2);
  CHECK(rig.reserved() == 4 * 1048576);
  CHECK(rig.device.used_bytes() == 4 * kMiB);
  rig.free(b);
  rig.policy->empty_cache();
  CHECK(rig.device.used_bytes() == 0);
}

TEST_CASE("vmm-stitch: a single larger free block is split (best fit), not stitched", "[quick][alloc]") {
  PolicyRig rig("vmm-stitch");
  const AllocResult a = rig.alloc(8 * kMiB);
  const AllocResult small_piece = rig.alloc(4 * kMiB);
  rig.free(a);
  rig.free(small_piece);
  // Free: 8 MiB and 4 MiB. A 3 MiB request rounds up to 4 MiB and takes the 4 MiB block exactly (S1).
  const AllocResult r = rig.alloc(3 * kMiB);
  CHECK(r.addr == small_piece.addr);
  CHECK(r.block_size_bytes == 4 * kMiB);
  // 6 MiB: the 8 MiB block, front split off (S2).
  const AllocResult q = rig.alloc(6 * kMiB);
  CHECK(q.addr == a.addr);
  CHECK(q.block_size_bytes == 6 * kMiB);
  CHECK(rig.rec.count("segment_alloc") == 2);
  CHECK(rig.invariants() == "");
}

TEST_CASE("vmm-stitch: too little free memory: a pBlock for the shortfall, stitched with the free ones",
          "[quick][alloc]") {
  PolicyRig rig("vmm-stitch");
  const AllocResult a = rig.alloc(4 * kMiB);
  const AllocResult b = rig.alloc(4 * kMiB);
  rig.free(a);
  rig.rec.clear();
  const AllocResult s = rig.alloc(6 * kMiB);  // S4: 4 MiB free, 2 MiB new
  REQUIRE(s.ok());
  REQUIRE(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kMiB);
  CHECK(rig.device.used_bytes() == 10 * kMiB);
  CHECK(rig.allocated() == 10 * 1048576);
  rig.free(s);
  rig.free(b);
  rig.policy->empty_cache();
  CHECK(rig.device.used_bytes() == 0);
  CHECK(rig.policy->blocks().live_segments_by_address().empty());
}

TEST_CASE("vmm-stitch: small requests use 2 MiB small segments, 512-byte blocks", "[quick][alloc]") {
  PolicyRig rig("vmm-stitch");
  const AllocResult a = rig.alloc(1000);
  const AllocResult b = rig.alloc(kMiB);
  CHECK(a.block_size_bytes == 1024);
  CHECK(b.block_size_bytes == kMiB);
  CHECK(b.addr == a.addr + 1024);
  CHECK(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kMiB);
  CHECK(rig.rec.of("segment_alloc")[0].pool == PoolKind::kSmall);
}

TEST_CASE("vmm-stitch: OOM after releasing what is cached", "[quick][alloc]") {
  PolicyRig rig("vmm-stitch", 8 * kMiB);
  const AllocResult a = rig.alloc(4 * kMiB);
  const AllocResult small = rig.alloc(100);  // a 2 MiB small segment
  const AllocResult tmp = rig.alloc(kMiB);   // same small segment
  rig.free(small);
  rig.free(tmp);
  // 4 MiB requested, 2 MiB left on the device, 2 MiB cached in the now idle small segment: the retry
  // releases that segment, and then the new 4 MiB pBlock fits.
  const AllocResult b = rig.alloc(4 * kMiB);
  CHECK(b.ok());
  CHECK(rig.stats.stats().num_alloc_retries == 1);
  CHECK(rig.rec.count("segment_free") == 1);
  CHECK_FALSE(rig.alloc(2 * kMiB).ok());
  CHECK(rig.rec.ooms.size() == 1);
  rig.free(a);
  CHECK(rig.invariants() == "");
}
