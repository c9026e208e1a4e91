// analyze_traced_run on a hand-made traced run: every expected figure is worked out below from the caching
// allocator's rules (spec: requests <= 1 MiB are rounded up to 512 B and served from 2 MiB small-pool
// segments; 1-10 MiB requests get a 20 MiB large segment, which is split when more than 1 MiB would remain).
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

#include "sim/core/error.h"
#include "sim/trace/traced_run.h"
#include "test_paths.h"

namespace vramsim {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

struct TempFiles {
  std::string trace = "/tmp/vramsim_test_traced_run_" + std::to_string(getpid()) + ".vtrace";
  std::string markers = trace + ".markers.json";
  ~TempFiles() {
    std::remove(trace.c_str());
    std::remove(markers.c_str());
  }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A parameter (1000 B), a 3 MiB activation in the forward, a 2 MiB loss temporary, then a 4 MiB gradient in
// the backward, after which the activation dies.
const char* kTrace =
    "vramsim-trace 1\n"
    "0 alloc 0x200 1000 0 1000 op=w/aten._to_copy phase=setup cat=parameter\n"
    "0 alloc 0x400 3145728 0 2000 op=layers.0.mlp/aten.mm layer=0 phase=forward cat=activation\n"
    "0 alloc 0x600 2097152 0 3000 op=aten._log_softmax phase=loss cat=temporary\n"
    "0 free_requested 0x600 2097152 0 4000\n"
    "0 free_completed 0x600 2097152 0 4000\n"
    "0 alloc 0x800 4194304 0 5000 op=w.grad/aten.mm phase=backward cat=gradient\n"
    "0 free_requested 0x400 3145728 0 6000\n"
    "0 free_completed 0x400 3145728 0 6000\n";

const char* kMarkers = R"({"operators": 12, "markers": [
  {"event_index": 0, "step": 0, "phase": "setup"},
  {"event_index": 1, "step": 1, "phase": "forward"},
  {"event_index": 2, "step": 1, "phase": "loss"},
  {"event_index": 5, "step": 1, "phase": "backward"},
  {"event_index": 8, "step": 1, "phase": "post_backward"}]})";

TEST_CASE("traced run: peaks, bill, phases and steps observed on the allocator model", "[trace]") {
  TempFiles f;
  write(f.trace, kTrace);
  write(f.markers, kMarkers);
  const TracedRun run = load_traced_run(f.trace, f.markers);
  REQUIRE(run.markers.size() == 5);
  RunDevice device;
  device.capacity_bytes = Bytes{1} << 30;
  const Prediction p = analyze_traced_run(run, device);

  // Allocated after each event: 1024 (1000 rounded to 512 B), +3 MiB, +2 MiB, -2 MiB, +4 MiB, -3 MiB.
  CHECK(p.peak_allocated_bytes == 1024 + 7 * kMiB);
  // One 2 MiB small segment and one 20 MiB large one (the 2 and 4 MiB requests fit in its remainder).
  CHECK(p.peak_reserved_bytes == 22 * kMiB);
  CHECK(p.peak_requested_bytes == 1000 + 7 * kMiB);
  CHECK(p.ops == 12);
  CHECK(p.tensors == 4);
  CHECK(p.requests == 6);  // 4 allocations and 2 frees (a free_requested and its free_completed are one)
  CHECK(p.num_ooms == 0);

  // The peak is the 4 MiB gradient (event 5, request 4): alive then are the parameter, the activation and the
  // gradient.
  CHECK(p.peak_request_index == 4);
  CHECK(p.peak_step == 1);
  CHECK(p.peak_phase == "backward");
  CHECK(p.peak_op == "w.grad/aten.mm");
  CHECK(p.bill.parameters == 1000);
  CHECK(p.bill.activations == 3 * kMiB);
  CHECK(p.bill.gradients == 4 * kMiB);
  CHECK(p.bill.temporaries == 0);
  CHECK(p.bill.allocator_rounding == 24);
  CHECK(p.bill.allocator_overhead == 22 * kMiB - (1024 + 7 * kMiB));
  REQUIRE(p.top_tensors.size() == 3);
  CHECK(p.top_tensors[0].size_bytes == Bytes{4} * kMiB);
  CHECK(p.top_tensors[1].layer == 0);

  // Phases of step 1: at the forward marker (before event 1), at the loss marker (after the activation), and
  // where backward ended (after event 7: the parameter and the gradient).
  CHECK(p.phases_step == 1);
  CHECK(p.phases.before_forward == 1024);
  CHECK(p.phases.after_forward == 1024 + 3 * kMiB);
  CHECK(p.phases.after_backward == 1024 + 4 * kMiB);
  CHECK_FALSE(p.phases.after_optimizer_step.has_value());
  REQUIRE(p.steps.size() == 1);
  CHECK(p.steps[0].peak_allocated_bytes == 1024 + 7 * kMiB);
  CHECK(p.steps[0].peak_requested_bytes == 1000 + 7 * kMiB);
  CHECK(p.steps[0].peak_reserved_bytes == 22 * kMiB);

  CHECK(p.fits);
  CHECK(p.headroom_bytes == (std::int64_t{1} << 30) - 22 * kMiB);
}

