// `vramsim compare` on a recording that starts mid-run: every policy first gets the blocks live at trace
// start, and the native rows then reproduce `vramsim replay` (itself checked against the recordings' segment
// events in tests/replay/test_real_snapshots.cpp).
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "run_cli.h"
#include "sim/core/size_format.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/replay/trace_replay.h"
#include "sim/simulate/policy_run.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

using test::run_cli;

// The blocks live when the trace began, counted straight from the file: the final snapshot's allocated
// blocks, walking the trace backwards (an alloc was not live before it, a free_requested block was).
std::size_t live_at_trace_start(const Snapshot& s, int device) {
  std::set<Bytes> live;
  for (const SnapshotSegment& seg : s.segments) {
    for (const SnapshotBlock& b : seg.blocks) {
      if (seg.device == device && b.state != BlockState::kInactive) {
        live.insert(b.address);
      }
    }
  }
  const auto& events = s.device_traces.at(static_cast<std::size_t>(device)).events;
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (it->action == TraceAction::kAlloc) {
      live.erase(it->addr);
    } else if (it->action == TraceAction::kFreeRequested) {
      live.insert(it->addr);
    }
  }
  return live.size();
}

const nlohmann::json& row(const nlohmann::json& j, const std::string& policy) {
  for (const nlohmann::json& r : j.at("policies")) {
    if (r.at("policy") == policy) {
      return r;
    }
  }
  FAIL("no row " << policy);
  return j;
}

}  // namespace

TEST_CASE("compare on a mid-run recording starts every policy from the recorded state", "[quick][compare]") {
  // memory_ctx128_forward starts with 12.8 GiB reserved: the model was loaded before recording began.
  const std::string trace =
      (test::source_dir() / "traces/samples/kkaitlyn111_memory_ctx128_forward.pickle").string();
  const Snapshot snapshot = load_snapshot(trace);
  const ReplayResult replay = replay_snapshot(snapshot, ReplayOptions{});
  REQUIRE(replay.starts_mid_run);

  // The start allocations come in address order (segments by address, blocks by address within each): with
  // segments that do not overlap, strictly increasing addresses; one per block live at trace start.
  const TraceRequests rec = trace_requests(snapshot, -1, replay.config);
  REQUIRE(rec.start_blocks == live_at_trace_start(snapshot, replay.device));
  for (std::size_t i = 1; i < rec.start_blocks; ++i) {
    REQUIRE(rec.start_addr[i - 1] < rec.start_addr[i]);
  }

  const nlohmann::json j = nlohmann::json::parse(run_cli("compare --json " + trace));
  const nlohmann::json& start = j.at("start_state");
  CHECK_FALSE(start.at("empty").get<bool>());
  CHECK(start.at("live_blocks").get<std::size_t>() == live_at_trace_start(snapshot, replay.device));
  CHECK(start.at("reserved_bytes").get<Bytes>() == replay.reserved_at_start_bytes);
  // The native row is the replay, which is the recording: its peak comes from the segment events.
  CHECK(row(j, "pytorch").at("peak_reserved_bytes").get<std::int64_t>() ==
        replay.check.recorded_peak_reserved_bytes);
  CHECK(row(j, "pytorch").at("peak_allocated_bytes").get<std::int64_t>() ==
        replay.peaks.peak_allocated_bytes);
  // No policy can hold less than the blocks live at once, start state included.
  for (const nlohmann::json& r : j.at("policies")) {
    INFO(r.at("policy").get<std::string>());
    CHECK(r.at("peak_allocated_bytes").get<std::int64_t>() >= j.at("peak_live_bytes").get<std::int64_t>());
    CHECK(r.at("num_ooms").get<std::int64_t>() == 0);
  }

  const std::string text = run_cli("compare --policies pytorch " + trace);
  CHECK_THAT(text, Catch::Contains(
                       fmt::format("start state  {} blocks (", start.at("live_blocks").get<std::size_t>())));
  CHECK_THAT(text, Catch::Contains("live at trace start"));
  CHECK_THAT(text, Catch::Contains("in address order"));

  // A device smaller than what the recording already held cannot host its start state: one-line error.
  int status = 0;
  CHECK_THAT(
      run_cli("compare --capacity 4GiB " + trace, &status),
      Catch::Equals(fmt::format("vramsim: error: --capacity: 4.00 GiB is below the {} {} held reserved at "
                                "trace start, which the pytorch policies start from\n",
                                format_bytes_short(replay.reserved_at_start_bytes), trace)));
  CHECK(status == 2);

  const nlohmann::json g =
      nlohmann::json::parse(run_cli("compare --json --model gpt2 --batch 1 --seq 64 --policies no-cache"));
  CHECK(g.at("start_state").at("empty").get<bool>());
  CHECK_THAT(run_cli("compare --model gpt2 --batch 1 --seq 64 --policies no-cache"),
             Catch::Contains("start state  empty: a generated step starts from an empty allocator"));
}

TEST_CASE("compare's pytorch rows equal vramsim replay on every recording in shared/",
          "[slow][compare][real]") {
  if (!test::shared_or_skip("compare's pytorch rows equal vramsim replay on every recording in shared/")) {
    return;
  }
  std::ifstream in(test::shared_real_traces() / "INDEX.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  std::size_t files = 0;
  for (const nlohmann::json& entry : index) {
    const std::string file = entry.at("file");
    ++files;
    DYNAMIC_SECTION(file) {
      const std::string path = (test::shared_real_traces() / file).string();
      const Snapshot snapshot = load_snapshot(path);
      const ReplayResult native = replay_snapshot(snapshot, ReplayOptions{});
      ReplayOptions expandable_options;
      expandable_options.alloc_conf = "expandable_segments:True";
      const ReplayResult expandable = replay_snapshot(snapshot, expandable_options);
      // None of these recordings has a failed cudaMalloc for the replay to follow, which compare (on an
      // unlimited device) could not follow; were there one, equality would not be expected.
      REQUIRE(native.recorded_failures_followed == 0);
      REQUIRE(expandable.recorded_failures_followed == 0);

      const nlohmann::json j =
          nlohmann::json::parse(run_cli("compare --json --policies pytorch,pytorch-expandable " + path));
      CHECK(j.at("start_state").at("empty").get<bool>() == !native.starts_mid_run);
      CHECK(j.at("start_state").at("reserved_bytes").get<Bytes>() == native.reserved_at_start_bytes);
      const nlohmann::json& p = row(j, "pytorch");
      CHECK(p.at("peak_reserved_bytes").get<std::int64_t>() == native.peaks.peak_reserved_bytes);
      CHECK(p.at("peak_allocated_bytes").get<std::int64_t>() == native.peaks.peak_allocated_bytes);
      const nlohmann::json& x = row(j, "pytorch-expandable");
      CHECK(x.at("peak_reserved_bytes").get<std::int64_t>() == expandable.peaks.peak_reserved_bytes);
      CHECK(x.at("peak_allocated_bytes").get<std::int64_t>() == expandable.peaks.peak_allocated_bytes);
      if (file.find(".pickle") != std::string::npos && native.check.segment_events_recorded > 0) {
        // ... and the replay is the recording: the peak its segment events imply.
        CHECK(p.at("peak_reserved_bytes").get<std::int64_t>() == native.check.recorded_peak_reserved_bytes);
      }
    }
  }
  CHECK(files == 29);  // 27 snapshots + 2 MemoryViz alloc_data files, all accepted by replay
}
