// The step on the engine's time axis: event order and times from hand-built graphs with hand-computed
// durations, and the properties a real training step must keep (one stream: the schedule's own order).
#include <catch2/catch.hpp>

#include <algorithm>

#include "sim/graph/model_config.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/graph/transformer_builder.h"
#include "sim/predict/step_timeline.h"

using namespace vramsim;

namespace {

// A GPU with round numbers: 1e12 FLOP/s at every precision, 1e12 B/s, no launch overhead, 100% efficiency,
// so an op of F FLOPs (and few bytes) takes F / 1000 ns.
GpuSpec round_gpu() {
  return GpuSpec{"round", "test", kGiB, kGiB, 1e12, 1e12, 1e12, 1e12, 1e12, 1e12, 0, 80, 108, 2048};
}
RooflineConfig ideal() {
  RooflineConfig c;
  c.compute_efficiency = 1.0;
  c.memory_efficiency = 1.0;
  return c;
}

OpId add_op(OpGraph& g, const std::string& name, StreamId stream, double flops, int step = 1) {
  Op op;
  op.name = name;
  op.kind = "mul";
  op.step = step;
  op.stream = stream;
  op.flops = flops;
  return g.add_op(op);
}

TensorId add_tensor(OpGraph& g, const std::string& name, OpId producer, Bytes size) {
  Tensor t;
  t.name = name;
  t.size_bytes = size;
  t.producer = producer;
  return g.add_tensor(t);
}

}  // namespace

TEST_CASE("timeline: a side stream reorders the allocator's events, times by hand", "[quick][predict]") {
  // Host order A (stream 0), B (stream 1, reads a), C (stream 0); durations F / 1000 ns.
  //   A: 1e6 FLOPs -> [0, 1000) on stream 0; allocates a (1 KiB) at 0.
  //   B: waits for A's event; 3e6 FLOPs -> [1000, 4000) on stream 1; allocates b at 1000; as a's last user
  //      it frees a at 4000, and b (read by nobody) too.
  //   C: 2e6 FLOPs -> [1000, 3000) on stream 0; allocates c at 1000, frees it at 3000.
  // Schedule order (op by op): alloc a, alloc b, free a, free b, alloc c, free c.
  // Engine order (by time):    alloc a @0, alloc c @1000, alloc b @1000, free c @3000, free a, free b @4000.
  OpGraph g;
  const OpId a_op = add_op(g, "A", 0, 1e6);
  const OpId b_op = add_op(g, "B", 1, 3e6);
  const OpId c_op = add_op(g, "C", 0, 2e6);
  const TensorId a = add_tensor(g, "a", a_op, 1024);
  const TensorId b = add_tensor(g, "b", b_op, 2048);
  const TensorId c = add_tensor(g, "c", c_op, 4096);
  g.add_consumer(a, b_op);
  (void)b;
  (void)c;
  const AllocationSchedule s = build_allocation_schedule(g);
  const GpuSpec gpu = round_gpu();
  const Roofline roofline(gpu, ideal());
  const Timeline t = simulate_timeline(g, s, &roofline);

  CHECK(t.ops[a_op].start_ns == 0);
  CHECK(t.ops[a_op].end_ns == 1000);
  CHECK(t.ops[b_op].start_ns == 1000);
  CHECK(t.ops[b_op].end_ns == 4000);
  CHECK(t.ops[c_op].start_ns == 1000);
  CHECK(t.ops[c_op].end_ns == 3000);
  CHECK(t.end_ns == 4000);
  REQUIRE(t.steps.size() == 1);
  CHECK(t.steps[0].duration_ns() == 4000);
  CHECK(t.steps[0].kernels == 3);

  const AllocationSchedule timed = timed_schedule(g, s, t);
  REQUIRE(timed.events.size() == 9);  // 3 allocs + 3 x (free_requested, free_completed)
  struct Expect {
    TraceAction action;
    TensorId tensor;
    TimeNs time_ns;
    StreamId stream;
  };
  // alloc b and alloc c both happen at 1000. Stream 0 moves on to C as soon as A ends (streams.h: an op's
  // end, then the next op on the same stream), while B starts when A's recorded event completes, which the
  // engine dispatches after that: C first.
  const std::vector<Expect> expected = {
      {TraceAction::kAlloc, a, 0, 0},
      {TraceAction::kAlloc, c, 1000, 0},
      {TraceAction::kAlloc, b, 1000, 1},
      {TraceAction::kFreeRequested, c, 3000, 0},
      {TraceAction::kFreeCompleted, c, 3000, 0},
      {TraceAction::kFreeRequested, a, 4000, 1},
      {TraceAction::kFreeCompleted, a, 4000, 1},
      {TraceAction::kFreeRequested, b, 4000, 1},
      {TraceAction::kFreeCompleted, b, 4000, 1},
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("event " << i);
    CHECK(timed.events[i].action == expected[i].action);
    CHECK(timed.event_tensor[i] == expected[i].tensor);
    CHECK(timed.events[i].time_ns == expected[i].time_ns);
    CHECK(timed.events[i].stream == expected[i].stream);
  }
  // Live bytes follow the new order: 1 KiB + 2 KiB + 4 KiB are live together at 1000 ns.
  CHECK(timed.peak_live_bytes == 1024 + 2048 + 4096);
}

