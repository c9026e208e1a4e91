// check_snapshot_invariants: one hand-made valid snapshot, each rule broken on its own with the exact
// message, and every real snapshot passing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "test_paths.h"
#include "traces/snapshot_invariants.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

using Lines = std::vector<std::string>;

constexpr Bytes kSeg0 = 0x10000000;  // small-pool segment
constexpr Bytes kSeg1 = 0x20000000;  // large-pool segment

// Lays the blocks out from the segment address and recomputes the recorded sums, so a test breaks only the
// rule it means to.
void settle(SnapshotSegment& seg) {
  Bytes address = seg.address;
  seg.allocated_bytes = seg.active_bytes = seg.requested_bytes = 0;
  for (SnapshotBlock& block : seg.blocks) {
    block.address = address;
    address += block.size_bytes;
    if (block.state != BlockState::kInactive) {
      seg.active_bytes += block.size_bytes;
      seg.requested_bytes += block.requested_bytes;
      if (block.state == BlockState::kActiveAllocated) {
        seg.allocated_bytes += block.size_bytes;
      }
    }
  }
}

Snapshot valid_snapshot() {
  Snapshot s;
  SnapshotSegment small{.device = 0,
                        .address = kSeg0,
                        .total_size_bytes = 2 * kMiB,
                        .is_small_pool = true,
                        .blocks = {{0, 512, 100, BlockState::kActiveAllocated},
                                   {0, 1024, 1000, BlockState::kActivePendingFree},
                                   {0, 2 * kMiB - 1536, 0, BlockState::kInactive}}};
  SnapshotSegment large{.device = 0,
                        .address = kSeg1,
                        .total_size_bytes = 20 * kMiB,
                        .is_small_pool = false,
                        .blocks = {{0, 2 * kMiB, 2000000, BlockState::kActiveAllocated},
                                   {0, 18 * kMiB, 0, BlockState::kInactive}}};
  settle(small);
  settle(large);
  s.segments = {small, large};
  s.device_traces.resize(1);
  return s;
}

}  // namespace

TEST_CASE("a valid snapshot has no violations", "[quick][traces]") {
  CHECK(check_snapshot_invariants(valid_snapshot()).empty());
  CHECK(check_snapshot_invariants(Snapshot{}).empty());
}

TEST_CASE("segment size rules", "[quick][traces]") {
  Snapshot s = valid_snapshot();
  SECTION("small segments are 2 MiB") {
    s.segments[0].total_size_bytes = 20 * kMiB;
    s.segments[0].blocks.back().size_bytes = 20 * kMiB - 1536;
    settle(s.segments[0]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 0 (device 0, 0x10000000): small-pool segment of "
                                                "20971520 bytes (small segments are 2097152)"});
  }
  SECTION("large segments are multiples of 2 MiB") {
    s.segments[1].total_size_bytes = 21 * kMiB;
    s.segments[1].blocks.back().size_bytes = 19 * kMiB;
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 1 (device 0, 0x20000000): large-pool segment of "
                                                "22020096 bytes is not a multiple of 2 MiB"});
  }
  SECTION("expandable segments are whole 2 MiB pages") {
    s.segments[1].is_expandable = true;
    s.segments[1].total_size_bytes = 3 * kMiB;
    s.segments[1].blocks.back().size_bytes = kMiB;  // a 1 MiB free tail is fine in an expandable segment
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 1 (device 0, 0x20000000): expandable segment of "
                                                "3145728 bytes is not a whole number of 2 "
                                                "MiB pages"});
  }
}

TEST_CASE("segment order and overlap", "[quick][traces]") {
  Snapshot s = valid_snapshot();
  SECTION("overlap") {
    s.segments[1].address = kSeg0 + kMiB;
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s) ==
          Lines{"segment 1 (device 0, 0x10100000): overlaps segment 0 (0x10000000 + 2097152 bytes)"});
  }
  SECTION("order") {
    std::swap(s.segments[0], s.segments[1]);
    CHECK(check_snapshot_invariants(s) ==
          Lines{"segment 1 (device 0, 0x10000000): not in (device, address) order after segment 0"});
  }
  SECTION("other devices may reuse addresses") {
    s.segments[1].device = 1;
    s.segments[1].address = kSeg0;
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s).empty());
  }
}

