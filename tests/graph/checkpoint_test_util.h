// Shared by the torch.utils.checkpoint tests (test_checkpoint_early_stop.cpp, test_checkpoint_impl.cpp): the
// tiny Llama of graph_test_util.h checkpointed per decoder layer, and where in step 1's backward its bytes
// are looked at.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

namespace vramsim::test {

// One b x s x d fp32 tensor of the tiny Llama at batch 2, 32 tokens, hidden 64: 2 x 32 x 64 x 4 = 16,384 B.
constexpr std::int64_t kCheckpointHidden = 2 * 32 * 64 * 4;

// Two steps of the tiny Llama (small_options: batch 2, seq 32, fp32, adamw) under --checkpointing full with
// these torch.utils.checkpoint settings.
inline OpGraph checkpointed_llama(const CheckpointOptions& c) {
  TrainingOptions o = small_options();
  o.checkpointing = Checkpointing::kFull;
  o.checkpoint = c;
  return build_training_steps(tiny_model("llama-2-7b"), o);
}

// The allocated bytes at most in step 1's backward from the first event of op `from` (inclusive) to the
// first event after it whose op satisfies `stop` (exclusive); -1 if `from` never runs.
template <typename Stop>
std::int64_t backward_peak_between(const OpGraph& g, const std::string& from, Stop stop) {
  const AllocationSchedule s = build_allocation_schedule(g);
  check_schedule_invariants(g, s);
  const std::size_t begin = s.phase_begin(1, Phase::kBackward)->event_index;
  const std::size_t end = s.phase_begin(1, Phase::kOptimizer)->event_index;
  std::int64_t peak = -1;
  bool inside = false;
  for (std::size_t i = begin; i < end; ++i) {
    const std::string& op = s.strings[s.events[i].op_tag];
    if (inside && op != from && stop(op)) {
      break;
    }
    inside = inside || op == from;
    if (inside) {
      peak = std::max(peak, s.live_bytes_after[i]);
    }
  }
  return peak;
}

// The recomputation of decoder layer `layer`: from its first recomputed op (the input RMSNorm's pow) to the
// first op of the layer's backward.
inline std::int64_t recomputation_peak(const OpGraph& g, int layer) {
  return backward_peak_between(g, "layers." + std::to_string(layer) + ".input_layernorm.pow",
                               [](const std::string& op) { return op.ends_with(".backward"); });
}

// Bytes allocated in step 1's backward by the op named `op`.
inline std::int64_t allocated_in_backward_by(const OpGraph& g, const std::string& op) {
  const AllocationSchedule s = build_allocation_schedule(g);
  const std::size_t begin = s.phase_begin(1, Phase::kBackward)->event_index;
  const std::size_t end = s.phase_begin(1, Phase::kOptimizer)->event_index;
  std::int64_t bytes = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const TraceEvent& e = s.events[i];
    if (e.action == TraceAction::kAlloc && s.strings[e.op_tag] == op) {
      bytes += static_cast<std::int64_t>(e.size_bytes);
    }
  }
  return bytes;
}

}  // namespace vramsim::test
