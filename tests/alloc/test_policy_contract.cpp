// The IAllocatorPolicy contract (i_allocator_policy.h), checked for every entry of policy_registry():
// requests are served or reported as OOM, live blocks never overlap, bytes are conserved, and freeing
// everything + empty_cache() returns the device to zero reserved. Policies that need a plan
// (PolicyEntry::needs_plan) are given the whole random run first.
#include <catch2/catch.hpp>

#include "test_rng.h"

#include <algorithm>
#include <map>
#include <vector>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/alloc/request_sequence.h"
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

// The random run every policy is put through, drawn before any policy sees it, so that offline policies
// can plan it: ops are allocations (size, stream) and frees of earlier allocations (by id).
struct Script {
  RequestSequence sequence;
  std::vector<int> empty_cache_after;  // op indices after which empty_cache() runs
};
Script random_script(std::uint64_t seed, int steps) {
  Rng rng{seed};
  Script script;
  std::vector<std::size_t> live;
  for (int step = 0; step < steps; ++step) {
    if (live.empty() || rng.below(100) < 55) {
      const Bytes size = 1 + rng.below(Bytes{1} << rng.below(28));
      live.push_back(script.sequence.add_alloc(size, rng.below(2) * 3));
    } else {
      const std::size_t i = rng.below(live.size());
      script.sequence.add_free(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (step % 100 == 99) {
      script.empty_cache_after.push_back(step);
    }
  }
  return script;
}

}  // namespace

TEST_CASE("policy contract: every registered policy", "[quick][alloc]") {
  REQUIRE_FALSE(policy_registry().empty());
  const Script script = random_script(42, 1500);
  const std::vector<RequestOp>& ops = script.sequence.ops();
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
    if (entry.needs_plan) {
      policy->plan(script.sequence);
    }

    struct Live {
      BlockId block;
      Bytes addr;
      Bytes size;
    };
    std::map<std::size_t, Live> live;  // by allocation id; allocations that failed are not here
    std::size_t next_empty_cache = 0;
    int served = 0;
    for (std::size_t step = 0; step < ops.size(); ++step) {
      INFO("step " << step);
      const RequestOp& op = ops[step];
      if (op.kind == RequestOp::Kind::kAlloc) {
        const int ooms_before = oom.ooms;
        const AllocResult r =
            policy->allocate(AllocRequest{op.size_bytes, op.stream, static_cast<TimeNs>(step)});
        if (r.ok()) {
          REQUIRE(r.block_size_bytes >= op.size_bytes);  // served: at least the requested size
          REQUIRE(oom.ooms == ooms_before);
          live.emplace(op.alloc_id, Live{r.block, r.addr, r.block_size_bytes});
          ++served;
        } else {
          REQUIRE(oom.ooms == ooms_before + 1);  // not served: reported through on_oom
        }
      } else if (auto it = live.find(op.alloc_id); it != live.end()) {  // frees of failed allocations skipped
        policy->free(it->second.block, static_cast<TimeNs>(step));
        live.erase(it);
      }
      if (next_empty_cache < script.empty_cache_after.size() &&
          static_cast<int>(step) == script.empty_cache_after[next_empty_cache]) {
        policy->empty_cache();
        ++next_empty_cache;
      }
      // No overlapping live blocks.
      std::vector<std::pair<Bytes, Bytes>> ranges;
      for (const auto& [id, l] : live) {
        ranges.emplace_back(l.addr, l.addr + l.size);
      }
      std::sort(ranges.begin(), ranges.end());
      for (std::size_t k = 1; k < ranges.size(); ++k) {
        REQUIRE(ranges[k - 1].second <= ranges[k].first);
      }
      // Bytes conserved: what the device handed out = what the policy holds = allocated + cached.
      const Held h = held(policy->blocks());
      Bytes live_bytes = 0;
      for (const auto& [id, l] : live) {
        live_bytes += l.size;
      }
      REQUIRE(h.allocated == live_bytes);
      REQUIRE(device.used_bytes() == h.mapped);
      REQUIRE(stats.stats().reserved_bytes[kStatAll].current == static_cast<std::int64_t>(h.mapped));
      REQUIRE(stats.stats().allocated_bytes[kStatAll].current == static_cast<std::int64_t>(live_bytes));
      REQUIRE(policy->blocks().check_invariants() == "");
    }
    CHECK(served > 100);  // the run exercised the policy, not only its OOM path
    for (const auto& [id, l] : live) {
      policy->free(l.block, 0);
    }
    policy->empty_cache();
    CHECK(device.used_bytes() == 0);
    CHECK(stats.stats().reserved_bytes[kStatAll].current == 0);
    CHECK(stats.stats().allocated_bytes[kStatAll].current == 0);
    CHECK(stats.stats().requested_bytes[kStatAll].current == 0);
    CHECK(policy->blocks().live_segments_by_address().empty());
  }
}

TEST_CASE("policy contract: a policy that needs a plan refuses to run without one", "[quick][alloc]") {
  for (const PolicyEntry& entry : policy_registry()) {
    if (!entry.needs_plan) {
      continue;
    }
    INFO("policy " << entry.name);
    SimulatedDevice device;
    MemoryStatsObserver stats;
    auto policy = entry.make(CachingConfig{}, device, stats);
    CHECK_THROWS_AS(policy->allocate(AllocRequest{4096, 0, 0}), InputError);
    CHECK_THROWS_WITH(policy->allocate(AllocRequest{4096, 0, 0}), Catch::Contains("plan"));
    CHECK(device.used_bytes() == 0);
  }
}

TEST_CASE("find_policy rejects unknown names, listing the known ones", "[quick][alloc]") {
  CHECK_THROWS_AS(find_policy("no-such-policy"), InputError);
  CHECK_THROWS_WITH(find_policy("no-such-policy"), Catch::Contains("pytorch"));
  CHECK(find_policy("pytorch").name == "pytorch");
}