TEST_CASE("block tiling and recorded sums", "[quick][traces]") {
  Snapshot s = valid_snapshot();
  SnapshotSegment& seg = s.segments[0];
  SECTION("a block out of place") {
    seg.blocks[1].address += 512;
    CHECK(
        check_snapshot_invariants(s) ==
        Lines{"segment 0 (device 0, 0x10000000) block 1: starts at 0x10000400, expected 0x10000200 (segment "
              "address + earlier block sizes)",
              "segment 0 (device 0, 0x10000000) block 2: starts at 0x10000600, expected 0x10000800 (segment "
              "address + earlier block sizes)"});
  }
  SECTION("blocks that do not cover the segment") {
    seg.blocks.pop_back();
    CHECK(check_snapshot_invariants(s) ==
          Lines{"segment 0 (device 0, 0x10000000): blocks cover 1536 of its 2097152 bytes"});
  }
  SECTION("an empty block") {
    seg.blocks.insert(seg.blocks.begin() + 1, SnapshotBlock{0, 0, 0, BlockState::kActiveAllocated});
    settle(seg);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 0 (device 0, 0x10000000) block 1: is empty"});
  }
  SECTION("recorded sums") {
    seg.allocated_bytes = 0;
    seg.active_bytes = 512;
    seg.requested_bytes = 1;
    CHECK(
        check_snapshot_invariants(s) ==
        Lines{"segment 0 (device 0, 0x10000000): allocated_size 0 disagrees with its allocated blocks (512)",
              "segment 0 (device 0, 0x10000000): active_size 512 disagrees with its active blocks (1536)",
              "segment 0 (device 0, 0x10000000): requested_size 1 disagrees with its active blocks (1100)"});
  }
  SECTION("requested above the block size") {
    seg.blocks[0].requested_bytes = 600;
    settle(seg);
    CHECK(check_snapshot_invariants(s) ==
          Lines{"segment 0 (device 0, 0x10000000) block 0: requested_size 600 exceeds the block size 512"});
  }
}

TEST_CASE("block size and free-block rules", "[quick][traces]") {
  Snapshot s = valid_snapshot();
  SECTION("sizes are multiples of 512 unless a divisions entry is 1") {
    s.segments[1].blocks[0].size_bytes += 100;
    s.segments[1].blocks[1].size_bytes -= 100;
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s) ==
          Lines{"segment 1 (device 0, 0x20000000) block 0: size 2097252 is not a multiple of 512",
                "segment 1 (device 0, 0x20000000) block 1: size 18874268 is not a multiple of 512"});
    s.allocator_settings = RecordedAllocatorSettings{};
    s.allocator_settings->roundup_power2_divisions[3] = 1;
    CHECK(check_snapshot_invariants(s).empty());
  }
  SECTION("free blocks are never adjacent") {
    s.segments[0].blocks[1].state = BlockState::kInactive;
    settle(s.segments[0]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 0 (device 0, 0x10000000) block 2: free block "
                                                "directly after another free block (free runs "
                                                "are merged, M3)"});
  }
  SECTION("pending-free blocks next to free ones are fine") {
    s.segments[0].blocks[0].state = BlockState::kInactive;
    settle(s.segments[0]);
    CHECK(check_snapshot_invariants(s).empty());
  }
  SECTION("free blocks in the large pool are above 1 MiB, unless expandable segments were on") {
    s.segments[1].blocks = {{0, 2 * kMiB, 2000000, BlockState::kActiveAllocated},
                            {0, kMiB, 0, BlockState::kInactive},
                            {0, 17 * kMiB, 17 * kMiB, BlockState::kActiveAllocated}};
    settle(s.segments[1]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 1 (device 0, 0x20000000) block 1: free block of "
                                                "1048576 bytes in the large pool (free blocks "
                                                "there are > 1 MiB, S3)"});
    s.allocator_settings = RecordedAllocatorSettings{};
    s.allocator_settings->expandable_segments = true;
    CHECK(check_snapshot_invariants(s).empty());
  }
  SECTION("free blocks in the small pool are at least 512") {
    s.allocator_settings = RecordedAllocatorSettings{};
    s.allocator_settings->roundup_power2_divisions.fill(1);  // allows unaligned sizes
    s.segments[0].blocks = {{0, 512, 512, BlockState::kActiveAllocated},
                            {0, 256, 0, BlockState::kInactive},
                            {0, 2 * kMiB - 768, 1, BlockState::kActiveAllocated}};
    settle(s.segments[0]);
    CHECK(check_snapshot_invariants(s) == Lines{"segment 0 (device 0, 0x10000000) block 1: free block of 256 "
                                                "bytes in the small pool (remainders are "
                                                ">= 512)"});
  }
  SECTION("the list is capped") {
    s.segments[1].blocks.clear();
    for (int i = 0; i < 150; ++i) {
      s.segments[1].blocks.push_back({0, 1000, 0, BlockState::kActiveAllocated});
    }
    s.segments[1].blocks.push_back({0, 20 * kMiB - 150000, 0, BlockState::kActiveAllocated});
    settle(s.segments[1]);
    const Lines violations = check_snapshot_invariants(s);
    REQUIRE(violations.size() == kMaxReportedViolations + 1);
    CHECK(violations.back() == "... and 51 more violations");
  }
}

TEST_CASE("every real snapshot passes the invariants", "[quick][traces]") {
  if (!vramsim::test::shared_or_skip("every real snapshot passes the invariants")) {
    return;
  }
  std::vector<std::string> failing;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::shared_real_traces())) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".pickle.json")) {
      continue;
    }
    const Lines violations = check_snapshot_invariants(load_snapshot(entry.path().string()));
    if (!violations.empty()) {
      failing.push_back(name + ": " + violations.front() + " (" + std::to_string(violations.size()) +
                        " in all)");
    }
    ++files;
  }
  INFO(Catch::Detail::stringify(failing));
  CHECK(failing.empty());
  CHECK(files == 27);
}

}  // namespace vramsim
