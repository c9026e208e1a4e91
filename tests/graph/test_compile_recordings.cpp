#include <catch2/catch.hpp>

#include <map>

#include "graph_test_util.h"
#include "sim/graph/transformer_builder.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

TEST_CASE("compile scratch", "[graph]") {
  if (!test::shared_or_skip("compile scratch")) {
    return;
  }
  struct R { const char* file; const char* preset; int seq; WarmProcess warm; };
  for (R r : {R{"kkaitlyn111_memory_small_forward.pickle", "cs336-small", 128, WarmProcess::kNone},
              R{"kkaitlyn111_memory_2.7b_forward.pickle", "cs336-2.7b", 128, WarmProcess::kNone},
              R{"kkaitlyn111_memory_ctx256_forward.pickle", "cs336-2.7b", 256, WarmProcess::kNone},
              R{"kkaitlyn111_memory_ctx512_forward.pickle", "cs336-2.7b", 512, WarmProcess::kNone},
              R{"kkaitlyn111_cs336_systems__memory_logs__memory_ctx128_forward.pickle", "cs336-2.7b", 128, WarmProcess::kNone}}) {
    const Snapshot rec = load_snapshot((test::shared_real_traces() / r.file).string());
    const std::int64_t recorded = test::peak_rise(rec.device_traces.at(0).events);
    ModelConfig m = test::kkaitlyn111(model_preset(r.preset));
    TrainingOptions o;
    o.batch = 4;
    o.seq = r.seq;
    o.forward_only = true;
    o.warm = r.warm;
    o.compile = CompileMode::kDefault;
    const OpGraph graph = build_training_steps(m, o);
    WARN("saved per layer " << saved_activation_bytes(graph, 1, 5));
    if (std::string(r.preset) == "cs336-small") {
      for (const Tensor& t : graph.tensors()) {
        if (t.layer == 5 && t.category == TensorCategory::kActivation) {
          WARN("  " << t.name << " " << t.size_bytes);
        }
      }
    }
    const AllocationSchedule s = build_allocation_schedule(graph);
    const std::int64_t predicted = test::peak_rise(s.events, s.phase_begin(1, Phase::kForward)->event_index);
    o.compile = CompileMode::kNone;
    const AllocationSchedule e = build_allocation_schedule(build_training_steps(m, o));
    const std::int64_t eager = test::peak_rise(e.events, e.phase_begin(1, Phase::kForward)->event_index);
    WARN(r.file << " recorded " << recorded << " compiled " << predicted << " ("
                << 100.0 * (predicted - recorded) / recorded << "%) eager " << eager << " allocs "
                << test::alloc_sizes(s.events, s.phase_begin(1, Phase::kForward)->event_index).size());
  }
}

TEST_CASE("compile scratch alive", "[graph]") {
  ModelConfig m = test::kkaitlyn111(model_preset("cs336-small"));
  TrainingOptions o;
  o.batch = 4;
  o.seq = 128;
  o.forward_only = true;
  o.compile = CompileMode::kDefault;
  const OpGraph graph = build_training_steps(m, o);
  const AllocationSchedule s = build_allocation_schedule(graph);
  std::map<Bytes, int> alive;
  std::map<std::uint64_t, Bytes> live;
  std::size_t begin = s.phase_begin(1, Phase::kForward)->event_index;
  for (std::size_t i = begin; i <= s.peak_event_index; ++i) {
    const auto& e = s.events[i];
    if (e.action == TraceAction::kAlloc) live[s.event_tensor[i]] = e.size_bytes;
    if (e.action == TraceAction::kFreeRequested) live.erase(s.event_tensor[i]);
  }
  for (auto& [a, b] : live) alive[b]++;
  WARN("events " << s.events.size() << " begin " << begin << " live " << live.size());
  for (auto& [b, n] : alive) WARN(b << " " << n);
}
