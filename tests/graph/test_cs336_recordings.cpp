// The CS336 model codes against real recordings of them (traces/samples, and shared/traces/real when
// present): the simulated schedule must allocate the same sizes in the same order, and rise to the same peak.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/graph/transformer_builder.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

TEST_CASE("cs336 kkaitlyn111 2.7B forward, ctx 128, fp32: every allocation of the recording, in order",
          "[quick][graph]") {
  // kkaitlyn111/cs336-a2-systems memory_ctx128_forward.pickle: batch 4, one forward with autograd on, the
  // first of the process's chain (its cuBLAS workspace is allocated inside the trace).
  const Snapshot rec = load_snapshot(
      (test::source_dir() / "traces/samples/kkaitlyn111_memory_ctx128_forward.pickle").string());
  TrainingOptions o;
  o.batch = 4;
  o.seq = 128;
  o.forward_only = true;
  const OpGraph g = build_training_steps(test::kkaitlyn111(model_preset("cs336-2.7b")), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t forward = s.phase_begin(1, Phase::kForward)->event_index;
  const std::vector<TraceEvent>& events = rec.device_traces.at(0).events;
  CHECK(test::alloc_sizes(s.events, forward) == test::alloc_sizes(events));
  CHECK(test::peak_rise(s.events, forward) == test::peak_rise(events));
}

TEST_CASE("cs336 staff model d768 (MAGMA27): forward, loss and loss backward allocate as recorded; same peak",
          "[quick][graph]") {
  // MAGMA27/assignment2-systems memory_snapshot.pickle: batch 32, ctx 256, fp32; after 5 warm-up steps
  // without zero_grad, one forward + cross_entropy + backward. Simulated as step 2 of SGD with
  // zero_grad(set_to_none=False): gradients exist and are accumulated into, SGD adds no tensors.
  const Snapshot rec =
      load_snapshot((test::source_dir() / "traces/samples/MAGMA27_memory_snapshot.pickle").string());
  TrainingOptions o;
  o.batch = 32;
  o.seq = 256;
  o.steps = 2;
  o.optimizer = OptimizerKind::kSgd;
  o.zero_grad_set_to_none = false;
  const OpGraph g = build_training_steps(model_preset("cs336-small"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t begin = s.phase_begin(2, Phase::kForward)->event_index;
  const std::size_t end = s.phase_begin(2, Phase::kOptimizer)->event_index;
  const std::vector<Bytes> mine = test::alloc_sizes(s.events, begin, end);
  const std::vector<Bytes> recorded = test::alloc_sizes(rec.device_traces.at(0).events);
  // The forward, the loss and its backward down to lm_head (665 allocations) match one for one; deeper in
  // the backward, PyTorch's reduction kernels add scratch we do not model (e.g. a 2x staging buffer when
  // a broadcast weight's gradient is summed), and some nodes order their two gradients the other way.
  REQUIRE(mine.size() > 665);
  CHECK(std::vector<Bytes>(mine.begin(), mine.begin() + 665) ==
        std::vector<Bytes>(recorded.begin(), recorded.begin() + 665));
  CHECK(test::peak_rise(s.events, begin, end) == test::peak_rise(rec.device_traces.at(0).events));
}

TEST_CASE("cs336 kkaitlyn111 2.7B full step, ctx 128, fp32 AdamW: the recorded peak rise", "[quick][graph]") {
  if (!test::shared_or_skip("cs336 kkaitlyn111 full step")) {
    return;
  }
  // memory_ctx128_fullstep.pickle: zero_grad, forward, cross-entropy, backward, the hand-written AdamW
  // (states created inside its per-parameter loop). The process had already run a forward, so the main
  // thread's cuBLAS workspace predates the trace; the autograd thread's is allocated inside it.
  const Snapshot rec =
      load_snapshot((test::shared_real_traces() / "kkaitlyn111_memory_ctx128_fullstep.pickle").string());
  TrainingOptions o;
  o.batch = 4;
  o.seq = 128;
  o.optimizer_impl = OptimizerImpl::kForLoop;
  const OpGraph g = build_training_steps(test::kkaitlyn111(model_preset("cs336-2.7b")), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t begin = s.phase_begin(1, Phase::kForward)->event_index;
  const std::int64_t workspace = static_cast<std::int64_t>(o.cublas_workspace_bytes);
  CHECK(test::peak_rise(s.events, begin) - workspace == test::peak_rise(rec.device_traces.at(0).events));
}

TEST_CASE("cs336 kkaitlyn111 2.7B forward under autocast bf16, ctx 128 and 512: every allocation, in order",
          "[quick][graph]") {
  if (!test::shared_or_skip("cs336 kkaitlyn111 autocast forward")) {
    return;
  }
  // memory_files/memory_ctx{128,512}_forward_mixed.pickle: torch.autocast(bfloat16) around the forward;
  // the ctx-512 run came later in the same process, so its cuBLAS workspace predates the trace.
  for (const int seq : {128, 512}) {
    INFO("seq " << seq);
    const std::string file =
        "kkaitlyn111_memory_files__memory_ctx" + std::to_string(seq) + "_forward_mixed.pickle";
    const Snapshot rec = load_snapshot((test::shared_real_traces() / file).string());
    TrainingOptions o;
    o.batch = 4;
    o.seq = seq;
    o.forward_only = true;
    o.precision = Precision::kAmpBf16;
    o.autocast_whole_step = true;  // the recording dumped the snapshot inside the autocast region
    if (seq == 512) {
      o.cublas_workspace_bytes = 0;
    }
    const OpGraph g = build_training_steps(test::kkaitlyn111(model_preset("cs336-2.7b")), o);
    const AllocationSchedule s = build_allocation_schedule(g);
    const std::size_t forward = s.phase_begin(1, Phase::kForward)->event_index;
    CHECK(test::alloc_sizes(s.events, forward) == test::alloc_sizes(rec.device_traces.at(0).events));
    CHECK(test::peak_rise(s.events, forward) == test::peak_rise(rec.device_traces.at(0).events));
  }
}
