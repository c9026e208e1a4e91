// Every recorded CS336 step in shared/traces/real (the 16 kkaitlyn111/cs336-a2-systems files and MAGMA27's)
// against the step simulator: the peak rise of the recorded region (peak live requested bytes minus those
// at its start, test::peak_rise) versus the rise the simulator predicts for the same configuration.
//
// How each configuration was read off the recording (pickle frames, allocation sizes, the scripts):
//   * batch and context: the logits request b*s*V*4 (V = 10000) and the attention scores b*h*s*s*4;
//     d_model from b*s*d*4 and the parameter blocks; 32 layers (2.7B) or 12 (small) from the repeats.
//   * code: every kkaitlyn111 frame runs cs336_basics/transformer.py (TransformerLM of
//     kkaitlyn111/cs336-assignment1: the test fixture "cs336-kkaitlyn111" of kkaitlyn111_code.cpp, also for
//     the d768 "small" model); MAGMA27 runs the staff BasicsTransformerLM (the library's "cs336-basics").
//   * eager or compiled: five recordings (memory_small_forward, memory_2.7b_forward, the root-level
//     memory_ctx256/512_forward and cs336_systems/memory_logs/memory_ctx128_forward) have Dynamo/Inductor
//     frames (convert_frame.py, output_code.py, triton_heuristics.py autotuning): torch.compile'd forwards.
//     test_compile_recordings.cpp checks them against --compile; here, the eager prediction of them (what a
//     user who leaves out --compile gets) is checked to be on the high side.
//   * cuBLAS workspace: the simulator allocates one 32 MiB workspace at the first matmul of the main thread
//     and one at the first of the autograd thread (as a fresh process does). A recording shows its own as an
//     alloc from at::cuda::getNewWorkspace(); where the process had already made it (a later run of the
//     same process, see INDEX.json's reserved-at-start chains and benchmark.py's order of runs), it is
//     missing from the trace. That history is what TrainingOptions::warm (`--warm`) states: with it the
//     prediction is exact; with the default (a fresh process) it is higher by that many workspaces.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

enum class Region : std::uint8_t {
  kForward,         // one forward with autograd on (the rest of the step never runs)
  kFullStep,        // zero_grad (a no-op: no gradients yet), forward, loss, backward, the for-loop AdamW
  kStep2FwdLossBwd  // MAGMA27: forward, loss and backward after earlier steps, gradients accumulating
};

struct Recording {
  const char* file;
  const char* code;    // a LayerCode name (sim/models/layer_code.h)
  const char* preset;  // dimensions; `code` may differ from the preset's own
  int batch;
  int seq;
  Precision precision;
  Region region;
  // What the recorded process had run before the trace (its cuBLAS workspaces exist).
  WarmProcess warm;
  bool compiled;  // a torch.compile'd forward (Dynamo/Inductor frames in the pickle)
};

constexpr const char* kStudent = "cs336-kkaitlyn111";  // tests/graph/kkaitlyn111_code.cpp
constexpr const char* kStaff = "cs336-basics";
constexpr const char* k27b = "cs336-2.7b";
constexpr const char* kSmall = "cs336-small";
constexpr Precision kF32 = Precision::kFp32;
constexpr Precision kBf16 = Precision::kAmpBf16;
constexpr Region kFwd = Region::kForward;
constexpr Region kFull = Region::kFullStep;
constexpr Region kStep2 = Region::kStep2FwdLossBwd;
constexpr WarmProcess kFresh = WarmProcess::kNone;
constexpr WarmProcess kAfterForward = WarmProcess::kForward;
constexpr WarmProcess kAfterStep = WarmProcess::kStep;

