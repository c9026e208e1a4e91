// replay --snapshot-out keeps what a recording carries beside memory (issue 43): when the model reproduces
// the recording, the file written holds the recorded trace (annotate entries, user_metadata, compile_context
// in place), the device's record_function marks and the recorded allocator_settings with the model's final
// state, so reading it back gives the recording again. The one difference allowed is the stale requested_size
// of inactive blocks, which the model does not keep (spec/pytorch-caching-allocator.md §10: bookkeeping).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "cli_test_util.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;
using namespace vramsim::test;

namespace {

Snapshot without_stale_requested(Snapshot s) {
  for (SnapshotSegment& seg : s.segments) {
    for (SnapshotBlock& block : seg.blocks) {
      if (block.state == BlockState::kInactive) {
        block.requested_bytes = 0;
      }
    }
  }
  s.source.clear();
  return s;
}

void check_round_trip(const std::string& in, const std::string& out_name) {
  const std::string out = scratch(out_name).string();
  const CliRun run = run_vramsim("replay " + in + " --check --snapshot-out " + out);
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.empty());
  CHECK(without_stale_requested(load_snapshot(out)) == without_stale_requested(load_snapshot(in)));
}

}  // namespace

TEST_CASE("replay --snapshot-out of a hand-made annotated trace keeps its annotations", "[cli][replay]") {
  const std::string out = scratch("annotated_out.json").string();
  const std::string in = (source_dir() / "traces" / "samples" / "annotations.vtrace").string();
  REQUIRE(run_vramsim("replay " + in + " --snapshot-out " + out).exit_code == 0);
  Snapshot back = load_snapshot(out);
  const Snapshot recorded = load_snapshot(in);
  // The sample has no final state; what was written has the model's, and the recording's trace as it was.
  CHECK(back.has_final_state);
  CHECK(back.segments.size() == 2);
  CHECK(back.device_traces == recorded.device_traces);
  CHECK(back.strings == recorded.strings);
  CHECK(back.external_annotations == recorded.external_annotations);
  CHECK(back.external_annotations.size() == 4);
  CHECK(back.device_traces.at(0).annotations.size() == 1);

  // A replay that does not reproduce the recording writes no trace, and says why.
  const CliRun other =
      run_vramsim("replay " + in + " --alloc-conf expandable_segments:True --snapshot-out " + out);
  REQUIRE(other.exit_code == 0);
  CHECK(other.err.find("--snapshot-out: the model diverged from") != std::string::npos);
  CHECK(load_snapshot(out).device_traces.at(0).events.empty());
}

TEST_CASE("replay --snapshot-out of real PyTorch 2.6 recordings reads back as the recording",
          "[cli][replay][real]") {
  if (!shared_or_skip("replay --snapshot-out of real PyTorch 2.6 recordings reads back as the recording")) {
    return;
  }
  // 714 record_function marks (torch.compile's dynamo_timed regions); a full step with 4 marks.
  check_round_trip((shared_real_traces() / "kkaitlyn111_memory_small_forward.pickle").string(),
                   "small.pickle");
  check_round_trip((shared_real_traces() / "kkaitlyn111_memory_ctx128_fullstep.pickle").string(),
                   "step.json");
  // Blocks born before the trace and inactive ones with stale requested sizes.
  check_round_trip((shared_real_traces() / "MAGMA27_memory_snapshot.pickle").string(), "magma.vtrace");
}
