// The five torch.compile'd CS336 forwards in shared/traces/real (kkaitlyn111/cs336-a2-systems, PyTorch 2.6,
// Inductor, fp32, batch 4; their frames show Dynamo, AOTAutograd's partitioner and Inductor's generated code)
// against `--compile`: the peak rise of the recorded forward and the bytes each decoder layer leaves saved
// for the backward.
//
// Expected values come from the recordings:
//   * the peak rise is test::peak_rise over the recorded events;
//   * the saved bytes per layer were read off each recording at the layer boundaries: the live bytes at the
//     first allocation of every layer's ln1 (generated-code frames called from transformer.py:57 and :243),
//     differenced between consecutive layers; from the third layer on every difference is the same number
//     (small: 37,826,560; 2.7B: 121,835,520 at ctx 128, 277,225,472 at 256, 688,668,672 at 512).
// Triton's benchmark buffer (256 MiB, triton.testing.do_bench's L2 flush) shows where Inductor autotunes a
// kernel the first time it runs. When that happens depends on what the process (and Inductor's on-disk
// cache) had tuned before; memory_2.7b_forward, run after other forwards, tuned one kernel of the final
// layers, so its peak (4,193,816,576) is a benchmark buffer on top of the forward's activations. The checks
// compare the peak rise without those buffers on both sides, and the peak as recorded, each within 3 %. The
// one recording whose recorded peak misses that (memory_2.7b_forward) is a known miss: its figure is printed
// (WARN) and listed in docs/known-misses.md, not passed over silently.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "graph_test_util.h"
#include "sim/compile/torch_compile.h"
#include "sim/models/transformer_builder.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

struct CompiledRecording {
  const char* file;
  const char* preset;
  int seq;
  WarmProcess warm;       // the process's cuBLAS workspaces, as test_cs336_all_recordings.cpp reads them
  Bytes saved_per_layer;  // read off the recording (above)
  bool known_miss;        // the recorded peak is a Triton benchmark buffer: docs/known-misses.md
};

const CompiledRecording kCompiled[] = {
    {"kkaitlyn111_memory_small_forward.pickle", "cs336-small", 128, WarmProcess::kNone, 37'826'560, false},
    {"kkaitlyn111_memory_2.7b_forward.pickle", "cs336-2.7b", 128, WarmProcess::kForward, 121'835'520, true},
    {"kkaitlyn111_memory_ctx256_forward.pickle", "cs336-2.7b", 256, WarmProcess::kForward, 277'225'472,
     false},
    {"kkaitlyn111_memory_ctx512_forward.pickle", "cs336-2.7b", 512, WarmProcess::kForward, 688'668'672,
     false},
    {"kkaitlyn111_cs336_systems__memory_logs__memory_ctx128_forward.pickle", "cs336-2.7b", 128,
     WarmProcess::kNone, 121'835'520, false},
};

// The events without Triton's benchmark buffers (each an alloc and its free of exactly 256 MiB).
std::vector<TraceEvent> without_benchmark_buffers(const std::vector<TraceEvent>& events) {
  std::vector<TraceEvent> out;
  std::set<Bytes> open;
  for (const TraceEvent& e : events) {
    if (e.size_bytes == kTritonBenchmarkFlushBytes) {
      if (e.action == TraceAction::kAlloc) {
        open.insert(e.addr);
        continue;
      }
      if (open.count(e.addr) != 0) {
        if (e.action == TraceAction::kFreeCompleted) {
          open.erase(e.addr);
        }
        continue;
      }
    }
    out.push_back(e);
  }
  return out;
}

double relative(std::int64_t predicted, std::int64_t recorded) {
  return static_cast<double>(predicted - recorded) / static_cast<double>(recorded);
}

}  // namespace

