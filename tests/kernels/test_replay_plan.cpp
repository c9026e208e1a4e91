// The hardware replay's schedule (kernels/replay/replay_plan.h): every alloc and free of a trace, in order,
// each free matched to its allocation, on the bundled real recordings and on hand-made traces.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/replay/replay_plan.h"
#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/trace_io.h"

namespace {

using vramsim::Bytes;
using vramsim::InputError;
using vramsim::Snapshot;
using vramsim::TraceAction;
using vramsim::hw::build_replay_plan;
using vramsim::hw::kNoOp;
using vramsim::hw::ReplayOpKind;
using vramsim::hw::ReplayPlan;

Snapshot vtrace(const std::string& body) {
  return vramsim::read_vtrace("vramsim-trace 1\n" + body, "hand.vtrace");
}

std::size_t count(const Snapshot& s, TraceAction action) {
  std::size_t n = 0;
  for (const auto& e : s.device_traces[0].events) {
    n += e.action == action ? 1 : 0;
  }
  return n;
}

// Structural checks every plan must pass: frees point at earlier allocations of the same size and stream,
// and each allocation is freed at most once.
void check_links(const ReplayPlan& plan) {
  std::size_t allocs = 0;
  std::size_t frees = 0;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const auto& op = plan.ops[i];
    if (op.kind == ReplayOpKind::kAlloc) {
      ++allocs;
      if (op.free_op != kNoOp) {
        REQUIRE(op.free_op > i);
        REQUIRE(plan.ops[op.free_op].alloc_op == i);
      }
    } else if (op.kind == ReplayOpKind::kFree) {
      ++frees;
      REQUIRE(op.alloc_op < i);
      const auto& a = plan.ops[op.alloc_op];
      REQUIRE(a.kind == ReplayOpKind::kAlloc);
      REQUIRE(a.free_op == i);
      REQUIRE(a.size_bytes == op.size_bytes);
      REQUIRE(a.stream == op.stream);
    }
  }
  REQUIRE(allocs == plan.allocs);
  REQUIRE(frees == plan.frees);
  REQUIRE(plan.live_at_end == plan.allocs - plan.frees);
}

}  // namespace

TEST_CASE("the plan of a real recording replays every alloc and free it records", "[quick][hw_replay]") {
  const std::string name = GENERATE(as<std::string>{}, "kkaitlyn111_memory_ctx128_forward.pickle",
                                    "kkaitlyn111_memory_files__memory_ctx256_forward_.pickle",
                                    "MAGMA27_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle");
  CAPTURE(name);
  const Snapshot s =
      vramsim::load_snapshot((vramsim::test::source_dir() / "traces" / "samples" / name).string());
  const ReplayPlan plan = build_replay_plan(s);
  REQUIRE_FALSE(plan.starts_empty);
  REQUIRE(plan.trace_events == s.device_traces[0].events.size());
  REQUIRE(plan.allocs == count(s, TraceAction::kAlloc));
  REQUIRE(plan.frees + plan.frees_before_trace == count(s, TraceAction::kFreeRequested));
  REQUIRE(plan.free_completed == count(s, TraceAction::kFreeCompleted));
  REQUIRE(plan.segment_events == count(s, TraceAction::kSegmentAlloc) + count(s, TraceAction::kSegmentFree) +
                                     count(s, TraceAction::kSegmentMap) +
                                     count(s, TraceAction::kSegmentUnmap));
  REQUIRE(plan.ooms == count(s, TraceAction::kOom));
  REQUIRE(plan.streams == std::vector<vramsim::StreamId>{0});
  check_links(plan);
}

TEST_CASE("frees of blocks allocated before a recording started are skipped and counted",
          "[quick][hw_replay]") {
  // MAGMA27's trace frees two blocks born before its first entry (traces/samples/README.md).
  const ReplayPlan magma = build_replay_plan(vramsim::load_snapshot(
      (vramsim::test::source_dir() / "traces" / "samples" / "MAGMA27_memory_snapshot.pickle").string()));
  REQUIRE(magma.frees_before_trace == 2);
  REQUIRE(magma.frees == magma.allocs - 2);

  // The same in a hand-made recording (final state present): the free of 0x9000 is from before the trace.
  const ReplayPlan plan =
      build_replay_plan(vtrace("final_state yes\n"
                               "0 alloc 0x1000 100 0 0\n"
                               "0 free_requested 0x9000 200 0 0\n"
                               "0 free_completed 0x9000 200 0 0\n"
                               "0 free_requested 0x1000 100 0 0\n"
                               "0 free_completed 0x1000 100 0 0\n"));
  REQUIRE(plan.frees_before_trace == 1);
  REQUIRE(plan.ops.size() == 2);
  REQUIRE(plan.ops[1].kind == ReplayOpKind::kFree);
  REQUIRE(plan.ops[1].trace_index == 3);
}

