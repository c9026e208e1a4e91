// Replaying snapshots recorded with expandable_segments:True (issue 11, section 1). Every trace below is
// hand-made from the spec's rules (§5, E1-E9) and every expected number is worked out in the comments; none
// comes from the code under test. R = 0x7f0000000000 is the recorded reservation's base; large-pool pages are
// 20 MiB (E1).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "sim/core/error.h"
#include "sim/replay/trace_replay.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kMi = 1048576;  // for the signed statistics; Bytes fields use kMiB

std::string divergence_text(const ReplayResult& r) {
  return r.check.first_divergence
             ? std::to_string(r.check.first_divergence->event_index) + ": " +
                   r.check.first_divergence->expected + " / " + r.check.first_divergence->got
             : "";
}

// The worked example of spec §5 (T8): 8 x 16 MiB allocations map one 20 MiB page each time the free tail is
// short, at R+0, +20, +40, +60, (none), +80, +100, +120 MiB: cumulative 20, 40, 60, 80, 80, 100, 120, 140
// MiB; the blocks sit at R+0, +16, ..., +112 MiB (E2, E3, E5). Free all: one free block of 140 MiB (M1). 4 x
// 32 MiB then fit without mapping at R+0, +32, +64, +96 MiB. Freeing the last one merges [R+96, R+140) free;
// the empty_cache that follows unmaps the whole pages inside it, [R+100, R+140) = 40 MiB, and keeps the
// partial page piece [R+96, R+100) as a free mapped block (E8). The final snapshot shows one segment of 100
// MiB (E9).
constexpr const char* kClosedWorld = R"(vramsim-trace 1
devices 1
final_state yes
settings.expandable_segments 1
segment 0 0x7f0000000000 104857600 0 large 1 0 0
block 0x7f0000000000 33554432 33554432 allocated
block 0x7f0002000000 33554432 33554432 allocated
block 0x7f0004000000 33554432 33554432 allocated
block 0x7f0006000000 4194304 0 inactive
0 segment_map 0x7f0000000000 20971520 0 0
0 alloc 0x7f0000000000 16777216 0 0
0 segment_map 0x7f0001400000 20971520 0 0
0 alloc 0x7f0001000000 16777216 0 0
0 segment_map 0x7f0002800000 20971520 0 0
0 alloc 0x7f0002000000 16777216 0 0
0 segment_map 0x7f0003c00000 20971520 0 0
0 alloc 0x7f0003000000 16777216 0 0
0 alloc 0x7f0004000000 16777216 0 0
0 segment_map 0x7f0005000000 20971520 0 0
0 alloc 0x7f0005000000 16777216 0 0
0 segment_map 0x7f0006400000 20971520 0 0
0 alloc 0x7f0006000000 16777216 0 0
0 segment_map 0x7f0007800000 20971520 0 0
0 alloc 0x7f0007000000 16777216 0 0
0 free_requested 0x7f0000000000 16777216 0 0
0 free_completed 0x7f0000000000 16777216 0 0
0 free_requested 0x7f0001000000 16777216 0 0
0 free_completed 0x7f0001000000 16777216 0 0
0 free_requested 0x7f0002000000 16777216 0 0
0 free_completed 0x7f0002000000 16777216 0 0
0 free_requested 0x7f0003000000 16777216 0 0
0 free_completed 0x7f0003000000 16777216 0 0
0 free_requested 0x7f0004000000 16777216 0 0
0 free_completed 0x7f0004000000 16777216 0 0
0 free_requested 0x7f0005000000 16777216 0 0
0 free_completed 0x7f0005000000 16777216 0 0
0 free_requested 0x7f0006000000 16777216 0 0
0 free_completed 0x7f0006000000 16777216 0 0
0 free_requested 0x7f0007000000 16777216 0 0
0 free_completed 0x7f0007000000 16777216 0 0
0 alloc 0x7f0000000000 33554432 0 0
0 alloc 0x7f0002000000 33554432 0 0
0 alloc 0x7f0004000000 33554432 0 0
0 alloc 0x7f0006000000 33554432 0 0
0 free_requested 0x7f0006000000 33554432 0 0
0 free_completed 0x7f0006000000 33554432 0 0
0 segment_unmap 0x7f0006400000 41943040 0 0
)";

