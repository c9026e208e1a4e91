// The CS336 model codes against real recordings of them (traces/samples, and shared/traces/real when
// present): the simulated schedule must allocate the same sizes in the same order, and rise to the same peak.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "graph_test_util.h"
#include "recorded_peaks.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/gpu_memory.h"
#include "sim/replay/trace_replay.h"
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

TEST_CASE(
    "cs336 staff model d768 (MAGMA27): every allocation of forward, loss and backward, in order, the "
    "recorded peaks",
    "[quick][graph]") {
  // MAGMA27/assignment2-systems memory_snapshot.pickle (PyTorch 2.11, CUDA 12.6): batch 32, ctx 256, fp32;
  // after 5 warm-up steps without zero_grad, one forward + cross_entropy + backward. Simulated as step 6 of
  // SGD with zero_grad(set_to_none=False): gradients exist and are accumulated into, SGD adds no tensors.
  // The recording's last request, CUB's radix-sort storage for the token-embedding gradient (138,751 B),
  // is what DispatchRadixSort's SM80 policy asks for (SM90's would be 137,727 B): an Ampere-class GPU.
  const Snapshot rec =
      load_snapshot((test::source_dir() / "traces/samples/MAGMA27_memory_snapshot.pickle").string());
  TrainingOptions o;
  o.batch = 32;
  o.seq = 256;
  o.steps = 6;
  o.optimizer = OptimizerKind::kSgd;
  o.zero_grad_set_to_none = false;
  o.device = CudaDevice{108, 2048, 80};                                           // A100
  o.cublas_workspace_bytes = static_cast<Bytes>(cublas_workspace_bytes(80, ""));  // 8 MiB + 128 KiB
  const OpGraph g = build_training_steps(model_preset("cs336-small"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t begin = s.phase_begin(6, Phase::kForward)->event_index;
  const std::size_t end = s.phase_begin(6, Phase::kOptimizer)->event_index;
  const std::vector<TraceEvent>& events = rec.device_traces.at(0).events;
  // Every request, size for size (1,721: forward, loss, backward down to the embedding's sort)
  const std::vector<Bytes> recorded = test::alloc_sizes(events);
  REQUIRE(recorded.size() == 1721);
  CHECK(test::alloc_sizes(s.events, begin, end) == recorded);
  CHECK(test::peak_rise(s.events, begin, end) == test::peak_rise(events));
  // Through the allocator model from an empty device, the six steps reserve what the process had reserved
  // (the recording's segments, no cudaMalloc inside the trace), and step 6 peaks at the recorded peak. The
  // recorded peaks are read off the file (tests/recorded_peaks.h: segment sizes and block sizes, not the
  // allocator model); by hand from its 216 segments, 14,180,941,824 B reserved (INDEX.json:
  // peak_reserved_during_trace_bytes, 13.21 GiB).
  const test::RecordedPeaks recorded_peaks = test::recorded_peaks(rec);
  REQUIRE(recorded_peaks.peak_reserved == 14180941824);
  const ReplayResult predicted =
      replay_snapshot(schedule_to_snapshot(s, "MAGMA27 predicted"), ReplayOptions{});
  CHECK(predicted.peaks.peak_reserved_bytes == recorded_peaks.peak_reserved);
  // Allocated bytes count a large block's unsplit remainder (at most 1 MiB: spec 3.1, S3), which depends on
  // where the five steps before the trace placed each block; the requests are the same, so only that may
  // differ.
  CHECK(std::llabs(static_cast<long long>(predicted.peaks.peak_allocated_bytes) -
                   static_cast<long long>(recorded_peaks.peak_allocated)) < kMiB);
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