const std::vector<Recording> kRecordings = {
    // eager: benchmark.py run_memory_foward_fullstep / profile_memory_forward_fullstep (batch 4, fp32
    // unless _mixed). A file whose process ran an earlier forward lacks the main thread's workspace.
    {"kkaitlyn111_memory_ctx128_forward.pickle", kStudent, k27b, 4, 128, kF32, kFwd, kFresh, false},
    {"kkaitlyn111_memory_files__memory_ctx128_forward.pickle", kStudent, k27b, 4, 128, kF32, kFwd, kFresh,
     false},
    {"kkaitlyn111_memory_files__memory_ctx128_forward_.pickle", kStudent, k27b, 4, 128, kF32, kFwd, kFresh,
     false},
    {"kkaitlyn111_memory_files__memory_ctx256_forward_.pickle", kStudent, k27b, 4, 256, kF32, kFwd,
     kAfterForward, false},
    {"kkaitlyn111_memory_files__memory_ctx512_forward_.pickle", kStudent, k27b, 4, 512, kF32, kFwd,
     kAfterForward, false},
    {"kkaitlyn111_memory_files__memory_ctx128_forward_mixed.pickle", kStudent, k27b, 4, 128, kBf16, kFwd,
     kFresh, false},
    {"kkaitlyn111_memory_files__memory_ctx512_forward_mixed.pickle", kStudent, k27b, 4, 512, kBf16, kFwd,
     kAfterForward, false},
    // full steps: the first in its process makes both workspaces inside the trace; after a forward only the
    // autograd thread's; after an earlier full step neither.
    {"kkaitlyn111_memory_ctx128_fullstep.pickle", kStudent, k27b, 4, 128, kF32, kFull, kAfterForward, false},
    {"kkaitlyn111_memory_files__memory_ctx128_fullstep.pickle", kStudent, k27b, 4, 128, kF32, kFull, kFresh,
     false},
    {"kkaitlyn111_memory_files__memory_ctx128_fullstep_.pickle", kStudent, k27b, 4, 128, kF32, kFull,
     kAfterForward, false},
    {"kkaitlyn111_memory_files__memory_ctx256_fullstep_.pickle", kStudent, k27b, 4, 256, kF32, kFull,
     kAfterStep, false},
    // MAGMA27 benchmarking_script.py: batch 32, ctx 256, fp32, 5 warm-up fwd+bwd without zero_grad.
    {"MAGMA27_memory_snapshot.pickle", kStaff, kSmall, 32, 256, kF32, kStep2, kFresh, false},
    // torch.compile'd forwards (fp32, batch 4), Dynamo tracing and Inductor autotuning inside the trace.
    {"kkaitlyn111_memory_small_forward.pickle", kStudent, kSmall, 4, 128, kF32, kFwd, kFresh, true},
    {"kkaitlyn111_memory_2.7b_forward.pickle", kStudent, k27b, 4, 128, kF32, kFwd, kAfterForward, true},
    {"kkaitlyn111_memory_ctx256_forward.pickle", kStudent, k27b, 4, 256, kF32, kFwd, kAfterForward, true},
    {"kkaitlyn111_memory_ctx512_forward.pickle", kStudent, k27b, 4, 512, kF32, kFwd, kAfterForward, true},
    {"kkaitlyn111_cs336_systems__memory_logs__memory_ctx128_forward.pickle", kStudent, k27b, 4, 128, kF32,
     kFwd, kFresh, true},
};

constexpr Bytes kWorkspace = 32 * kMiB;  // at::cuda::getNewWorkspace() in every recording that has one

ModelConfig model_of(const Recording& r) {
  ModelConfig m = model_preset(r.preset);
  m.code = r.code;
  return m;
}