// The OOM ladder under expandable segments (§4.1, E4, E8). A = 10 MiB maps [R, R+20) (E3). B = 30 MiB starts
// at the free tail [R+10, R+20) and maps one more page [R+20, R+40) (E2: free block + unmapped range); B
// fills [R+10, R+40) exactly. Free B: [R+10, R+40) free. C = 50 MiB misses the cache; E2 picks the free 30
// MiB + the unmapped range after it and asks for one page at R+40 MiB: the GPU refused (no trace entry). The
// ladder's release_cached_blocks unmaps the whole page inside the free block, [R+20, R+40) (E8), keeping
// [R+10, R+20) as a free mapped piece; the retry asks for 2 pages at R+20 MiB (50 - 10 = 40 MiB), refused
// too: oom for 50 MiB. Afterwards D = 5 MiB fits the free piece at R+10 MiB without mapping.
constexpr const char* kUnmapThenOom = R"(vramsim-trace 1
devices 1
final_state yes
settings.expandable_segments 1
segment 0 0x7f0000000000 20971520 0 large 1 0 0
block 0x7f0000000000 10485760 10485760 allocated
block 0x7f0000a00000 5242880 5242880 allocated
block 0x7f0000f00000 5242880 0 inactive
0 segment_map 0x7f0000000000 20971520 0 0
0 alloc 0x7f0000000000 10485760 0 0
0 segment_map 0x7f0001400000 20971520 0 0
0 alloc 0x7f0000a00000 31457280 0 0
0 free_requested 0x7f0000a00000 31457280 0 0
0 free_completed 0x7f0000a00000 31457280 0 0
0 segment_unmap 0x7f0001400000 20971520 0 0
0 oom 1048576 52428800 0 0
0 alloc 0x7f0000a00000 5242880 0 0
)";

}  // namespace

TEST_CASE("expandable closed world: the worked example of spec E1-E5 and an E8 unmap", "[quick][replay]") {
  const Snapshot snapshot = read_vtrace(kClosedWorld, "closed_world.vtrace");
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  INFO(divergence_text(r));
  CHECK(r.policy == "pytorch-expandable");
  CHECK_FALSE(r.starts_mid_run);  // every mapped page of the final state was mapped in the trace
  CHECK(r.check.segment_events_recorded == 8);  // 7 segment_map + 1 segment_unmap
  CHECK(r.check.segment_events_matched == 8);
  CHECK(r.check.model_segment_events == 8);
  CHECK(r.check.allocs_recorded == 12);
  CHECK(r.check.allocs_same_offset == 12);
  CHECK(r.check.final_segments_recorded == 1);
  CHECK(r.check.final_segments_matched == 1);
  CHECK(r.check.final_blocks_matched == 4);
  CHECK(r.check.identical(r.peaks));
  CHECK(r.peaks.peak_reserved_bytes == 140 * kMi);  // T8
  CHECK(r.stats.reserved_bytes[kStatAll].current == 100 * kMi);
  CHECK(r.stats.num_device_alloc == 7);        // T8: one per map call
  CHECK(r.stats.num_device_free == 1);         // E8: one per unmap call
  CHECK(r.stats.segment[kStatAll].peak == 0);  // E3: expandable memory is not counted in `segment`
}

TEST_CASE("expandable closed world: --check reports a model that maps elsewhere", "[quick][replay]") {
  // The same recording with the first allocation (and its free) 24 MiB instead of 16 MiB: the trace still
  // undoes cleanly, but the model must map ceil(24 / 20) = 2 pages = 40 MiB where the recording mapped one
  // (E3): a mismatch at event 0.
  std::string text = kClosedWorld;
  for (const char* line : {"0 alloc 0x7f0000000000 16777216", "0 free_requested 0x7f0000000000 16777216",
                           "0 free_completed 0x7f0000000000 16777216"}) {
    std::string from = line;
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at + from.size() - 8, 8, "25165824");
  }
  const ReplayResult r = replay_snapshot(read_vtrace(text, "closed_world_bad.vtrace"), ReplayOptions{});
  REQUIRE(r.check.first_divergence);
  CHECK(r.check.first_divergence->event_index == 0);
  CHECK_FALSE(r.check.identical(r.peaks));
}

