// buddy (sim/alloc/policies/buddy.cpp): power-of-two blocks (>= 512 B) in 1 GiB arenas; a freed block merges
// with its buddy; requests larger than an arena get a power-of-two arena of their own.
#include <catch2/catch.hpp>

#include <vector>

#include "policy_rig.h"

using namespace vramsim;
using vramsim::test::BlockView;
using vramsim::test::PolicyRig;

namespace {

// (offset from the arena base in KiB, size in KiB, allocated) for the first blocks of an arena.
struct K {
  Bytes offset_kib;
  Bytes size_kib;
  bool allocated;
};
std::vector<K> first_blocks(const std::vector<BlockView>& views, std::size_t n) {
  std::vector<K> out;
  for (std::size_t i = 0; i < views.size() && i < n; ++i) {
    out.push_back(K{views[i].offset / kKiB, views[i].size_bytes / kKiB, views[i].allocated});
  }
  return out;
}
bool operator==(const K& a, const K& b) {
  return a.offset_kib == b.offset_kib && a.size_kib == b.size_kib && a.allocated == b.allocated;
}
std::ostream& operator<<(std::ostream& os, const K& k) {
  return os << "{" << k.offset_kib << " KiB, " << k.size_kib << " KiB, " << (k.allocated ? "alloc" : "free")
            << "}";
}

}  // namespace

TEST_CASE("buddy: 3 KiB takes a 4 KiB block at the start of a 1 GiB arena", "[quick][alloc]") {
  PolicyRig rig("buddy");
  const AllocResult a = rig.alloc(3 * kKiB);
  REQUIRE(a.ok());
  CHECK(a.block_size_bytes == 4 * kKiB);  // next power of two
  REQUIRE(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == kGiB);
  CHECK(a.addr == rig.rec.of("segment_alloc")[0].addr);
  CHECK(rig.allocated() == 4096);
  CHECK(rig.requested() == 3072);
  // The rest of the arena is free: the buddies 4 KiB @ 4 KiB, 8 KiB @ 8 KiB, ... 512 MiB @ 512 MiB, kept by
  // BlockPool as one maximal run.
  const auto seg = rig.segment_of(a.addr);
  REQUIRE(seg.size() == 2);
  CHECK(seg[1].offset == 4 * kKiB);
  CHECK(seg[1].size_bytes == kGiB - 4 * kKiB);
  CHECK_FALSE(seg[1].allocated);
  CHECK(rig.invariants() == "");
  // 1 byte and 512 bytes both take the 512-byte minimum block.
  CHECK(rig.alloc(1).block_size_bytes == 512);
  CHECK(rig.alloc(512).block_size_bytes == 512);
}

TEST_CASE("buddy: the smallest free buddy node is used, lowest address first", "[quick][alloc]") {
  PolicyRig rig("buddy");
  const AllocResult a = rig.alloc(4 * kKiB);  // [0, 4K)
  const Bytes base = a.addr;
  // Free nodes now: 4K @ 4K, 8K @ 8K, 16K @ 16K, ...  An 8 KiB request takes 8K @ 8K, not the 4 KiB hole.
  const AllocResult c = rig.alloc(8 * kKiB);
  CHECK(c.addr == base + 8 * kKiB);
  // A 4 KiB request takes the 4 KiB buddy of a.
  const AllocResult b = rig.alloc(4 * kKiB);
  CHECK(b.addr == base + 4 * kKiB);
  // 2 KiB: no 2 KiB node is free; the smallest node >= 2 KiB is 16K @ 16K, halved twice: [16K, 18K).
  const AllocResult d = rig.alloc(2 * kKiB);
  CHECK(d.addr == base + 16 * kKiB);
  CHECK(first_blocks(rig.segment_of(base), 6) ==
        std::vector<K>{
            {0, 4, true}, {4, 4, true}, {8, 8, true}, {16, 2, true}, {18, (1ull << 20) - 18, false}});
}

TEST_CASE("buddy: adjacent free blocks that are not buddies do not serve a larger block", "[quick][alloc]") {
  PolicyRig rig("buddy");
  const AllocResult a = rig.alloc(4 * kKiB);  // [0, 4K)
  const AllocResult b = rig.alloc(4 * kKiB);  // [4K, 8K)
  const AllocResult c = rig.alloc(4 * kKiB);  // [8K, 12K)
  const AllocResult d = rig.alloc(4 * kKiB);  // [12K, 16K)
  const Bytes base = a.addr;
  rig.free(b);
  rig.free(c);
  // [4K, 12K) is 8 KiB of free space but two 4 KiB nodes whose buddies (a, d) are live: an 8 KiB request
  // goes to the 16K node.
  const AllocResult e = rig.alloc(8 * kKiB);
  CHECK(e.addr == base + 16 * kKiB);
  // Freeing a merges [0, 4K) with its buddy [4K, 8K) into the 8 KiB node [0, 8K), which serves the next one.
  rig.free(a);
  const AllocResult f = rig.alloc(8 * kKiB);
  CHECK(f.addr == base);
  CHECK(rig.invariants() == "");
  rig.free(f);
  rig.free(d);
  rig.free(e);
  // Everything merged back into the whole arena; empty_cache releases it.
  const auto seg = rig.segment_of(base);
  REQUIRE(seg.size() == 1);
  CHECK(seg[0].size_bytes == kGiB);
  rig.policy->empty_cache();
  CHECK(rig.rec.count("segment_free") == 1);
  CHECK(rig.device.used_bytes() == 0);
}

TEST_CASE("buddy: a request larger than an arena gets its own power-of-two arena", "[quick][alloc]") {
  PolicyRig rig("buddy");
  const AllocResult big = rig.alloc(kGiB + kGiB / 2);  // 1.5 GiB -> 2 GiB
  REQUIRE(big.ok());
  CHECK(big.block_size_bytes == 2 * kGiB);
  REQUIRE(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kGiB);
  rig.free(big);
  rig.policy->empty_cache();
  CHECK(rig.device.used_bytes() == 0);
}

TEST_CASE("buddy: arenas are per stream, and a full device is an OOM", "[quick][alloc]") {
  PolicyRig rig("buddy", kGiB + kGiB / 2);
  const AllocResult a = rig.alloc(kKiB, 0);
  REQUIRE(a.ok());
  CHECK_FALSE(rig.alloc(kKiB, 5).ok());  // stream 5 needs an arena of its own: 1 GiB more does not fit
  CHECK(rig.rec.ooms.size() == 1);
  rig.free(a);
  // The retry releases stream 0's idle arena; then stream 5 gets one.
  CHECK(rig.alloc(kKiB, 5).ok());
  CHECK(rig.rec.count("segment_free") == 1);
}