TrainingOptions options_of(const Recording& r) {
  TrainingOptions o;
  o.batch = r.batch;
  o.seq = r.seq;
  o.precision = r.precision;
  o.autocast_whole_step = r.precision != Precision::kFp32;  // the _mixed dumps happen inside autocast
  switch (r.region) {
    case Region::kForward:
      o.forward_only = true;
      break;
    case Region::kFullStep:
      o.optimizer_impl = OptimizerImpl::kForLoop;  // cs336_basics.optimizers.AdamW: a per-parameter loop
      break;
    case Region::kStep2FwdLossBwd:
      // Step 2 of SGD without zeroing: gradients exist and are accumulated into; SGD adds no tensors.
      o.steps = 2;
      o.optimizer = OptimizerKind::kSgd;
      o.zero_grad_set_to_none = false;
      o.device = CudaDevice{108, 2048, 80};  // MAGMA27's GPU is Ampere-class (test_cs336_recordings.cpp)
      break;
  }
  return o;
}

// The simulated peak rise over the region the recording covers, for a process with that history.
std::int64_t predicted_rise(const Recording& r, WarmProcess warm) {
  TrainingOptions o = options_of(r);
  o.warm = warm;
  const AllocationSchedule s = build_allocation_schedule(build_training_steps(model_of(r), o));
  if (r.region == Region::kStep2FwdLossBwd) {
    return test::peak_rise(s.events, s.phase_begin(2, Phase::kForward)->event_index,
                           s.phase_begin(2, Phase::kOptimizer)->event_index);
  }
  return test::peak_rise(s.events, s.phase_begin(1, Phase::kForward)->event_index);
}

}  // namespace

TEST_CASE("cs336: every real recorded step, peak rise predicted vs recorded", "[graph]") {
  if (!test::shared_or_skip("cs336: every real recorded step")) {
    return;
  }
  for (const Recording& r : kRecordings) {
    DYNAMIC_SECTION(r.file) {
      const Snapshot rec = load_snapshot((test::shared_real_traces() / r.file).string());
      const std::int64_t recorded = test::peak_rise(rec.device_traces.at(0).events);
      const std::int64_t predicted = predicted_rise(r, kFresh);
      const double error = static_cast<double>(predicted - recorded) / static_cast<double>(recorded);
      INFO("recorded " << recorded << " predicted " << predicted << " error " << error);
      if (!r.compiled) {
        // Eager: exact for a process with the recording's history (--warm); as a fresh process (the
        // default) higher by the workspaces the process already had: one 32 MiB workspace over a 12.6 GB
        // rise (memory_ctx256_forward_) is the largest relative error, 0.27 %.
        CHECK(predicted_rise(r, r.warm) == recorded);
        const int workspaces = r.warm == kAfterStep ? 2 : r.warm == kAfterForward ? 1 : 0;
        CHECK(predicted - workspaces * static_cast<std::int64_t>(kWorkspace) == recorded);
        CHECK(std::abs(error) < 0.003);
      } else {
        // torch.compile: Inductor's partitioner saves fewer tensors per layer than eager autograd does
        // (2.7B ctx 128: 121,835,520 recorded), so the eager model is high (35-44 %, README); an eager
        // prediction of a compiled run must not say "fits" where the run does not.
        CHECK(predicted > recorded);
      }
    }
  }
}

TEST_CASE("cs336: every eager recording, request for request", "[graph]") {
  if (!test::shared_or_skip("cs336: every eager recording, request for request")) {
    return;
  }
  for (const Recording& r : kRecordings) {
    if (r.compiled) {
      continue;
    }
    DYNAMIC_SECTION(r.file) {
      const Snapshot rec = load_snapshot((test::shared_real_traces() / r.file).string());
      TrainingOptions o = options_of(r);
      o.warm = r.warm;
      const AllocationSchedule s = build_allocation_schedule(build_training_steps(model_of(r), o));
      const int step = r.region == Region::kStep2FwdLossBwd ? 2 : 1;
      const std::size_t begin = s.phase_begin(step, Phase::kForward)->event_index;
      const std::vector<Bytes> recorded = test::alloc_sizes(rec.device_traces.at(0).events);
      std::vector<Bytes> mine = test::alloc_sizes(s.events, begin);
      std::size_t same = 0;
      while (same < recorded.size() && same < mine.size() && recorded[same] == mine[same]) {
        ++same;
      }
      INFO(same << " of " << recorded.size() << " recorded requests match in order");
      // Every allocation in order: forward, the loss, backward and the optimizer step. For the full steps
      // this needs the student loss that ran (kkaitlyn111_code.cpp: max with indices, indexing with a host
      // arange), einsum(weight, x)'s layout (the logits and every input gradient of a Linear have their
      // last dimension outermost, so reductions over it stage partial results in global memory:
      // 164,626,432 + 16 B for the loss's max, 41,156,608 + 16 B for its sum, 10,485,760 + 16 B per
      // RMSNorm backward), norm_backward's quotient and mask, and the CopySlices/select backward of the
      // student RoPE.
      CHECK(same == recorded.size());
      CHECK(mine == recorded);
    }
  }
}

