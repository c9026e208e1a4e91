// The IAllocatorPolicy contract (i_allocator_policy.h), checked for every entry of policy_registry():
// requests are served or reported as OOM, live blocks never overlap, bytes are conserved, and freeing
// everything + empty_cache() returns the device to zero reserved.
#include <catch2/catch.hpp>

#include "test_rng.h"

#include <algorithm>
#include <vector>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/core/error.h"
#include "sim/report/memory_stats.h"

using namespace vramsim;

namespace {

struct OomCounter final : IAllocObserver {
  int ooms = 0;
  void on_oom(const OomInfo&) override { ++ooms; }
};

using vramsim::test::Rng;

// Bytes held by the policy's segments, counted from its blocks: mapped bytes, and mapped bytes in live
// blocks.
struct Held {
  Bytes mapped = 0;
  Bytes allocated = 0;
};
Held held(const BlockPool& pool) {
  Held h;
  for (SegmentId sid : pool.live_segments_by_address()) {
    for (BlockId id = pool.segment(sid).first; id != kNoBlock; id = pool.block(id).next) {
      const Block& b = pool.block(id);
      if (b.mapped) {
        h.mapped += b.size_bytes;
        if (b.allocated) {
          h.allocated += b.size_bytes;
        }
      }
    }
  }
  return h;
}

}  // namespace

TEST_CASE("policy contract: every registered policy", "[quick][alloc]") {
  REQUIRE_FALSE(policy_registry().empty());
  for (const PolicyEntry& entry : policy_registry()) {
    INFO("policy " << entry.name);
    CHECK(&find_policy(entry.name) == &entry);
    SimulatedDevice device(2 * kGiB);
    MemoryStatsObserver stats;
    OomCounter oom;
    AllocObservers fan;
    fan.add(&stats);
    fan.add(&oom);
    auto policy = entry.make(CachingConfig{}, device, fan);
    REQUIRE(policy != nullptr);
    CHECK_FALSE(policy->name().empty());

    Rng rng{42};
    struct Live {
      BlockId block;
      Bytes addr;
      Bytes size;
      Bytes requested;
    };
    std::vector<Live> live;
    for (int step = 0; step < 1500; ++step) {
      INFO("step " << step);
      if (live.empty() || rng.below(100) < 55) {
        const Bytes size = 1 + rng.below(Bytes{1} << rng.below(28));
        const int ooms_before = oom.ooms;
        const AllocResult r = policy->allocate(AllocRequest{size, rng.below(2) * 3, step});
        if (r.ok()) {
          REQUIRE(r.block_size_bytes >= size);  // served: at least the requested size
          REQUIRE(oom.ooms == ooms_before);
          live.push_back({r.block, r.addr, r.block_size_bytes, size});
        } else {
          REQUIRE(oom.ooms == ooms_before + 1);  // not served: reported through on_oom
        }
      } else {
        const std::size_t i = rng.below(live.size());
        policy->free(live[i].block, step);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (step % 100 == 99) {
        policy->empty_cache();
      }
      // No overlapping live blocks.
      std::vector<std::pair<Bytes, Bytes>> ranges;
      for (const Live& l : live) {
        ranges.emplace_back(l.addr, l.addr + l.size);
      }
      std::sort(ranges.begin(), ranges.end());
      for (std::size_t k = 1; k < ranges.size(); ++k) {
        REQUIRE(ranges[k - 1].second <= ranges[k].first);
      }
      // Bytes conserved: what the device handed out = what the policy holds = allocated + cached.
      const Held h = held(policy->blocks());
      Bytes live_bytes = 0;
      for (const Live& l : live) {
        live_bytes += l.size;
      }
      REQUIRE(h.allocated == live_bytes);
      REQUIRE(device.used_bytes() == h.mapped);
      REQUIRE(stats.stats().reserved_bytes[kStatAll].current == static_cast<std::int64_t>(h.mapped));
      REQUIRE(stats.stats().allocated_bytes[kStatAll].current == static_cast<std::int64_t>(live_bytes));
      REQUIRE(policy->blocks().check_invariants() == "");
    }
    for (const Live& l : live) {
      policy->free(l.block, 0);
    }
    policy->empty_cache();
    CHECK(device.used_bytes() == 0);
    CHECK(stats.stats().reserved_bytes[kStatAll].current == 0);
    CHECK(stats.stats().allocated_bytes[kStatAll].current == 0);
    CHECK(policy->blocks().live_segments_by_address().empty());
  }
}

TEST_CASE("find_policy rejects unknown names, listing the known ones", "[quick][alloc]") {
  CHECK_THROWS_AS(find_policy("no-such-policy"), InputError);
  CHECK_THROWS_WITH(find_policy("no-such-policy"), Catch::Contains("pytorch"));
  CHECK(find_policy("pytorch").name == "pytorch");
}
