// Replaying the device limit as recorded: a cudaMalloc that failed on the GPU must fail in the model too, send
// it down the same retry ladder (spec §4.1: release_cached_blocks, then alloc_block(retry)), and an `oom` entry
// must end in a model OOM. The trace below is hand-made; every expected number is worked out in the comments.
#include <catch2/catch.hpp>

#include "sim/replay/trace_replay.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

// A = 20 MiB segment (5 MiB request, freed -> cached whole), B = 2 MiB small segment (512 B live),
// then a 30 MiB request: the GPU refused cudaMalloc(30 MiB), PyTorch freed the cached A (segment_free) and the
// retry succeeded (segment_alloc C). Finally a 100 MiB request ended in an oom entry.
constexpr const char* kTrace = R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0001400000 2097152 0 small 0 0 0
block 0x7f0001400000 512 512 allocated
block 0x7f0001400200 2096640 0 inactive
segment 0 0x7f0001600000 31457280 0 large 0 0 0
block 0x7f0001600000 31457280 31457280 allocated
0 segment_alloc 0x7f0000000000 20971520 0 0
0 alloc 0x7f0000000000 5242880 0 0
0 free_requested 0x7f0000000000 5242880 0 0
0 free_completed 0x7f0000000000 5242880 0 0
0 segment_alloc 0x7f0001400000 2097152 0 0
0 alloc 0x7f0001400000 512 0 0
0 segment_free 0x7f0000000000 20971520 0 0
0 segment_alloc 0x7f0001600000 31457280 0 0
0 alloc 0x7f0001600000 31457280 0 0
0 oom 1048576 104857600 0 0
)";

}  // namespace

TEST_CASE("recorded cudaMalloc failures drive the model's retry ladder", "[quick][replay]") {
  const Snapshot snapshot = read_vtrace(kTrace, "oom_retry.vtrace");
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  INFO((r.check.first_divergence ? r.check.first_divergence->expected + " / " + r.check.first_divergence->got : ""));
  CHECK_FALSE(r.starts_mid_run);                 // every segment of the final state was created in the trace
  CHECK(r.check.segment_events_recorded == 4);  // 3 segment_alloc + 1 segment_free
  CHECK(r.check.segment_events_matched == 4);
  CHECK(r.check.allocs_same_offset == 3);
  CHECK(r.check.ooms_recorded == 1);
  CHECK(r.check.identical(r.peaks));
  // 30 MiB: refused once, then the retry (num_alloc_retries 1). 100 MiB: refused, RC frees nothing, the retry is
  // refused again (num_alloc_retries 2), OOM.
  CHECK(r.stats.num_alloc_retries == 2);
  CHECK(r.stats.num_ooms == 1);
  CHECK(r.stats.num_device_free == 1);
  CHECK(r.stats.num_device_alloc == 3);
  CHECK(r.recorded_failures_followed == 3);
  // Reserved peaks at 2 + 30 MiB once A is gone (20 + 2 = 22 MiB before).
  CHECK(r.peaks.peak_reserved_bytes == 32 * 1048576);
  // The first failure asked for 30 MiB on top of 22 MiB reserved: the device had less than 52 MiB for us.
  CHECK(r.inferred_capacity_below_bytes == 52 * 1048576);
}

TEST_CASE("a trace without a final state starts from an empty allocator", "[quick][replay]") {
  // 1,000 B -> small pool, one 2 MiB segment; 5,000,000 B -> large pool, one 20 MiB segment (spec §7.6 steps 1-2).
  const Snapshot snapshot = read_vtrace(R"(vramsim-trace 1
devices 1
final_state no
0 alloc 0x10 1000 0 0
0 alloc 0x20 5000000 0 0
0 free_requested 0x10 1000 0 0
0 free_completed 0x10 1000 0 0
)",
                                        "generated.vtrace");
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  CHECK_FALSE(r.starts_mid_run);
  CHECK(r.peaks.peak_reserved_bytes == 2097152 + 20971520);
  CHECK(r.peaks.peak_allocated_bytes == 1024 + 5000192);
  CHECK(r.stats.num_device_alloc == 2);
}