TEST_CASE("expandable OOM ladder: the refused map, the E8 unmap, then the recorded oom", "[quick][replay]") {
  const ReplayResult r = replay_snapshot(read_vtrace(kUnmapThenOom, "unmap_oom.vtrace"), ReplayOptions{});
  INFO(divergence_text(r));
  CHECK_FALSE(r.starts_mid_run);
  CHECK(r.check.segment_events_recorded == 3);  // 2 segment_map + 1 segment_unmap
  CHECK(r.check.segment_events_matched == 3);
  CHECK(r.check.allocs_recorded == 3);
  CHECK(r.check.allocs_same_offset == 3);
  CHECK(r.check.ooms_recorded == 1);
  CHECK(r.check.identical(r.peaks));  // includes: the oom entry met a model OOM at the same event
  CHECK(r.stats.num_ooms == 1);
  CHECK(r.stats.num_alloc_retries == 1);     // §4.1: one release_cached_blocks + retry
  CHECK(r.recorded_failures_followed == 2);  // the 20 MiB map and the 40 MiB map of the retry
  CHECK(r.stats.num_device_alloc == 2);
  CHECK(r.stats.num_device_free == 1);
  CHECK(r.peaks.peak_reserved_bytes == 40 * kMi);
  CHECK(r.stats.reserved_bytes[kStatAll].current == 20 * kMi);
  // Both refusals asked for 60 MiB in all (40 mapped + 20; 20 mapped + 40): the device had less than that.
  CHECK(r.inferred_capacity_below_bytes == 60 * kMiB);
}

TEST_CASE("expandable: an oom entry the model does not reach is a divergence", "[quick][replay]") {
  // The same recording without the segment_unmap: the model's ladder still unmaps [R+20, R+40) (E8), a call
  // with no recorded counterpart, so --check must not call the replay identical.
  std::string text = kUnmapThenOom;
  const std::string unmap = "0 segment_unmap 0x7f0001400000 20971520 0 0\n";
  const auto at = text.find(unmap);
  REQUIRE(at != std::string::npos);
  text.erase(at, unmap.size());
  // Without the unmap, [R+20, R+40) stays mapped in the recording: its final segment is 40 MiB, with the
  // free tail [R+15, R+40) = 25 MiB.
  const std::string seg = "segment 0 0x7f0000000000 20971520 0 large 1 0 0";
  text.replace(text.find(seg), seg.size(), "segment 0 0x7f0000000000 41943040 0 large 1 0 0");
  const std::string tail = "block 0x7f0000f00000 5242880 0 inactive";
  text.replace(text.find(tail), tail.size(), "block 0x7f0000f00000 26214400 0 inactive");
  const ReplayResult r = replay_snapshot(read_vtrace(text, "oom_no_unmap.vtrace"), ReplayOptions{});
  REQUIRE(r.check.first_divergence);
  CHECK_FALSE(r.check.identical(r.peaks));
}

TEST_CASE("expandable: a segment_map whose pages are not mapped at the end is an input error",
          "[quick][replay]") {
  // The final state shows [R, R+20) mapped, but the trace maps [R+20, R+40) and never unmaps it: the undo has
  // no mapped pages to take back (spec §8.7: the state at event i is the final one with later events undone).
  const Snapshot snapshot = read_vtrace(R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 20971520 0 large 1 0 0
block 0x7f0000000000 20971520 0 inactive
0 segment_map 0x7f0001400000 20971520 0 0
)",
                                        "bad_map.vtrace");
  CHECK_THROWS_WITH(replay_snapshot(snapshot, ReplayOptions{}),
                    Catch::Contains("bad_map.vtrace: device_traces[0][0]: segment_map of 0x7f0001400000"));
}