TEST_CASE("a leading burst of segment frees is an empty_cache", "[quick][hw_replay]") {
  const ReplayPlan plan =
      build_replay_plan(vramsim::load_snapshot((vramsim::test::source_dir() / "traces" / "samples" /
                                                "kkaitlyn111_memory_files__memory_ctx256_forward_.pickle")
                                                   .string()));
  REQUIRE(plan.empty_caches == 1);
  REQUIRE(plan.ops.front().kind == ReplayOpKind::kEmptyCache);
  REQUIRE(plan.ops.front().trace_index == 0);
}

TEST_CASE("a record_stream'ed block is freed at its free_completed", "[quick][hw_replay]") {
  const ReplayPlan plan =
      build_replay_plan(vtrace("0 alloc 0x1000 100 7 0\n"
                               "0 alloc 0x2000 300 0 0\n"
                               "0 free_requested 0x1000 100 7 0\n"
                               "0 alloc 0x3000 50 7 0\n"
                               "0 free_completed 0x1000 100 7 0\n"
                               "0 segment_free 0x0 2097152 0 0\n"));
  REQUIRE(plan.starts_empty);
  REQUIRE(plan.ops.size() == 5);
  REQUIRE(plan.ops[3].kind == ReplayOpKind::kFree);
  REQUIRE(plan.ops[3].trace_index == 4);  // the free_completed, not the free_requested
  REQUIRE(plan.ops[3].alloc_op == 0);
  REQUIRE(plan.ops[3].stream == 7);
  REQUIRE(plan.ops[4].kind == ReplayOpKind::kEmptyCache);  // releases that feed no allocation
  REQUIRE(plan.streams == std::vector<vramsim::StreamId>{7, 0});
  REQUIRE(plan.peak_live_requested_bytes == 450);
  REQUIRE(plan.total_allocated_bytes == 450);
  REQUIRE(plan.live_at_end == 2);
  check_links(plan);
}

TEST_CASE("segment events that feed an allocation are not an empty_cache", "[quick][hw_replay]") {
  const ReplayPlan plan =
      build_replay_plan(vtrace("0 alloc 0x1000 100 0 0\n"
                               "0 segment_free 0x0 2097152 0 0\n"
                               "0 segment_alloc 0x200000 2097152 0 0\n"
                               "0 alloc 0x200000 100 0 0\n"));
  REQUIRE(plan.empty_caches == 0);
  REQUIRE(plan.segment_events == 2);
  REQUIRE(plan.ops.size() == 2);
}

TEST_CASE("a trace that contradicts itself is an error naming the event", "[quick][hw_replay]") {
  SECTION("a free of an address never allocated, in a trace that starts empty") {
    const Snapshot s = vtrace(
        "0 alloc 0x1000 100 0 0\n"
        "0 free_requested 0x1000 100 0 0\n"
        "0 free_completed 0x1000 100 0 0\n"
        "0 free_requested 0x5000 100 0 0\n"
        "0 free_completed 0x5000 100 0 0\n");
    REQUIRE_THROWS_WITH(build_replay_plan(s), Catch::Contains("hand.vtrace: device_traces[0][3]") &&
                                                  Catch::Contains("0x5000, which was never allocated"));
  }
  SECTION("an alloc at a live address") {
    REQUIRE_THROWS_WITH(build_replay_plan(vtrace("0 alloc 0x1000 100 0 0\n0 alloc 0x1000 5 0 0\n")),
                        Catch::Contains("device_traces[0][1]: alloc at 0x1000, which is already live"));
  }
  SECTION("a double free") {
    REQUIRE_THROWS_WITH(build_replay_plan(vtrace("0 alloc 0x1000 100 0 0\n"
                                                 "0 free_requested 0x1000 100 0 0\n"
                                                 "0 free_requested 0x1000 100 0 0\n")),
                        Catch::Contains("device_traces[0][2]") && Catch::Contains("already freed"));
  }
  SECTION("a free_completed without a pending free") {
    REQUIRE_THROWS_WITH(
        build_replay_plan(vtrace("0 free_completed 0x1000 100 0 0\n")),
        Catch::Contains("device_traces[0][0]: free_completed of 0x1000 without a pending free"));
  }
  SECTION("a device with no trace") {
    REQUIRE_THROWS_AS(build_replay_plan(vtrace("0 alloc 0x1000 100 0 0\n"), 3), InputError);
  }
}

TEST_CASE("zero-byte allocations are planned as one byte", "[quick][hw_replay]") {
  const ReplayPlan plan = build_replay_plan(vtrace("0 alloc 0x1000 0 0 0\n"));
  REQUIRE(plan.ops.at(0).size_bytes == Bytes{1});
}