TEST_CASE("traced run: a device too small for the 20 MiB segment runs out of memory", "[trace]") {
  TempFiles f;
  write(f.trace, kTrace);
  write(f.markers, kMarkers);
  RunDevice device;
  device.capacity_bytes = 20 * kMiB;  // the 2 MiB small segment is there: 20 more do not fit
  const Prediction p = analyze_traced_run(load_traced_run(f.trace, f.markers), device);
  CHECK(p.num_ooms > 0);
  CHECK_FALSE(p.fits);
  // What the program needs comes from the same trace without the limit.
  CHECK(p.peak_allocated_needed_bytes == 1024 + 7 * kMiB);
  // Without the limit the run reserves the 2 MiB and the 20 MiB segments: 2 MiB more than the device has.
  CHECK(p.headroom_bytes == 20 * kMiB - 22 * kMiB);
}

TEST_CASE("traced run: without markers there are no phases, bad markers are named", "[trace]") {
  TempFiles f;
  write(f.trace, kTrace);
  RunDevice device;
  device.gpu = "H100";
  const Prediction p = analyze_traced_run(load_traced_run(f.trace, f.markers), device);
  CHECK(p.phases_step == 0);
  CHECK(p.steps.empty());
  CHECK(p.peak_allocated_bytes == 1024 + 7 * kMiB);
  CHECK(p.gpu_name == "H100-80GB");

  write(f.markers, "{\"markers\": [{\"event_index\": -1, \"step\": 0, \"phase\": \"setup\"}]}");
  CHECK_THROWS_WITH(load_traced_run(f.trace, f.markers),
                    Catch::Contains("markers[0]: expected {\"event_index\": unsigned"));
  write(f.markers,
        "{\"markers\": [{\"event_index\": 3, \"step\": 1, \"phase\": \"forward\"},"
        " {\"event_index\": 1, \"step\": 1, \"phase\": \"loss\"}]}");
  CHECK_THROWS_WITH(load_traced_run(f.trace, f.markers),
                    Catch::Contains("markers[1].event_index: markers must be in event order"));
  write(f.markers, "{\"markers\": [{\"event_index\": 0, \"step\": 1000000000000, \"phase\": \"forward\"}]}");
  CHECK_THROWS_WITH(
      load_traced_run(f.trace, f.markers),
      Catch::Contains("markers[0].step: 1000000000000 after step 0 (steps go up by one from 0)"));
  write(f.markers, "{\"markers\": ");
  CHECK_THROWS_WITH(load_traced_run(f.trace, f.markers),
                    Catch::Contains(".markers.json: byte 13: invalid JSON"));
}

}  // namespace
}  // namespace vramsim