TEST_CASE("compile: the compiled CS336 forwards, peak rise and saved bytes per layer", "[graph]") {
  if (!test::shared_or_skip("compile: the compiled CS336 forwards")) {
    return;
  }
  for (const CompiledRecording& r : kCompiled) {
    DYNAMIC_SECTION(r.file) {
      const Snapshot rec = load_snapshot((test::shared_real_traces() / r.file).string());
      const std::vector<TraceEvent>& recorded_events = rec.device_traces.at(0).events;
      TrainingOptions o;
      o.batch = 4;
      o.seq = r.seq;
      o.forward_only = true;
      o.warm = r.warm;
      o.compile = CompileMode::kDefault;
      const ModelConfig m = test::kkaitlyn111(model_preset(r.preset));
      const OpGraph graph = build_training_steps(m, o);
      const AllocationSchedule s = build_allocation_schedule(graph);
      const std::size_t begin = s.phase_begin(1, Phase::kForward)->event_index;
      const std::vector<TraceEvent> mine(s.events.begin() + static_cast<std::ptrdiff_t>(begin),
                                         s.events.end());

      const std::int64_t recorded = test::peak_rise(recorded_events);
      const std::int64_t predicted = test::peak_rise(mine);
      const std::int64_t recorded_nb = test::peak_rise(without_benchmark_buffers(recorded_events));
      const std::int64_t predicted_nb = test::peak_rise(without_benchmark_buffers(mine));
      const Bytes saved = saved_activation_bytes(graph, 1, 5);
      INFO("peak rise recorded " << recorded << " predicted " << predicted << " ("
                                 << relative(predicted, recorded) << "); without benchmark buffers "
                                 << recorded_nb << " / " << predicted_nb << "; saved per layer recorded "
                                 << r.saved_per_layer << " predicted " << saved);
      CHECK(std::abs(relative(predicted_nb, recorded_nb)) < 0.03);
      if (r.known_miss) {
        WARN("known miss (docs/known-misses.md): " << r.file << " peak rise predicted " << predicted
                                                   << " recorded " << recorded << " ("
                                                   << relative(predicted, recorded) << ")");
      } else {
        CHECK(std::abs(relative(predicted, recorded)) < 0.03);
      }
      CHECK(std::abs(relative(static_cast<std::int64_t>(saved),
                              static_cast<std::int64_t>(r.saved_per_layer))) < 0.02);
      // eager PyTorch would save a third more per layer (the README's eager rows): the compiled model is not
      // the eager one relabelled
      o.compile = CompileMode::kNone;
      CHECK(saved_activation_bytes(build_training_steps(m, o), 1, 5) > saved * 13 / 10);
    }
  }
}

// The allocations one decoder layer makes in the compiled forward, against memory_small_forward's: the
// generated code's allocations between the first RMSNorm allocations of layers 5 and 6 (frames: the
// torchinductor output file, called from transformer.py:57/:243), 17 of them, all alive at the end of the
// forward (saved for the backward); the projections' outputs and every other temporary take freed buffers
// (Inductor's reuse) and allocate nothing. Checked: the model makes every one of them. It also saves both of
// the softmax's row statistics (max values and sum, b·h·s fp32 = 24,576 B each) where the recording saves
// one: that extra request is printed and listed in docs/known-misses.md.
TEST_CASE("compile: one layer's allocations in the compiled forward, as memory_small_forward makes them",
          "[graph]") {
  const ModelConfig m = test::kkaitlyn111(model_preset("cs336-small"));
  TrainingOptions o;
  o.batch = 4;
  o.seq = 128;
  o.forward_only = true;
  o.compile = CompileMode::kDefault;
  const OpGraph g = build_training_steps(m, o);
  std::multiset<Bytes> mine;
  for (const Tensor& t : g.tensors()) {
    if (t.layer == 5 && t.category != TensorCategory::kParameter) {
      mine.insert(t.size_bytes);
      CHECK(t.category == TensorCategory::kActivation);
    }
  }
  std::multiset<Bytes> recorded;
  for (const auto& [size, count] : std::vector<std::pair<Bytes, int>>{
           {1'572'864, 8}, {2'048, 2}, {24'576, 1}, {49'152, 1}, {3'145'728, 2}, {6'291'456, 3}}) {
    for (int k = 0; k < count; ++k) {
      recorded.insert(size);
    }
  }
  REQUIRE(recorded.size() == 17);
  std::vector<Bytes> missing, extra;
  std::set_difference(recorded.begin(), recorded.end(), mine.begin(), mine.end(),
                      std::back_inserter(missing));
  std::set_difference(mine.begin(), mine.end(), recorded.begin(), recorded.end(), std::back_inserter(extra));
  CHECK(missing.empty());
  for (const Bytes b : extra) {
    WARN("known miss (docs/known-misses.md): the model's layer 5 also saves " << b << " B");
  }
}