TEST_CASE("cs336: memory_snapshot.pickle (no trace), live tensors after a 2.7B ctx 256 full step",
          "[graph]") {
  if (!test::shared_or_skip("cs336: kkaitlyn111_memory_snapshot")) {
    return;
  }
  // Segments only, so there is no rise to compare: compare the requested bytes of its live blocks with what
  // the simulator holds after optimizer.step(). The blocks say what ran (counted by hand below from
  // cs336-2.7b: d 2,560, d_ff 10,240, 32 layers, vocab 10,000): 4 x 32 x 3 blocks of d*f*4 = 104,857,600
  // and 4 x 32 x 4 of d*d*4 = 26,214,400 (parameters, gradients, exp_avg, exp_avg_sq), logits of
  // b*s*V*4 = 40,960,000 (batch 4, ctx 256), two 32 MiB workspaces, the 8,192-byte token batch, a 4-byte
  // loss.
  const Snapshot rec =
      load_snapshot((test::shared_real_traces() / "kkaitlyn111_memory_snapshot.pickle").string());
  std::int64_t recorded = 0;
  std::map<Bytes, int> blocks_of_size;
  for (const SnapshotSegment& seg : rec.segments) {
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state == BlockState::kActiveAllocated) {
        recorded += static_cast<std::int64_t>(b.requested_bytes);
        ++blocks_of_size[b.requested_bytes];
      }
    }
  }
  CHECK(blocks_of_size[104857600] == 4 * 32 * 3);
  CHECK(blocks_of_size[26214400] == 4 * 32 * 4);
  TrainingOptions o;
  o.batch = 4;
  o.seq = 256;
  o.optimizer_impl = OptimizerImpl::kForLoop;
  const OpGraph g = build_training_steps(test::kkaitlyn111(model_preset("cs336-2.7b")), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::int64_t predicted = *s.live_bytes_at(1, Phase::kZeroGrad);
  // Model states by hand: Ψ = 32 x (4 d^2 + 3 d f + 2 d) + 2 V d + d = 3,406,809,600 parameters, fp32, each
  // with a gradient and AdamW's two states (the hand-written AdamW keeps its step count in Python).
  const MemoryBill bill = live_bill(g, s, s.phase_begin(1, Phase::kZeroGrad)->event_index);
  CHECK(bill.parameters == 4 * 3406809600LL);
  CHECK(bill.gradients == 4 * 3406809600LL);
  CHECK(bill.optimizer_states == 8 * 3406809600LL);
  // Everything live, to 0.1 % (the tolerance the README's eager CS336 rows use). What differs is reported in
  // docs/known-misses.md (a second 40,960,000-byte tensor in the snapshot that no frame explains, the student
  // RoPE buffer the model leaves out, the labels tensor it adds), not asserted.
  const double error = static_cast<double>(predicted - recorded) / static_cast<double>(recorded);
  INFO("live bytes predicted " << predicted << " recorded " << recorded << " (" << error << ")");
  CHECK(std::abs(error) < 0.001);
}
