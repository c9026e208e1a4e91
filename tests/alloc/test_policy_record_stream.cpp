// record_stream across every registered policy: a block used on another stream is freed (free_requested) at
// once but returned (free_completed) only at complete_stream_events, or at empty_cache's synchronisation
// (Note [Deferred frees] in sim/alloc/policies/policy_support.h). no-cache is the exception by design: its
// cudaFree synchronises the device, so the free completes at once.
#include <catch2/catch.hpp>

#include "policy_rig.h"
#include "sim/alloc/request_sequence.h"

using namespace vramsim;
using vramsim::test::PolicyRig;

TEST_CASE("every policy defers a record_stream'ed free until the stream's work is done", "[quick][alloc]") {
  RequestSequence plan;  // for planning policies: the two allocations below, one after the other
  plan.add_free(plan.add_alloc(3 * kMiB, 0));
  plan.add_free(plan.add_alloc(3 * kMiB, 0));
  for (const PolicyEntry& entry : policy_registry()) {
    INFO("policy " << entry.name);
    const bool completes_at_once = entry.name == "no-cache";
    PolicyRig rig(entry.name);
    rig.policy->plan(plan);

    const AllocResult a = rig.alloc(3 * kMiB);
    REQUIRE(a.ok());
    rig.policy->record_stream(a.block, 9);
    rig.free(a);
    CHECK(rig.rec.count("free_requested") == 1);
    CHECK(rig.allocated() == 0);
    CHECK(rig.invariants() == "");
    if (!completes_at_once) {
      CHECK(rig.rec.count("free_completed") == 0);
      CHECK(rig.stats.stats().active_bytes[kStatAll].current ==
            static_cast<std::int64_t>(a.block_size_bytes));
      rig.policy->complete_stream_events(a.block);
    }
    CHECK(rig.rec.count("free_completed") == 1);
    CHECK(rig.stats.stats().active_bytes[kStatAll].current == 0);
    CHECK(rig.invariants() == "");

    // empty_cache synchronises: a pending free completes there, and the memory can go back.
    const AllocResult b = rig.alloc(3 * kMiB);
    REQUIRE(b.ok());
    rig.policy->record_stream(b.block, 9);
    rig.free(b);
    rig.policy->empty_cache();
    CHECK(rig.rec.count("free_completed") == 2);
    CHECK(rig.reserved() == 0);
    CHECK(rig.device.used_bytes() == 0);
    CHECK(rig.invariants() == "");
  }
}