namespace {

// Two devices in one file. Device 0 uses cudaMalloc segments: 5 MiB -> one 20 MiB segment (§1.4), kept live.
// Device 1 uses expandable segments: 5 MiB maps one 20 MiB page at R; 18 MiB then maps one more page
// (15 MiB free < 18 MiB) and takes [R+5, R+23) (spec §5, second worked example). Each trace replays on its
// own.
constexpr const char* kTwoDevices = R"(vramsim-trace 1
devices 2
final_state yes
segment 0 0x7e0000000000 20971520 0 large 0 0 0
block 0x7e0000000000 5242880 5242880 allocated
block 0x7e0000500000 15728640 0 inactive
segment 1 0x7f0000000000 41943040 0 large 1 0 0
block 0x7f0000000000 5242880 5242880 allocated
block 0x7f0000500000 18874368 18874368 allocated
block 0x7f0001700000 17825792 0 inactive
0 segment_alloc 0x7e0000000000 20971520 0 0
0 alloc 0x7e0000000000 5242880 0 0
1 segment_map 0x7f0000000000 20971520 0 0
1 alloc 0x7f0000000000 5242880 0 0
1 segment_map 0x7f0001400000 20971520 0 0
1 alloc 0x7f0000500000 18874368 0 0
)";

}  // namespace

TEST_CASE("two devices in one file: each device's trace replays on its own", "[quick][replay]") {
  const Snapshot snapshot = read_vtrace(kTwoDevices, "two_devices.vtrace");
  ReplayOptions options;
  options.device = 0;
  const ReplayResult r0 = replay_snapshot(snapshot, options);
  INFO(divergence_text(r0));
  CHECK(r0.device == 0);
  CHECK(r0.check.segment_events_recorded == 1);
  CHECK(r0.check.segment_events_matched == 1);
  CHECK(r0.check.final_segments_recorded == 1);  // only device 0's segment is compared
  CHECK(r0.check.identical(r0.peaks));
  CHECK(r0.peaks.peak_reserved_bytes == 20 * kMi);

  options.device = 1;
  const ReplayResult r1 = replay_snapshot(snapshot, options);
  INFO(divergence_text(r1));
  CHECK(r1.device == 1);
  CHECK(r1.policy == "pytorch-expandable");
  CHECK(r1.check.segment_events_recorded == 2);
  CHECK(r1.check.segment_events_matched == 2);
  CHECK(r1.check.allocs_same_offset == 2);
  CHECK(r1.check.final_blocks_matched == 3);  // 5 MiB, 18 MiB, free tail of 17 MiB at R+23 MiB
  CHECK(r1.check.identical(r1.peaks));
  CHECK(r1.peaks.peak_reserved_bytes == 40 * kMi);

  options.device = 2;
  CHECK_THROWS_WITH(
      replay_snapshot(snapshot, options),
      Catch::Contains("--device 2: two_devices.vtrace has no trace for that device; devices with "
                      "a trace: 0, 1"));
}

namespace {

// Mid-run, pages mapped before the trace. Before the trace: A = 30 MiB at R in the mapped pages [R, R+40),
// free tail [R+30, R+40). In the trace: B = 25 MiB misses the cache (10 < 25), starts at the free tail and
// maps one page at R+40 MiB (E2, E3): B = [R+30, R+55), free tail [R+55, R+60). A is freed: [R, R+30) free.
// The empty_cache unmaps the one whole page inside it, [R, R+20) (E8), keeps [R+20, R+30) free and mapped,
// and leaves [R+55, R+60) alone (no whole page). The final snapshot: one segment [R+20, R+60) (E9). Undoing
// the trace from it: the unmap maps [R, R+20) back (merging with [R+20, R+60)), the map takes [R+40, R+60)
// away: [R, R+40) = 40 MiB mapped at trace start, A (born before the trace, freed in it) sized round_size(30
// MiB) = 30 MiB.
constexpr const char* kMidRun = R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0001400000 41943040 0 large 1 0 0
block 0x7f0001400000 10485760 0 inactive
block 0x7f0001e00000 26214400 26214400 allocated
block 0x7f0003700000 5242880 0 inactive
0 segment_map 0x7f0002800000 20971520 0 0
0 alloc 0x7f0001e00000 26214400 0 0
0 free_requested 0x7f0000000000 31457280 0 0
0 free_completed 0x7f0000000000 31457280 0 0
0 segment_unmap 0x7f0000000000 20971520 0 0
)";

