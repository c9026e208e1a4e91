// Blocks allocated before the trace and freed in it, whose end the final snapshot cannot tell (issue 11,
// section 2). Hand-made traces from the spec's rules; every expected figure is worked out in the comments.
// B = 0x7f0000000000 is the base of one 20 MiB cudaMalloc segment of the large pool.
//
// History before the trace (not recorded): b, a request of 2 MiB, was carved from a 2.5 MiB free block; the
// 0.5 MiB left over is not more than 1 MiB, so the block was not split (S3) and b is 2.5 MiB, [B, B+2.5).
// The rest of the segment, [B+2.5, B+20), is free. The final snapshot shows b freed, so b is known only by
// its requested size: round_size(2 MiB) = 2 MiB, and the 18 MiB after it could be a 0.5 MiB remainder plus
// a 17.5 MiB free block, or an 18 MiB free block (both are > 1 MiB: S3 allows either).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "sim/replay/initial_state.h"
#include "sim/replay/trace_replay.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

// In the trace, A (4 MiB) is carved from the free block after b, at its start: B+2.5 MiB (0x280000). The
// 13.5 MiB left is > 1 MiB, so it is split off. Then b is freed; its neighbour A is allocated, so b stays a
// free block of its own. Final: [B, B+2.5) free, A [B+2.5, B+6.5), [B+6.5, B+20) free.
constexpr const char* kLaterAllocation = R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 20971520 0 large 0 0 0
block 0x7f0000000000 2621440 0 inactive
block 0x7f0000280000 4194304 4194304 allocated
block 0x7f0000680000 14155776 0 inactive
0 alloc 0x7f0000280000 4194304 0 0
0 free_requested 0x7f0000000000 2097152 0 0
0 free_completed 0x7f0000000000 2097152 0 0
)";

// The same b, but A comes after b's free: b merges with the free space first, so where b ended no longer
// matters and nothing in the trace tells it. A is then carved at B: final A [B, B+4), [B+4, B+20) free.
constexpr const char* kNoLaterAllocation = R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 20971520 0 large 0 0 0
block 0x7f0000000000 4194304 4194304 allocated
block 0x7f0000400000 16777216 0 inactive
0 free_requested 0x7f0000000000 2097152 0 0
0 free_completed 0x7f0000000000 2097152 0 0
0 alloc 0x7f0000000000 4194304 0 0
)";

CachingConfig defaults() { return CachingConfig{}; }

}  // namespace

TEST_CASE("a pre-trace block's end is read from a later allocation in the free space after it",
          "[quick][replay]") {
  const Snapshot snapshot = read_vtrace(kLaterAllocation, "later.vtrace");
  const InitialState state = rebuild_initial_state(snapshot, 0, defaults());
  REQUIRE(state.segments.size() == 1);
  const auto& blocks = state.segments[0].blocks;
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].addr == 0x7f0000000000);
  CHECK(blocks[0].size_bytes == 2621440);  // 2 MiB requested + the 0.5 MiB unsplit remainder
  CHECK(blocks[0].allocated);
  CHECK(blocks[1].addr == 0x7f0000280000);
  CHECK(blocks[1].size_bytes == 18350080);  // the free 17.5 MiB = 20 MiB - 2.5 MiB
  CHECK_FALSE(blocks[1].allocated);
  CHECK(state.guessed_blocks == 1);
  CHECK(state.placed_blocks == 1);

  // Replayed from there, A lands where the recording has it and the final state is the recorded one.
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  CHECK(r.starts_mid_run);
  CHECK(r.guessed_block_sizes == 1);
  CHECK(r.placed_block_sizes == 1);
  CHECK(r.check.allocs_same_offset == 1);
  CHECK(r.check.final_blocks_recorded == 3);
  CHECK(r.check.final_blocks_matched == 3);
  CHECK(r.check.identical(r.peaks));
  CHECK(r.peaks.peak_allocated_bytes == 2621440 + 4194304);  // b and A, before b's free
}

TEST_CASE("a pre-trace block freed before anything lands after it keeps its requested size",
          "[quick][replay]") {
  const Snapshot snapshot = read_vtrace(kNoLaterAllocation, "none.vtrace");
  const InitialState state = rebuild_initial_state(snapshot, 0, defaults());
  REQUIRE(state.segments.size() == 1);
  REQUIRE(state.segments[0].blocks.size() == 2);
  CHECK(state.segments[0].blocks[0].size_bytes == 2097152);  // round_size(2 MiB): nothing says more
  CHECK(state.guessed_blocks == 1);
  CHECK(state.placed_blocks == 0);
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  CHECK(r.check.allocs_same_offset == 1);
  CHECK(r.check.final_blocks_matched == 2);
}
