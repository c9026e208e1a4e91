// Ground truth: real snapshots recorded by PyTorch on real GPUs must replay identically.
// Expected numbers come from the recordings (shared/traces/real/INDEX.json, computed from the files by their
// curator), not from vramsim.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sim/replay/trace_replay.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

std::int64_t final_reserved(const ReplayResult& r) {
  std::int64_t total = 0;
  for (const SnapshotSegment& s : r.final_segments) {
    total += static_cast<std::int64_t>(s.total_size_bytes);
  }
  return total;
}

std::int64_t final_allocated(const ReplayResult& r) {
  std::int64_t total = 0;
  for (const SnapshotSegment& s : r.final_segments) {
    total += static_cast<std::int64_t>(s.allocated_bytes);
  }
  return total;
}

struct Expected {
  const char* file;
  std::size_t segment_events;  // segment_alloc + segment_free in the trace
  std::size_t allocs;
  std::int64_t reserved_at_start;
  std::int64_t peak_reserved;
  std::int64_t final_reserved;
  std::int64_t final_allocated;
};

// Copied from shared/traces/real/INDEX.json (devices."0": trace_actions, reserved_at_trace_start_bytes,
// peak_reserved_during_trace_bytes, final_reserved_bytes, final_allocated_bytes).
const Expected kBundled[] = {
    {"kkaitlyn111_memory_ctx128_forward.pickle", 289, 2058, 13763608576, 19667091456, 19667091456, 19498420224},
    {"kkaitlyn111_memory_files__memory_ctx256_forward_.pickle", 287 + 471, 2057, 19667091456, 26545750016,
     26545750016, 26388097024},
    {"MAGMA27_memory_snapshot.pickle", 0, 1721, 14180941824, 14180941824, 14180941824, 1377753600},
    {"cranberrii_memory_snapshot.pickle", 152, 3505, 1400897536, 6471811072, 6471811072, 2297283072},
};

void require_identical(const ReplayResult& r) {
  const CheckReport& c = r.check;
  INFO(r.source << ": first divergence "
                << (c.first_divergence ? c.first_divergence->expected + " / " + c.first_divergence->got : "none"));
  CHECK(c.segment_events_matched == c.segment_events_recorded);
  CHECK(c.model_segment_events == c.segment_events_recorded);
  CHECK(c.allocs_same_offset == c.allocs_recorded);
  CHECK(c.final_segments_matched == c.final_segments_recorded);
  CHECK(c.final_blocks_matched == c.final_blocks_recorded);
  CHECK(c.invariant_violations.empty());
  CHECK_FALSE(c.first_divergence.has_value());
  CHECK(r.peaks.peak_reserved_bytes == c.recorded_peak_reserved_bytes);
  CHECK(r.peaks.peak_requested_bytes == c.recorded_peak_requested_bytes);
  CHECK(c.identical(r.peaks));
}

}  // namespace

TEST_CASE("bundled real snapshots replay identically to the recording", "[quick][replay][real]") {
  for (const Expected& e : kBundled) {
    const auto path = test::source_dir() / "traces" / "samples" / e.file;
    DYNAMIC_SECTION(e.file) {
      const Snapshot snapshot = load_snapshot(path.string());
      const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
      require_identical(r);
      CHECK(r.check.segment_events_recorded == e.segment_events);
      CHECK(r.check.allocs_recorded == e.allocs);
      CHECK(static_cast<std::int64_t>(r.reserved_at_start_bytes) == e.reserved_at_start);
      CHECK(r.peaks.peak_reserved_bytes == e.peak_reserved);
      CHECK(final_reserved(r) == e.final_reserved);
      CHECK(final_allocated(r) == e.final_allocated);
    }
  }
}

TEST_CASE("the empty_cache burst at trace start is released in the recorded order", "[quick][replay][real]") {
  // memory_ctx256_forward_ starts with 287 segment_free entries written by torch.cuda.empty_cache(): the model's
  // release_cached_blocks must free the same segments in the same (stream, size, address) order.
  const auto path = test::source_dir() / "traces" / "samples" / "kkaitlyn111_memory_files__memory_ctx256_forward_.pickle";
  const Snapshot snapshot = load_snapshot(path.string());
  const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
  CHECK(r.stats.num_device_free == 287);
  CHECK(r.stats.num_device_alloc == 471);
  CHECK(r.stats.num_alloc_retries == 0);
  CHECK(r.check.segment_events_matched == 287 + 471);
}

TEST_CASE("every real snapshot in shared/ replays identically", "[slow][replay][real]") {
  if (!test::shared_or_skip("every real snapshot in shared/ replays identically")) {
    return;
  }
  std::ifstream in(test::shared_real_traces() / "INDEX.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  std::size_t files = 0;
  for (const nlohmann::json& entry : index) {
    const std::string file = entry.at("file");
    if (file.find(".pickle") == std::string::npos) {
      continue;  // the alloc_data files carry sizes only
    }
    ++files;
    DYNAMIC_SECTION(file) {
      const Snapshot snapshot = load_snapshot((test::shared_real_traces() / file).string());
      const ReplayResult r = replay_snapshot(snapshot, ReplayOptions{});
      require_identical(r);
      const nlohmann::json& dev = entry.at("devices").at(std::to_string(r.device));
      const nlohmann::json& actions = dev.at("trace_actions");
      const auto count = [&](const char* a) { return actions.contains(a) ? actions.at(a).get<std::size_t>() : 0; };
      CHECK(r.check.allocs_recorded == count("alloc"));
      CHECK(r.check.segment_events_recorded ==
            count("segment_alloc") + count("segment_free") + count("segment_map") + count("segment_unmap"));
      CHECK(final_reserved(r) == dev.at("final_reserved_bytes").get<std::int64_t>());
      CHECK(final_allocated(r) == dev.at("final_allocated_bytes").get<std::int64_t>());
      if (dev.contains("reserved_at_trace_start_bytes") && dev.at("trace_events").get<std::size_t>() > 1) {
        CHECK(static_cast<std::int64_t>(r.reserved_at_start_bytes) ==
              dev.at("reserved_at_trace_start_bytes").get<std::int64_t>());
        CHECK(r.peaks.peak_reserved_bytes == dev.at("peak_reserved_during_trace_bytes").get<std::int64_t>());
      }
    }
  }
  CHECK(files >= 27);
}