TEST_CASE("timeline: one stream keeps the schedule's order; times follow the ops", "[quick][predict]") {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 64;
  o.precision = Precision::kAmpBf16;
  o.steps = 2;
  const OpGraph g = build_training_steps(model_preset("gpt2"), o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const Roofline roofline = Roofline::for_gpu("h100");
  const Timeline t = simulate_timeline(g, s, &roofline);
  const AllocationSchedule timed = timed_schedule(g, s, t);
  REQUIRE(timed.events.size() == s.events.size());
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    REQUIRE(t.event_order[i] == i);
    REQUIRE(timed.events[i].size_bytes == s.events[i].size_bytes);
    if (i > 0) {
      REQUIRE(timed.events[i].time_ns >= timed.events[i - 1].time_ns);
    }
    const Tensor& tensor = g.tensor(s.event_tensor[i]);
    if (s.events[i].action == TraceAction::kAlloc) {
      REQUIRE(timed.events[i].time_ns == t.ops[tensor.producer].start_ns);
    } else {
      REQUIRE(timed.events[i].time_ns == t.ops[tensor.last_consumer()].end_ns);
    }
  }
  CHECK(timed.peak_live_bytes == s.peak_live_bytes);
  // Back to back on one stream: a step lasts as long as the sum of its ops.
  REQUIRE(t.steps.size() == 2);
  for (const StepTime& st : t.steps) {
    TimeNs sum = 0;
    for (OpId id = 0; id < g.op_count(); ++id) {
      if (g.op(id).step == st.step) {
        sum += t.ops[id].end_ns - t.ops[id].start_ns;
      }
    }
    CHECK(st.duration_ns() == sum);
    CHECK(st.compute_ns + st.memory_ns == sum);
  }
  // Without a roofline the order is the same and the time axis is flat.
  const Timeline flat = simulate_timeline(g, s, nullptr);
  CHECK(flat.event_order == t.event_order);
  CHECK(flat.end_ns == 0);
}

TEST_CASE("timeline: a GEMM-bound step on H100 is within the FLOP count's bound", "[quick][predict]") {
  // Lower bound by hand: a training step does >= 6 * params * tokens FLOPs of GEMMs (2 forward, 4 backward)
  // at bf16 tensor-core peak; gpt2-xl (1,557,611,200 params), batch 8 x 1024 tokens:
  //   6 * 1.5576112e9 * 8192 = 7.656e13 FLOPs / (989.4e12 * 0.70) = 0.1105 s
  // and kernels that only move bytes only add to it. An upper bound of 3x that keeps the estimate honest
  // (attention, norms, AdamW over 1.5 B fp32 parameters add ~25-60% in published profiles).
  TrainingOptions o;
  o.batch = 8;
  o.seq = 1024;
  o.precision = Precision::kAmpBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.steps = 2;
  ModelConfig xl = model_preset("gpt2-xl");
  xl.gelu = GeluKind::kPytorchTanh;  // one GELU kernel (HF's gelu_new runs eight elementwise ones)
  const OpGraph g = build_training_steps(xl, o);
  const AllocationSchedule s = build_allocation_schedule(g);
  const Roofline roofline = Roofline::for_gpu("h100");
  const Timeline t = simulate_timeline(g, s, &roofline);
  const double step_s = static_cast<double>(t.steps.back().duration_ns()) * 1e-9;
  const double bound_s =
      6.0 * 1'557'611'200.0 * 8192 / (roofline.gpu().peak_flops_per_s(ComputeDType::kBf16) * 0.70);
  CHECK(bound_s == Approx(0.1105).epsilon(0.01));
  CHECK(step_s > bound_s);
  CHECK(step_s < 3.0 * bound_s);
}

TEST_CASE("checkpoint recompute runs under the forward's autocast", "[quick][graph]") {
  // torch.utils.checkpoint re-enters autocast for the recomputation, so recomputed GEMMs produce bf16 like
  // the forward's, although backward runs outside autocast.
  TrainingOptions o;
  o.batch = 1;
  o.seq = 64;
  o.precision = Precision::kAmpBf16;
  o.checkpointing = Checkpointing::kFull;
  o.steps = 1;
  const OpGraph g = build_training_steps(model_preset("llama-2-7b"), o);
  int recomputed = 0;
  for (const Tensor& t : g.tensors()) {
    const Op& op = g.op(t.producer);
    if (op.phase == Phase::kBackward && op.kind == "mm" && t.category != TensorCategory::kWorkspace) {
      ++recomputed;
      INFO(op.name);
      CHECK(t.dtype == DType::kBFloat16);
    }
  }
  CHECK(recomputed == 7 * 32);  // q, k, v, o, gate, up, down per layer
}
