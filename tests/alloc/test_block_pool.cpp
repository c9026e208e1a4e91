// BlockPool mechanism: segments tiled by address-ordered blocks, split/merge, the free sets ordered by
// (stream, size, address) (spec P4, Note [Free-set order]) and check_invariants() (spec M3, §7.4).
#include <catch2/catch.hpp>

#include <vector>

#include "sim/alloc/block_pool.h"

using namespace vramsim;

namespace {

constexpr Bytes kBase = 0x7f0000000000;

struct Key {
  StreamId stream;
  Bytes size_bytes;
  Bytes addr;
  BlockId id;
};

std::vector<Key> keys(const BlockPool& pool, PoolKind kind) {
  std::vector<Key> out;
  for (const Block& b : pool.free_set(kind)) {
    out.push_back(Key{b.stream, b.size_bytes, b.addr, b.id});
  }
  return out;
}

}  // namespace

TEST_CASE("BlockPool: a new segment is one block in no set", "[quick][alloc]") {
  BlockPool pool;
  const SegmentId sid = pool.add_segment(kBase, 2 * kMiB, PoolKind::kSmall, 0, false, 0);
  const Segment& seg = pool.segment(sid);
  CHECK(seg.live);
  CHECK(seg.base == kBase);
  CHECK(seg.size_bytes == 2 * kMiB);
  const Block& b = pool.block(seg.first);
  CHECK(b.addr == kBase);
  CHECK(b.size_bytes == 2 * kMiB);
  CHECK(b.segment == sid);
  CHECK(b.pool == PoolKind::kSmall);
  CHECK(b.mapped);
  CHECK_FALSE(b.is_split());
  CHECK_FALSE(pool.in_free_set(seg.first));
  CHECK(pool.live_block_count() == 1);
  // A free, idle block outside every set is a broken state.
  CHECK(pool.check_invariants() != "");
  pool.insert_free(seg.first);
  CHECK(pool.in_free_set(seg.first));
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("BlockPool: split_front carves the front, the old id keeps the remainder (S4)", "[quick][alloc]") {
  BlockPool pool;
  const SegmentId sid = pool.add_segment(kBase, 2 * kMiB, PoolKind::kSmall, 3, false, 0);
  const BlockId rest = pool.segment(sid).first;
  const BlockId front = pool.split_front(rest, 512);
  CHECK(front != rest);
  CHECK(pool.block(front).addr == kBase);
  CHECK(pool.block(front).size_bytes == 512);
  CHECK(pool.block(front).stream == 3);
  CHECK(pool.block(front).segment == sid);
  CHECK(pool.block(rest).addr == kBase + 512);
  CHECK(pool.block(rest).size_bytes == 2 * kMiB - 512);
  CHECK(pool.block(front).next == rest);
  CHECK(pool.block(rest).prev == front);
  CHECK(pool.block(front).prev == kNoBlock);
  CHECK(pool.segment(sid).first == front);
  CHECK(pool.block(front).is_split());
  CHECK(pool.block(rest).is_split());
  pool.block(front).allocated = true;
  pool.insert_free(rest);
  CHECK(pool.check_invariants() == "");
  CHECK(pool.live_block_count() == 2);
}

TEST_CASE("BlockPool: split_back and merge in both directions", "[quick][alloc]") {
  BlockPool pool;
  const SegmentId sid = pool.add_segment(kBase, 20 * kMiB, PoolKind::kLarge, 0, false, 0);
  const BlockId a = pool.segment(sid).first;
  const BlockId c = pool.split_back(a, 4 * kMiB);  // a = [0, 16 MiB), c = [16, 20)
  CHECK(pool.block(c).addr == kBase + 16 * kMiB);
  CHECK(pool.block(c).size_bytes == 4 * kMiB);
  CHECK(pool.block(a).size_bytes == 16 * kMiB);
  CHECK(pool.block(a).next == c);
  CHECK(pool.block(c).prev == a);
  const BlockId b = pool.split_back(a, 6 * kMiB);  // a = [0, 10), b = [10, 16), c = [16, 20)
  CHECK(pool.block(b).addr == kBase + 10 * kMiB);
  CHECK(pool.block(b).next == c);
  CHECK(pool.block(c).prev == b);

  SECTION("merge with the next neighbour extends the destination") {
    pool.merge(a, b);  // a = [0, 16)
    CHECK(pool.block(a).addr == kBase);
    CHECK(pool.block(a).size_bytes == 16 * kMiB);
    CHECK(pool.block(a).next == c);
    CHECK(pool.block(c).prev == a);
    CHECK(pool.live_block_count() == 2);
  }
  SECTION("merge with the previous neighbour moves the destination's start (M2)") {
    pool.merge(b, a);  // b = [0, 16), now the segment's first block
    CHECK(pool.block(b).addr == kBase);
    CHECK(pool.block(b).size_bytes == 16 * kMiB);
    CHECK(pool.block(b).prev == kNoBlock);
    CHECK(pool.segment(sid).first == b);
    pool.merge(b, c);
    CHECK(pool.block(b).size_bytes == 20 * kMiB);
    CHECK_FALSE(pool.block(b).is_split());
    pool.insert_free(b);
    CHECK(pool.check_invariants() == "");
    pool.erase_free(b);
    pool.remove_segment(sid);
    CHECK(pool.live_segments_by_address().empty());
    CHECK(pool.live_block_count() == 0);
  }
}

TEST_CASE("BlockPool: free set order is (stream, size, address)", "[quick][alloc]") {
  BlockPool pool;
  // Five whole-segment free blocks, inserted in a scrambled order.
  struct Spec {
    Bytes base;
    Bytes size;
    StreamId stream;
  };
  const Spec specs[] = {
      {kBase + 100 * kMiB, 20 * kMiB, 0}, {kBase, 40 * kMiB, 0},
      {kBase + 200 * kMiB, 20 * kMiB, 7}, {kBase + 60 * kMiB, 20 * kMiB, 0},
      {kBase + 300 * kMiB, 2 * kMiB, 7},
  };
  for (const Spec& s : specs) {
    const SegmentId sid = pool.add_segment(s.base, s.size, PoolKind::kLarge, s.stream, false, 0);
    pool.insert_free(pool.segment(sid).first);
  }
  const auto k = keys(pool, PoolKind::kLarge);
  REQUIRE(k.size() == 5);
  // stream 0: 20 MiB @60, 20 MiB @100, 40 MiB @0; then stream 7: 2 MiB @300, 20 MiB @200.
  CHECK((k[0].stream == 0 && k[0].size_bytes == 20 * kMiB && k[0].addr == kBase + 60 * kMiB));
  CHECK((k[1].stream == 0 && k[1].size_bytes == 20 * kMiB && k[1].addr == kBase + 100 * kMiB));
  CHECK((k[2].stream == 0 && k[2].size_bytes == 40 * kMiB && k[2].addr == kBase));
  CHECK((k[3].stream == 7 && k[3].size_bytes == 2 * kMiB && k[3].addr == kBase + 300 * kMiB));
  CHECK((k[4].stream == 7 && k[4].size_bytes == 20 * kMiB && k[4].addr == kBase + 200 * kMiB));
  CHECK(pool.free_set(PoolKind::kSmall).empty());

  // Best fit is the first key >= (stream, size, 0) (G2).
  auto& fs = pool.free_set(PoolKind::kLarge);
  auto it = pool.lower_bound_free(PoolKind::kLarge, 0, 16 * kMiB);
  REQUIRE(it != fs.end());
  CHECK(it->addr == kBase + 60 * kMiB);  // smallest fitting size, lowest address among equals
  it = pool.lower_bound_free(PoolKind::kLarge, 0, 21 * kMiB);
  REQUIRE(it != fs.end());
  CHECK(it->addr == kBase);  // the 40 MiB block
  it = pool.lower_bound_free(PoolKind::kLarge, 0, 41 * kMiB);
  REQUIRE(it != fs.end());
  CHECK(it->stream == 7);  // past stream 0: the caller must treat this as a miss
  it = pool.lower_bound_free(PoolKind::kLarge, 7, 1);
  REQUIRE(it != fs.end());
  CHECK(it->addr == kBase + 300 * kMiB);
  CHECK(pool.lower_bound_free(PoolKind::kLarge, 7, 21 * kMiB) == fs.end());

  // erase_free removes exactly that block.
  const BlockId victim = k[1].id;
  pool.erase_free(victim);
  CHECK_FALSE(pool.in_free_set(victim));
  CHECK(fs.size() == 4);
  CHECK(pool.check_invariants() != "");  // it is still free and idle, so it must be in a set
  pool.insert_free(victim);
  CHECK(pool.check_invariants() == "");
}

TEST_CASE("BlockPool: unmapped ranges go to the unmapped set ordered by (stream, address)",
          "[quick][alloc]") {
  BlockPool pool;
  const SegmentId s1 = pool.add_segment(kBase + 1 * kGiB, 1 * kGiB, PoolKind::kLarge, 0, true, 20 * kMiB);
  const SegmentId s2 = pool.add_segment(kBase, 1 * kGiB, PoolKind::kLarge, 0, true, 20 * kMiB);
  const BlockId b1 = pool.segment(s1).first;
  const BlockId b2 = pool.segment(s2).first;
  CHECK_FALSE(pool.block(b1).mapped);
  CHECK(pool.block(b1).expandable);
  CHECK(pool.segment(s1).expandable);
  CHECK(pool.segment(s1).page_bytes == 20 * kMiB);
  pool.insert_free(b1);
  pool.insert_free(b2);
  CHECK(pool.free_set(PoolKind::kLarge).empty());
  REQUIRE(pool.unmapped_set(PoolKind::kLarge).size() == 2);
  CHECK(pool.unmapped_set(PoolKind::kLarge).begin()->addr == kBase);  // address order
  CHECK(pool.in_free_set(b1));
  CHECK(pool.check_invariants() == "");
  // live_segments_by_address sorts by base, whatever the creation order.
  const auto live = pool.live_segments_by_address();
  REQUIRE(live.size() == 2);
  CHECK(live[0] == s2);
  CHECK(live[1] == s1);
}

TEST_CASE("BlockPool::check_invariants catches broken states", "[quick][alloc]") {
  BlockPool pool;
  const SegmentId sid = pool.add_segment(kBase, 20 * kMiB, PoolKind::kLarge, 0, false, 0);
  const BlockId rest = pool.segment(sid).first;
  const BlockId front = pool.split_front(rest, 4 * kMiB);

  SECTION("two adjacent free blocks that were not merged (M3)") {
    pool.insert_free(front);
    pool.insert_free(rest);
    const std::string why = pool.check_invariants();
    CHECK(why != "");
    CHECK_THAT(why, Catch::Contains("adjacent"));
  }
  SECTION("an allocated block left in the free set") {
    pool.block(front).allocated = true;
    pool.insert_free(front);
    pool.insert_free(rest);
    CHECK(pool.check_invariants() != "");
  }
  SECTION("a pending-free block next to a free block is fine (not free yet)") {
    pool.block(front).event_count = 1;
    pool.insert_free(rest);
    CHECK(pool.check_invariants() == "");
  }
  SECTION("a block whose size no longer tiles the segment") {
    pool.block(front).allocated = true;
    pool.insert_free(rest);
    REQUIRE(pool.check_invariants() == "");
    pool.erase_free(rest);
    pool.block(rest).size_bytes -= 512;  // leaves a 512-byte hole at the end
    pool.insert_free(rest);
    CHECK(pool.check_invariants() != "");
  }
  SECTION("a broken back link") {
    pool.block(front).allocated = true;
    pool.insert_free(rest);
    pool.block(rest).prev = kNoBlock;
    CHECK(pool.check_invariants() != "");
  }
}
