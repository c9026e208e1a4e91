// offline-optimal (sim/alloc/policies/offline_optimal.cpp) and its input, RequestSequence
// (sim/alloc/request_sequence.h): a whole sequence planned in advance, greedy by size over lifetimes.
#include <catch2/catch.hpp>

#include "policy_rig.h"
#include "sim/alloc/request_sequence.h"
#include "sim/core/error.h"

using namespace vramsim;
using vramsim::test::PolicyRig;

namespace {

// The hand-drawn example, sizes in MiB, lifetimes in op indices [alloc op, free op):
//
//   op:   0     1     2     3     4     5     6     7
//         A+    B+    A-    C+    B-    D+    C-    D-
//   A 4 MiB  [0, 2)        B 2 MiB  [1, 4)
//   C 4 MiB  [3, 6)        D 2 MiB  [5, 7)
//
// Live bytes after each op: 4, 6, 2, 6, 4, 6, 2, 0 -> peak live 6 MiB.
// Greedy by size (C, A, B, D: equal sizes go longer lifetime first, C's 3 ops before A's 2, B's 3 before D's
// 2):
//   C -> 0.  A: lifetime [0, 2) misses C's [3, 6) -> 0.  B [1, 4) meets A (0-4) and C (0-4) -> 4.
//   D [5, 7) meets C (0-4) only -> 4.  Planned peak = 4 + 2 = 6 MiB = peak live bytes.
RequestSequence hand_drawn() {
  RequestSequence s;
  const std::size_t a = s.add_alloc(4 * kMiB, 0);
  const std::size_t b = s.add_alloc(2 * kMiB, 0);
  s.add_free(a);
  const std::size_t c = s.add_alloc(4 * kMiB, 0);
  s.add_free(b);
  const std::size_t d = s.add_alloc(2 * kMiB, 0);
  s.add_free(c);
  s.add_free(d);
  return s;
}

}  // namespace

TEST_CASE("request sequence: ids, lifetimes and peak live bytes", "[quick][alloc]") {
  const RequestSequence s = hand_drawn();
  CHECK(s.alloc_count() == 4);
  CHECK(s.ops().size() == 8);
  CHECK(s.alloc_op_index(2) == 3);
  CHECK(s.free_op_index(2) == 6);
  CHECK(peak_live_bytes(s) == 6 * kMiB);

  RequestSequence t;
  const std::size_t x = t.add_alloc(100, 0);
  t.add_alloc(28, 1);  // never freed: lives to the end
  t.add_free(x);
  CHECK(t.free_op_index(1) == t.ops().size());
  CHECK(peak_live_bytes(t) == 128);            // requested bytes, not rounded
  CHECK_THROWS_AS(t.add_free(x), InputError);  // freed twice
  CHECK_THROWS_AS(t.add_free(7), InputError);  // never allocated
  CHECK_THROWS_AS(t.add_alloc(0, 0), InputError);
  CHECK(peak_live_bytes(RequestSequence{}) == 0);
}

TEST_CASE("offline-optimal: the hand-drawn example reaches peak live bytes", "[quick][alloc]") {
  const RequestSequence s = hand_drawn();
  PolicyRig rig("offline-optimal");
  rig.policy->plan(s);
  const AllocResult a = rig.alloc(4 * kMiB);
  // One arena of the planned peak, 6 MiB (already a multiple of 2 MiB), at the first allocate.
  REQUIRE(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 6 * kMiB);
  const Bytes base = rig.rec.of("segment_alloc")[0].addr;
  const AllocResult b = rig.alloc(2 * kMiB);
  rig.free(a);
  const AllocResult c = rig.alloc(4 * kMiB);
  rig.free(b);
  const AllocResult d = rig.alloc(2 * kMiB);
  CHECK(a.addr == base);
  CHECK(b.addr == base + 4 * kMiB);
  CHECK(c.addr == base);
  CHECK(d.addr == base + 4 * kMiB);
  CHECK(rig.invariants() == "");
  rig.free(c);
  rig.free(d);
  CHECK(rig.stats.stats().reserved_bytes[kStatAll].peak == static_cast<std::int64_t>(peak_live_bytes(s)));
  CHECK(rig.rec.count("segment_alloc") == 1);
  rig.policy->empty_cache();
  CHECK(rig.device.used_bytes() == 0);
}

TEST_CASE("offline-optimal: the lowest offset between live tensors is used", "[quick][alloc]") {
  // KiB, ops P+ Q+ R+ Q- S+ (0..4): P 8 [0, 5), Q 4 [1, 3), R 2 [2, 5), S 2 [4, 5).
  // Order P, Q, R, S (R before S: longer lifetime).  P -> 0.  Q meets P -> 8.  R meets P (0-8) and
  // Q (8-12) -> 12.  S meets P (0-8) and R (12-14); Q is dead by op 4 -> the gap [8, 12) holds it: S -> 8.
  // Planned peak 14 KiB = peak live bytes (8 + 4 + 2 after op 2).
  RequestSequence s;
  s.add_alloc(8 * kKiB, 0);
  const std::size_t q = s.add_alloc(4 * kKiB, 0);
  s.add_alloc(2 * kKiB, 0);
  s.add_free(q);
  s.add_alloc(2 * kKiB, 0);
  PolicyRig rig("offline-optimal");
  rig.policy->plan(s);
  const AllocResult p_r = rig.alloc(8 * kKiB);
  const AllocResult q_r = rig.alloc(4 * kKiB);
  const AllocResult r_r = rig.alloc(2 * kKiB);
  rig.free(q_r);
  const AllocResult s_r = rig.alloc(2 * kKiB);
  CHECK(q_r.addr == p_r.addr + 8 * kKiB);
  CHECK(r_r.addr == p_r.addr + 12 * kKiB);
  CHECK(s_r.addr == p_r.addr + 8 * kKiB);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kMiB);  // 14 KiB planned, rounded up to 2 MiB
  CHECK(peak_live_bytes(s) == 14 * kKiB);
  CHECK(rig.invariants() == "");
}

TEST_CASE("offline-optimal: tensors planned past what the device gives are OOMs", "[quick][alloc]") {
  const RequestSequence s = hand_drawn();
  PolicyRig rig("offline-optimal", 4 * kMiB);
  rig.policy->plan(s);
  const AllocResult a = rig.alloc(4 * kMiB);  // the device gives a 4 MiB arena, not 6: A at 0 fits
  REQUIRE(a.ok());
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 4 * kMiB);
  CHECK_FALSE(rig.alloc(2 * kMiB).ok());  // B planned at 4 MiB
  CHECK(rig.rec.ooms.size() == 1);
  rig.free(a);
  CHECK(rig.alloc(4 * kMiB).ok());        // C at 0
  CHECK_FALSE(rig.alloc(2 * kMiB).ok());  // D at 4 MiB
  CHECK(rig.rec.ooms.size() == 2);
}

TEST_CASE("offline-optimal: calls that leave the plan are input errors", "[quick][alloc]") {
  PolicyRig rig("offline-optimal");
  CHECK_THROWS_WITH(rig.alloc(4 * kMiB), Catch::Contains("before plan()"));
  rig.policy->plan(hand_drawn());
  CHECK_THROWS_WITH(rig.alloc(5 * kMiB), Catch::Contains("the plan has 4194304"));

  PolicyRig late("offline-optimal");
  late.policy->plan(hand_drawn());
  late.alloc(4 * kMiB);
  late.alloc(2 * kMiB);
  // A is not freed before C, which the plan put on A's memory.
  CHECK_THROWS_WITH(late.alloc(4 * kMiB), Catch::Contains("do not follow the planned sequence"));
}
