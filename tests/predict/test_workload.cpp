// The one road from a workload to the allocator model (sim/alloc/workload.h): a generated schedule and a
// traced run read into a workload, request by request (expected values written out by hand below), and
// explain_run over a generated workload against the edge it replaced: the same run written in the recording
// format and replayed as a recording (an independent code path: replay_snapshot).
#include <catch2/catch.hpp>

#include "sim/alloc/registry.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/run_report.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/replay/trace_replay.h"
#include "sim/simulate/policy_run.h"

namespace vramsim {
namespace {

TraceEvent event(TraceAction action, Bytes addr, Bytes size, std::uint32_t op_tag = kNoTag,
                 std::uint32_t category_tag = kNoTag, TimeNs time_ns = 0) {
  TraceEvent e;
  e.action = action;
  e.addr = addr;
  e.size_bytes = size;
  e.op_tag = op_tag;
  e.category_tag = category_tag;
  e.time_ns = time_ns;
  return e;
}

TEST_CASE("workload: a schedule's free_requested and free_completed are one request", "[quick][predict]") {
  // Tensor 7 (1000 B) is made by op "mm" in the setup, tensor 9 (3 MiB) in the forward, then tensor 7 dies.
  AllocationSchedule s;
  s.strings = {"", "mm", "parameter", "activation"};
  s.events = {event(TraceAction::kAlloc, 0x200, 1000, 1, 2, 10),
              event(TraceAction::kAlloc, 0x400, 3 << 20, 1, 3, 20),
              event(TraceAction::kFreeRequested, 0x200, 1000, 1, 2, 30),
              event(TraceAction::kFreeCompleted, 0x200, 1000, 1, 2, 30)};
  s.event_tensor = {7, 9, 7, 7};
  s.phases = {PhaseMarker{0, 0, Phase::kSetup, 0}, PhaseMarker{1, 0, Phase::kForward, 1},
              PhaseMarker{1, 0, Phase::kBackward, 4}};
  std::vector<TensorId> tensors;
  const Workload w = workload_from_schedule(s, "hand-made", &tensors);
  const std::vector<RequestOp>& ops = w.requests.ops();
  REQUIRE(ops.size() == 3);
  CHECK(ops[0].kind == RequestOp::Kind::kAlloc);
  CHECK(ops[0].size_bytes == 1000);
  CHECK(ops[0].time_ns == 10);
  CHECK(ops[1].size_bytes == Bytes{3} << 20);
  CHECK(ops[2].kind == RequestOp::Kind::kFree);
  CHECK(ops[2].alloc_id == 0);
  CHECK(ops[2].time_ns == 30);
  CHECK(tensors == std::vector<TensorId>{7, 9, 7});
  REQUIRE(w.labels.size() == 3);
  CHECK(w.tag(w.labels[1].category_tag) == "activation");
  CHECK(w.tag(w.labels[1].op_tag) == "mm");
  // Markers at events 0, 1 and 4 (the end) begin at requests 0, 1 and 3 (the end).
  REQUIRE(w.markers.size() == 3);
  CHECK(w.markers[0].request_index == 0);
  CHECK(w.markers[0].phase == "setup");
  CHECK(w.markers[1].request_index == 1);
  CHECK(w.markers[1].phase == "forward");
  CHECK(w.markers[2].request_index == 3);
}

TEST_CASE("workload: a schedule's free that waits for another stream keeps its block until then",
          "[quick][predict]") {
  // Tensor 1 (4 MiB) is freed on the compute stream while a communication stream still reads it (FSDP's
  // record_stream): its free_completed comes after tensor 2 (4 MiB) is allocated. The caching allocator may
  // not hand tensor 1's block to tensor 2 (spec ST2-ST3): it counts as active, not allocated, until then.
  AllocationSchedule s;
  s.strings = {""};
  s.events = {event(TraceAction::kAlloc, 0x200, 4 << 20), event(TraceAction::kFreeRequested, 0x200, 4 << 20),
              event(TraceAction::kAlloc, 0x400, 4 << 20), event(TraceAction::kFreeCompleted, 0x200, 4 << 20),
              event(TraceAction::kFreeRequested, 0x400, 4 << 20),
              event(TraceAction::kFreeCompleted, 0x400, 4 << 20)};
  s.event_tensor = {1, 1, 2, 1, 2, 2};
  const Workload w = workload_from_schedule(s, "hand-made");
  const std::vector<RequestOp>& ops = w.requests.ops();
  REQUIRE(ops.size() == 4);  // alloc 1, free 1, alloc 2, free 2
  CHECK(ops[1].kind == RequestOp::Kind::kFree);
  CHECK(ops[1].streams_done_before == 3);  // tensor 1's streams are done before request 3 (tensor 2's free)
  CHECK(ops[3].streams_done_before == 0);  // tensor 2's free completes at once
  const PolicyRunResult r = run_policy(find_policy("pytorch"), w.requests, PolicyRunOptions{});
  // Both 4 MiB blocks split one 20 MiB segment (requests from 1 to 10 MiB get a 20 MiB segment, spec §3.1);
  // allocated never passes 4 MiB, active reaches 8 MiB while tensor 1's block waits.
  CHECK(r.peaks.peak_allocated_bytes == 4 << 20);
  CHECK(r.peaks.peak_active_bytes == 8 << 20);
  CHECK(r.peaks.peak_reserved_bytes == 20 << 20);
}

TEST_CASE("workload: a traced run, a delayed free made at its free_completed", "[quick][predict]") {
  Snapshot t;
  t.source = "traced.vtrace";
  t.strings = {"", "aten.mm"};
  t.device_traces.resize(1);
  t.device_traces[0].events = {
      event(TraceAction::kAlloc, 0x200, 512, 1),        // request 0
      event(TraceAction::kSegmentAlloc, 0x0, 2 << 20),  // an allocator's answer: not a request
      event(TraceAction::kAlloc, 0x400, 1024),          // request 1
      event(TraceAction::kFreeRequested, 0x200, 512),   // record_stream: completes later
      event(TraceAction::kAlloc, 0x0, 0),               // 0 bytes: PyTorch never asks
      event(TraceAction::kFreeRequested, 0x400, 1024),  // request 2, completes at once
      event(TraceAction::kFreeCompleted, 0x400, 1024),
      event(TraceAction::kFreeCompleted, 0x200, 512),  // request 3: the free of 0x200
  };
  const Workload w = workload_from_trace(
      t, {TraceMarker{0, 0, "setup"}, TraceMarker{3, 1, "forward"}, TraceMarker{7, 1, "backward"}});
  const std::vector<RequestOp>& ops = w.requests.ops();
  REQUIRE(ops.size() == 4);
  CHECK(ops[1].size_bytes == 1024);
  CHECK(ops[2].kind == RequestOp::Kind::kFree);
  CHECK(ops[2].alloc_id == 1);
  CHECK(ops[3].kind == RequestOp::Kind::kFree);
  CHECK(ops[3].alloc_id == 0);
  CHECK(w.tag(w.labels[0].op_tag) == "aten.mm");
  // Event 3 is followed by requests from event 5 on (request 2); event 7 is request 3.
  REQUIRE(w.markers.size() == 3);
  CHECK(w.markers[1].request_index == 2);
  CHECK(w.markers[2].request_index == 3);

  t.device_traces[0].events.push_back(event(TraceAction::kFreeRequested, 0x600, 512));
  CHECK_THROWS_WITH(workload_from_trace(t, {}),
                    "traced.vtrace: device_traces[0][8]: free_requested of 0x600, which is not allocated");
  t.device_traces[0].events.back() = event(TraceAction::kAlloc, 0x200, 512);
  t.device_traces[0].events.push_back(event(TraceAction::kAlloc, 0x200, 512));
  CHECK_THROWS_WITH(workload_from_trace(t, {}),
                    "traced.vtrace: device_traces[0][9]: alloc at 0x200, which is still allocated");
}

TEST_CASE("workload: explain_run drives the allocator as a replay of the same run in the recording format",
          "[predict]") {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 64;
  o.steps = 2;
  const OpGraph g = build_training_steps(model_preset("gpt2"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  RunDevice device;
  device.capacity_bytes = Bytes{1} << 40;
  const Prediction p = explain_run(workload_from_schedule(s, "gpt2"), device);
  const ReplayResult r = replay_snapshot(schedule_to_snapshot(s, "gpt2"), ReplayOptions{});
  CHECK(p.peak_allocated_bytes == r.peaks.peak_allocated_bytes);
  CHECK(p.peak_reserved_bytes == r.peaks.peak_reserved_bytes);
  CHECK(p.peak_requested_bytes == r.peaks.peak_requested_bytes);
  CHECK(p.peak_active_bytes == r.peaks.peak_active_bytes);
  CHECK(p.fragmentation == r.peaks.fragmentation());
  CHECK(p.num_ooms == 0);
  CHECK(p.tensors == static_cast<std::size_t>(r.stats.allocation[kStatAll].allocated));
}

}  // namespace
}  // namespace vramsim