// Mid-run with a hole unmapped before the trace: X = 20 MiB at R and Y = 20 MiB at R+40 MiB, [R+20, R+40)
// unmapped (two snapshot segments then). Z = 10 MiB finds no free block and maps the lowest hole first, one
// page at R+20 MiB (E2), not past Y: Z = [R+20, R+30), free [R+30, R+40). The final snapshot shows one run
// [R, R+60) of 4 blocks (E9).
constexpr const char* kMidRunHole = R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 62914560 0 large 1 0 0
block 0x7f0000000000 20971520 20971520 allocated
block 0x7f0001400000 10485760 10485760 allocated
block 0x7f0001e00000 10485760 0 inactive
block 0x7f0002800000 20971520 20971520 allocated
0 segment_map 0x7f0001400000 20971520 0 0
0 alloc 0x7f0001400000 10485760 0 0
)";

}  // namespace

TEST_CASE("expandable mid-run: pages mapped before the trace are rebuilt by undoing map / unmap",
          "[quick][replay]") {
  SECTION("map, free, E8 unmap") {
    const ReplayResult r = replay_snapshot(read_vtrace(kMidRun, "mid_run.vtrace"), ReplayOptions{});
    INFO(divergence_text(r));
    CHECK(r.policy == "pytorch-expandable");  // no allocator_settings: taken from is_expandable
    CHECK(r.starts_mid_run);
    CHECK(r.reserved_at_start_bytes == 40 * kMiB);
    CHECK(r.guessed_block_sizes == 1);  // A
    CHECK(r.check.segment_events_recorded == 2);
    CHECK(r.check.segment_events_matched == 2);
    CHECK(r.check.allocs_same_offset == 1);
    CHECK(r.check.final_blocks_recorded == 3);
    CHECK(r.check.final_blocks_matched == 3);
    CHECK(r.check.identical(r.peaks));
    CHECK(r.peaks.peak_reserved_bytes == 60 * kMi);
    CHECK(r.stats.reserved_bytes[kStatAll].current == 40 * kMi);
    CHECK(r.stats.num_device_alloc == 1);
    CHECK(r.stats.num_device_free == 1);
  }
  SECTION("the hole unmapped before the trace is mapped first (E2)") {
    const ReplayResult r = replay_snapshot(read_vtrace(kMidRunHole, "hole.vtrace"), ReplayOptions{});
    INFO(divergence_text(r));
    CHECK(r.starts_mid_run);
    CHECK(r.reserved_at_start_bytes == 40 * kMiB);  // [R, R+20) and [R+40, R+60)
    CHECK(r.guessed_block_sizes == 0);
    CHECK(r.check.segment_events_matched == 1);
    CHECK(r.check.allocs_same_offset == 1);
    CHECK(r.check.final_segments_matched == 1);
    CHECK(r.check.final_blocks_matched == 4);
    CHECK(r.check.identical(r.peaks));
    CHECK(r.peaks.peak_reserved_bytes == 60 * kMi);
  }
  SECTION("a user's --alloc-conf still overrides the recording") {
    ReplayOptions options;
    options.alloc_conf = "expandable_segments:False";
    const ReplayResult r = replay_snapshot(read_vtrace(kMidRunHole, "hole.vtrace"), options);
    CHECK(r.policy == "pytorch");
    CHECK(r.config_origin == "--alloc-conf");
    // E10: the existing expandable memory stays, but Z now gets a cudaMalloc segment (20 MiB, §1.4) instead
    // of the recorded map: not identical.
    CHECK(r.stats.num_device_alloc == 1);
    CHECK(r.check.segment_events_matched == 0);
    CHECK_FALSE(r.check.identical(r.peaks));
  }
}

TEST_CASE("expandable mid-run: a mapped run that is not whole pages is an input error", "[quick][replay]") {
  // A large-pool expandable segment of 3 MiB cannot be a run of 20 MiB pages (E1, E3): the start state cannot
  // be installed, and replay must say so in one line instead of asserting.
  const Snapshot snapshot = read_vtrace(R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 3145728 0 large 1 0 0
block 0x7f0000000000 1048576 1048576 allocated
block 0x7f0000100000 2097152 0 inactive
0 snapshot 0x0 1048576 0 0
)",
                                        "partial_page.vtrace");
  CHECK_THROWS_WITH(
      replay_snapshot(snapshot, ReplayOptions{}),
      Catch::Contains("partial_page.vtrace: expandable segment 0x7f0000000000 (3145728 bytes) is "
                      "not whole 20971520-byte pages"));
}
