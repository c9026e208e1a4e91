// observe_memory_timeline: the allocator model over a hand-made generated trace (no segment events: the model
// makes its own, as for predict's traces). Every expected figure is worked out from the spec
// (../shared/spec/pytorch-caching-allocator.md): requests round up to 512 B; <= 1 MiB is the small pool,
// served from 2 MiB segments; a large request under 10 MiB gets a 20 MiB segment; a free block is split off
// when the remainder is over 1 MiB (large pool) or at least 512 B (small pool); freed blocks merge with free
// neighbours.
#include <catch2/catch.hpp>

#include "sim/replay/memory_timeline.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kM = 1 << 20;  // MiB

TraceEvent event(TraceAction action, Bytes addr, std::int64_t size, std::uint32_t category, TimeNs time_ns) {
  TraceEvent e;
  e.action = action;
  e.addr = addr;
  e.size_bytes = static_cast<Bytes>(size);
  e.category_tag = category;
  e.time_ns = time_ns;
  return e;
}

}  // namespace

TEST_CASE("memory timeline: samples, device calls, categories and the segments at the peak", "[replay]") {
  Snapshot s;
  s.source = "hand-made";
  s.has_final_state = false;
  s.strings = {"", "activation", "temporary"};
  s.device_traces.resize(1);
  std::vector<TraceEvent>& ev = s.device_traces[0].events;
  ev.push_back(event(TraceAction::kAlloc, 1, 3 * kM, 1, 10));  // A: 20 MiB segment, A + 17 MiB free
  ev.push_back(event(TraceAction::kAlloc, 2, 1000, 2, 20));    // B: 2 MiB small segment, 1,024 B
  ev.push_back(event(TraceAction::kFreeRequested, 1, 3 * kM, 1, 30));
  ev.push_back(event(TraceAction::kFreeCompleted, 1, 3 * kM, 1, 30));  // A merges: the 20 MiB block is free
  ev.push_back(event(TraceAction::kAlloc, 3, 5 * kM, 1, 40));          // C: 5 MiB + 15 MiB split off

  ReplayOptions o;
  o.device = 0;
  const MemoryTimeline t = observe_memory_timeline(s, o);

  // Samples: alloc A, alloc B, the free (free_requested and its free_completed together), alloc C.
  REQUIRE(t.samples.size() == 4);
  CHECK(t.samples[0].allocated_bytes == 3 * kM);
  CHECK(t.samples[1].allocated_bytes == 3 * kM + 1024);
  CHECK(t.samples[2].allocated_bytes == 1024);
  CHECK(t.samples[3].allocated_bytes == 5 * kM + 1024);
  CHECK(t.samples[3].reserved_bytes == 22 * kM);
  CHECK(t.samples[3].time_ns == 40);
  CHECK(t.peak_sample == 3);

  // Two cudaMallocs (20 MiB for A, 2 MiB for B), caused by events 0 and 1; nothing is freed to the device.
  REQUIRE(t.device_calls.size() == 2);
  CHECK(t.device_calls[0].action == TraceAction::kSegmentAlloc);
  CHECK(t.device_calls[0].size_bytes == 20 * kM);
  CHECK(t.device_calls[0].event_index == 0);
  CHECK(t.device_calls[1].size_bytes == 2 * kM);
  CHECK(t.device_calls[1].event_index == 1);

  // Categories in order of first appearance; requested bytes (unrounded) alive after each sample.
  REQUIRE(t.categories == std::vector<std::string>{"activation", "temporary"});
  CHECK(t.tagged);
  CHECK(t.samples[1].requested_bytes == std::vector<std::int64_t>{3 * kM, 1000});
  CHECK(t.samples[2].requested_bytes == std::vector<std::int64_t>{0, 1000});
  CHECK(t.samples[3].requested_bytes == std::vector<std::int64_t>{5 * kM, 1000});

  // At the peak: the large segment holds C (5 MiB) and a 15 MiB free remainder; the small one B and the rest.
  REQUIRE(t.segments_at_peak.size() == 2);
  Bytes allocated = 0;
  for (const SnapshotSegment& seg : t.segments_at_peak) {
    for (const SnapshotBlock& b : seg.blocks) {
      allocated += b.state == BlockState::kActiveAllocated ? b.size_bytes : 0;
    }
    if (seg.is_small_pool) {
      CHECK(seg.total_size_bytes == 2 * kM);
      REQUIRE(seg.blocks.size() == 2);
      CHECK(seg.blocks[0].size_bytes == 1024);
    } else {
      CHECK(seg.total_size_bytes == 20 * kM);
      REQUIRE(seg.blocks.size() == 2);
      CHECK(seg.blocks[1].size_bytes == 15 * kM);
      CHECK(seg.blocks[1].state == BlockState::kInactive);
    }
  }
  CHECK(allocated == 5 * kM + 1024);
  // The category of each live block, by the block's address in the model (not the trace's allocation ids).
  REQUIRE(t.block_category_at_peak.size() == 2);
  for (const SnapshotSegment& seg : t.segments_at_peak) {
    const std::pair<Bytes, int> want{seg.blocks[0].address,
                                     seg.is_small_pool ? 1 : 0};  // B temporary, C activation
    CHECK(std::find(t.block_category_at_peak.begin(), t.block_category_at_peak.end(), want) !=
          t.block_category_at_peak.end());
  }
}
