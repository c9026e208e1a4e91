// The loss tests' fixture (test_chunked_loss, test_logits_dtype, test_shift_logits_loss): one training step of
// tiny_model("tinyllama-1.1b") (vocab 1000, d_model 64) and the allocation schedule built from it.
#pragma once

#include "graph_test_util.h"
#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/training/training_options.h"

namespace vramsim::test {

// Batch 2 x seq 64, bf16 parameters, one step, no cuBLAS workspace; the caller sets the loss options.
inline TrainingOptions loss_test_options() {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 64;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  return o;
}

// A step's op graph and the allocation schedule built from it.
struct ScheduledRun {
  OpGraph graph;
  AllocationSchedule schedule;
};

inline ScheduledRun loss_test_run(const TrainingOptions& o) {
  ScheduledRun r{build_training_steps(tiny_model("tinyllama-1.1b"), o), {}};
  r.schedule = build_allocation_schedule(r.graph);
  return r;
}

}  // namespace vramsim::test
