// Every registered policy replays the allocation requests of the real snapshots in traces/samples/ from an
// empty allocator (the trace's alloc / free_requested events only: sim/replay/request_sequence_from_trace.h).
// Checked for each: every request served on an unlimited device, live blocks never overlap, peak reserved >=
// peak live bytes (the floor no allocator can go below: a property of the trace, not of the code). And the
// offline planner's peak reserved is at most every online policy's (+ its 2 MiB arena rounding). That last
// one is an observed property of greedy-by-size on these traces, not a theorem (see Note [Ties go to the
// longer lifetime] in sim/alloc/policies/offline_optimal.cpp): it failed on cranberrii before that rule.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/alloc/request_sequence.h"
#include "sim/core/error.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/report/memory_stats.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

struct Outcome {
  std::int64_t peak_reserved = 0;
  std::int64_t peak_allocated = 0;
  std::size_t ooms = 0;
};

// Replays `sequence` through the policy, checking that live blocks never overlap.
Outcome replay(const PolicyEntry& entry, const RequestSequence& sequence) {
  SimulatedDevice device;
  MemoryStatsObserver stats;
  auto policy = entry.make(CachingConfig{}, device, stats);
  if (entry.needs_plan) {
    policy->plan(sequence);
  }
  std::vector<AllocResult> result(sequence.alloc_count());
  std::map<Bytes, Bytes> live;  // addr -> end
  const std::vector<RequestOp>& ops = sequence.ops();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const RequestOp& op = ops[i];
    if (op.kind == RequestOp::Kind::kAlloc) {
      const AllocResult r = policy->allocate(AllocRequest{op.size_bytes, op.stream, static_cast<TimeNs>(i)});
      result[op.alloc_id] = r;
      if (!r.ok()) {
        continue;
      }
      const Bytes end = r.addr + r.block_size_bytes;
      auto next = live.lower_bound(r.addr);
      INFO("op " << i << ": block [0x" << std::hex << r.addr << ", 0x" << end << ")");
      REQUIRE((next == live.end() || end <= next->first));
      REQUIRE((next == live.begin() || std::prev(next)->second <= r.addr));
      live.emplace(r.addr, end);
    } else if (result[op.alloc_id].ok()) {
      live.erase(result[op.alloc_id].addr);
      policy->free(result[op.alloc_id].block, static_cast<TimeNs>(i));
    }
  }
  REQUIRE(policy->blocks().check_invariants() == "");
  Outcome out;
  out.peak_reserved = stats.stats().reserved_bytes[kStatAll].peak;
  out.peak_allocated = stats.stats().allocated_bytes[kStatAll].peak;
  out.ooms = static_cast<std::size_t>(stats.stats().num_ooms);
  return out;
}

}  // namespace

TEST_CASE("request_sequence_from_trace: the hand-made snapshot", "[quick][alloc]") {
  const Snapshot snap = load_snapshot(test::test_data("snap_small.json").string());
  const RequestSequence s = request_sequence_from_trace(snap);
  // alloc 5000000 (stream 7), alloc 500, alloc 1000, free of the 1000; the oom entry requested nothing.
  REQUIRE(s.ops().size() == 4);
  CHECK(s.alloc_count() == 3);
  CHECK(s.alloc_op(0).size_bytes == 5000000);
  CHECK(s.alloc_op(0).stream == 7);
  CHECK(s.free_op_index(2) == 3);
  CHECK(peak_live_bytes(s) == 5001500);

  Snapshot bad;
  bad.source = "bad.vtrace";
  bad.device_traces.resize(1);
  bad.device_traces[0].events = {TraceEvent{TraceAction::kFreeRequested, 0x1000, 64, 0, 0},  // born before
                                 TraceEvent{TraceAction::kAlloc, 0x2000, 64, 0, 0},
                                 TraceEvent{TraceAction::kAlloc, 0x2000, 64, 0, 0}};
  CHECK_THROWS_WITH(request_sequence_from_trace(bad), Catch::Contains("bad.vtrace: device_traces[0][2]"));
  CHECK_THROWS_AS(request_sequence_from_trace(bad, 3), InputError);
}

TEST_CASE("every policy on the real sample traces: no overlap, above the floor, offline lowest",
          "[alloc][replay]") {
  const std::vector<std::string> files = {
      "MAGMA27_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
      "kkaitlyn111_memory_ctx128_forward.pickle", "kkaitlyn111_memory_files__memory_ctx256_forward_.pickle"};
  for (const std::string& file : files) {
    INFO("trace " << file);
    const Snapshot snap = load_snapshot((test::source_dir() / "traces" / "samples" / file).string());
    const RequestSequence sequence = request_sequence_from_trace(snap);
    REQUIRE(sequence.alloc_count() > 1000);
    const auto floor = static_cast<std::int64_t>(peak_live_bytes(sequence));
    std::map<std::string, Outcome> outcomes;
    std::string table = fmt::format("{}: {} allocations, peak live {:.3f} GiB\n", file,
                                    sequence.alloc_count(), static_cast<double>(floor) / kGiB);
    for (const PolicyEntry& entry : policy_registry()) {
      INFO("policy " << entry.name);
      const Outcome o = replay(entry, sequence);
      CHECK(o.ooms == 0);
      CHECK(o.peak_reserved >= floor);
      outcomes[std::string(entry.name)] = o;
      table += fmt::format("  {:<20} peak reserved {:8.3f} GiB  ({:+.2f} % over the floor)\n", entry.name,
                           static_cast<double>(o.peak_reserved) / kGiB,
                           100.0 * static_cast<double>(o.peak_reserved - floor) / static_cast<double>(floor));
    }
    INFO(table);  // the comparison, shown when a check below fails
    const std::int64_t offline = outcomes.at("offline-optimal").peak_reserved;
    for (const auto& [name, o] : outcomes) {
      INFO("policy " << name);
      CHECK(offline <= o.peak_reserved + static_cast<std::int64_t>(2 * kMiB));
    }
  }
}
