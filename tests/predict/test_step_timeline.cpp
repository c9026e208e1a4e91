// The step on the engine's time axis: event order and times from hand-built graphs with hand-computed
// durations, and the properties a real training step must keep (one stream: the schedule's own order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/graph/tensor_lifetime.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_timeline.h"

using namespace vramsim;

namespace {

// A GPU with round numbers: 1e12 FLOP/s at every precision, 1e12 B/s, no launch overhead, 100% efficiency,
// so an op of F FLOPs (and few bytes) takes F / 1000 ns.
GpuSpec round_gpu() {
  return GpuSpec{"round", "test", kGiB, kGiB, 1e12, 1e12, 1e12, 1e12, 1e12, 1e12, 0, 80, 108, 2048, 1e12};
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

TEST_CASE("timeline: the host issues in program order and runs ahead, times by hand", "[quick][predict]") {
  // Host order A (stream 0), B (stream 1, reads a), C (stream 0); each kernel costs the host 100 ns, device
  // durations F / 1000 ns:
  //   A issued at 0;   1e6 FLOPs -> [0, 1000) on stream 0.
  //   B issued at 100; waits for A's event; 3e6 FLOPs -> [1000, 4000) on stream 1.
  //   C issued at 200; 2e6 FLOPs -> [1000, 3000) on stream 0 (after A).
  // The caching allocator runs on the host: every event at its op's issue time, in program order. B is a's
  // last user, so a is freed when B is issued (no record_stream: stream 1's reuse of it would be the
  // program's bug, as in PyTorch); b has no reader and goes right after.
  OpGraph g;
  const OpId a_op = add_op(g, "A", 0, 1e6);
  const OpId b_op = add_op(g, "B", 1, 3e6);
  const OpId c_op = add_op(g, "C", 0, 2e6);
  const TensorId a = add_tensor(g, "a", a_op, 1024);
  const TensorId b = add_tensor(g, "b", b_op, 2048);
  const TensorId c = add_tensor(g, "c", c_op, 4096);
  g.add_consumer(a, b_op);
  const AllocationSchedule s = build_allocation_schedule(g);
  const GpuSpec gpu = round_gpu();
  const Roofline roofline(gpu, ideal());
  TimelineOptions host;
  host.host_op_ns = 100;
  const Timeline t = simulate_timeline(g, s, &roofline, host);

  CHECK(t.ops[a_op].issue_ns == 0);
  CHECK(t.ops[b_op].issue_ns == 100);
  CHECK(t.ops[c_op].issue_ns == 200);
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
  const std::vector<Expect> expected = {
      {TraceAction::kAlloc, a, 0, 0},           {TraceAction::kAlloc, b, 100, 1},
      {TraceAction::kFreeRequested, a, 100, 1}, {TraceAction::kFreeCompleted, a, 100, 1},
      {TraceAction::kFreeRequested, b, 100, 1}, {TraceAction::kFreeCompleted, b, 100, 1},
      {TraceAction::kAlloc, c, 200, 0},         {TraceAction::kFreeRequested, c, 200, 0},
      {TraceAction::kFreeCompleted, c, 200, 0},
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("event " << i);
    CHECK(timed.events[i].action == expected[i].action);
    CHECK(timed.event_tensor[i] == expected[i].tensor);
    CHECK(timed.events[i].time_ns == expected[i].time_ns);
    CHECK(timed.events[i].stream == expected[i].stream);
  }
  CHECK(timed.peak_live_bytes == 4096);  // a and b (3 KiB) are gone when c is allocated
}

TEST_CASE("timeline: a record_stream free completes at the first malloc after the device passed it",
          "[quick][predict]") {
  // G (stream 1) gathers g; U (stream 0) uses it; g.record_stream(0) and its free come with U's issue (spec
  // ST2-ST3). X, Y, Z (stream 0) each allocate. Host 100 ns per kernel; device:
  //   G issued 0:   [0, 500) on stream 1          U issued 100: waits for G -> [500, 2500) on stream 0
  //   X issued 200: [2500, 2600)                   Y issued 300: [2600, 2700)
  // The event recorded on stream 0 at g's free (host 100) completes when U ends, at 2500; the host is far
  // ahead (X and Y are issued at 200 and 300), so X's and Y's mallocs still see g pending. A host wait on U
  // before Z (Event.synchronize()) puts Z's issue at 2500: its malloc completes g's free first.
  OpGraph g;
  const OpId g_op = add_op(g, "G", 1, 5e5);
  const OpId u_op = add_op(g, "U", 0, 2e6);
  const OpId x_op = add_op(g, "X", 0, 1e5);
  const OpId y_op = add_op(g, "Y", 0, 1e5);
  const OpId z_op = add_op(g, "Z", 0, 1e5);
  g.op(z_op).host_waits_for = u_op;
  const TensorId gathered = add_tensor(g, "g", g_op, 1 << 20);
  g.add_consumer(gathered, u_op);
  g.tensor(gathered).record_stream = 0;
  const TensorId x = add_tensor(g, "x", x_op, 64);
  const TensorId y = add_tensor(g, "y", y_op, 64);
  const TensorId z = add_tensor(g, "z", z_op, 64);
  const AllocationSchedule s = build_allocation_schedule(g);
  const GpuSpec gpu = round_gpu();
  const Roofline roofline(gpu, ideal());
  TimelineOptions host;
  host.host_op_ns = 100;
  const Timeline t = simulate_timeline(g, s, &roofline, host);
  CHECK(t.ops[u_op].start_ns == 500);
  CHECK(t.ops[u_op].end_ns == 2500);
  CHECK(t.ops[y_op].issue_ns == 300);
  CHECK(t.ops[z_op].issue_ns == 2500);
  const AllocationSchedule timed = timed_schedule(g, s, t);
  std::vector<std::pair<TraceAction, TensorId>> order;
  for (std::size_t i = 0; i < timed.events.size(); ++i) {
    order.emplace_back(timed.events[i].action, timed.event_tensor[i]);
  }
  const std::vector<std::pair<TraceAction, TensorId>> expected = {
      {TraceAction::kAlloc, gathered},
      {TraceAction::kFreeRequested, gathered},
      {TraceAction::kAlloc, x},
      {TraceAction::kFreeRequested, x},
      {TraceAction::kFreeCompleted, x},
      {TraceAction::kAlloc, y},
      {TraceAction::kFreeRequested, y},
      {TraceAction::kFreeCompleted, y},
      {TraceAction::kFreeCompleted, gathered},
      {TraceAction::kAlloc, z},
      {TraceAction::kFreeRequested, z},
      {TraceAction::kFreeCompleted, z},
  };
  CHECK(order == expected);
  // Without the host wait, nothing allocates after 2500 ns: the free completes at the end of the run.
  g.op(z_op).host_waits_for = kNoOp;
  const Timeline ahead = simulate_timeline(g, s, &roofline, host);
  const AllocationSchedule timed_ahead = timed_schedule(g, s, ahead);
  CHECK(timed_ahead.events.back().action == TraceAction::kFreeCompleted);
  CHECK(timed_ahead.event_tensor.back() == gathered);
  CHECK(timed_ahead.events.back().time_ns == 2800);  // the end of the run: Z ends at 2800
}

TEST_CASE("timeline: one stream keeps the schedule's order, events at the host's issue times",
          "[quick][predict]") {
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
      REQUIRE(timed.events[i].time_ns == t.ops[tensor.producer].issue_ns);
    } else {
      REQUIRE(timed.events[i].time_ns == t.ops[tensor.last_consumer()].issue_ns);
    }
  }
  CHECK(timed.peak_live_bytes == s.peak_live_bytes);
  // This small step is bound by the host: its kernels are shorter than the 10 us the host needs per op, so
  // the device waits between them and the run lasts at least (kernels - 1) x 10 us (a step alone can be
  // shorter: the host may have issued its first kernels while the previous step's were running). With a free
  // host the kernels run back to back: a step lasts as long as the sum of its ops.
  TimelineOptions free_host;
  free_host.host_op_ns = 0;
  const Timeline back_to_back = simulate_timeline(g, s, &roofline, free_host);
  REQUIRE(t.steps.size() == 2);
  REQUIRE(back_to_back.steps.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const StepTime& st = back_to_back.steps[k];
    TimeNs sum = 0;
    for (OpId id = 0; id < g.op_count(); ++id) {
      if (g.op(id).step == st.step) {
        sum += back_to_back.ops[id].end_ns - back_to_back.ops[id].start_ns;
      }
    }
    CHECK(st.duration_ns() == sum);
    CHECK(st.compute_ns + st.memory_ns == sum);
    CHECK(t.steps[k].compute_ns + t.steps[k].memory_ns == sum);  // the same kernels
    CHECK(t.steps[k].duration_ns() > sum);
  }
  CHECK(t.end_ns >= static_cast<TimeNs>(t.steps[0].kernels + t.steps[1].kernels - 1) * 10'000);
  // Without a roofline the order is the same and the time axis is flat.
  const Timeline flat = simulate_timeline(g, s, nullptr);
  CHECK(flat.event_order == t.event_order);
  CHECK(flat.end_ns == 0);
}

TEST_CASE("timeline: torch._scaled_mm runs at the FP8 tensor-core peak, times by hand",
          "[quick][predict][float8]") {
  // Note [Op compute dtype]: torchao's float8 GEMM (_scaled_mm, and its backward's two _scaled_mm calls)
  // gets the FP8 ceiling whatever its output dtype; a bf16 mm the bf16 one. A GPU of 1e12 FLOP/s fp32,
  // 2e12 bf16 and 4e12 fp8, nothing else in the way, one kernel a stream so none waits for another:
  //   _scaled_mm           4e6 FLOPs, bf16 output: 4e6 / 4e12 s = 1000 ns
  //   _scaled_mm_backward  8e6 FLOPs, bf16 output: 8e6 / 4e12 s = 2000 ns
  //   mm                   4e6 FLOPs, bf16 output: 4e6 / 2e12 s = 2000 ns
  //   te._Linear and its backward (Transformer Engine's FP8 GEMMs): as _scaled_mm and its backward
  // Without an FP8 path (fp8 0) the FP8 ceiling falls back to fp16's (GpuSpec::peak_flops_per_s), here
  // 2e12: the _scaled_mm takes 2000 ns.
  for (const double fp8 : {4e12, 0.0}) {
    OpGraph g;
    std::vector<OpId> ops;
    int stream = 0;
    for (const auto& [kind, flops] :
         std::vector<std::pair<std::string, double>>{{"_scaled_mm", 4e6},
                                                     {"_scaled_mm_backward", 8e6},
                                                     {"mm", 4e6},
                                                     {"te._Linear", 4e6},
                                                     {"te._Linear_backward", 8e6}}) {
      Op op;
      op.name = kind;
      op.kind = kind;
      op.step = 1;
      op.stream = static_cast<StreamId>(stream++);
      op.flops = flops;
      ops.push_back(g.add_op(op));
      Tensor t;
      t.name = kind + ".out";
      t.size_bytes = 512;
      t.dtype = DType::kBFloat16;
      t.producer = ops.back();
      g.add_tensor(t);
    }
    const AllocationSchedule s = build_allocation_schedule(g);
    const GpuSpec gpu{"fp8", "test", kGiB, kGiB, 1e12, 1e12, 2e12, 2e12, fp8, 1e18, 0, 90, 132, 2048, 1e12};
    const Roofline roofline(gpu, ideal());
    TimelineOptions host;
    host.host_op_ns = 0;
    const Timeline t = simulate_timeline(g, s, &roofline, host);
    INFO("fp8 peak " << fp8);
    const auto took = [&](OpId id) { return t.ops[id].end_ns - t.ops[id].start_ns; };
    CHECK(took(ops[0]) == (fp8 > 0 ? 1000 : 2000));
    CHECK(took(ops[1]) == (fp8 > 0 ? 2000 : 4000));
    CHECK(took(ops[2]) == 2000);
    // Transformer Engine's te.Linear under fp8_autocast: the same FP8 GEMMs, forward and backward
    CHECK(took(ops[3]) == (fp8 > 0 ? 1000 : 2000));
    CHECK(took(ops[4]) == (fp8 > 0 ? 2000 : 4000));
  }
}

TEST_CASE("timeline: a GEMM with a 16-bit operand runs at the 16-bit peak, whatever it writes",
          "[quick][predict]") {
  // Note [Op compute dtype]. A compiled backward under autocast writes the fp32 weight gradient of an fp32
  // parameter from bf16 operands; a compiled kernel writing into a buffer Inductor reuses allocates nothing.
  // Both multiply in bf16. A GPU of 1e12 FLOP/s fp32 and 2e12 bf16, 4e6 FLOPs each, one stream each:
  //   mm_backward reading bf16, writing fp32   4e6 / 2e12 s = 2000 ns (first-output rule: 4000)
  //   mm reading bf16, writing nothing         4e6 / 2e12 s = 2000 ns (first-output rule: 4000)
  //   mm reading fp32 only, writing fp32       4e6 / 1e12 s = 4000 ns (fp32 GEMMs stay on the fp32 peak)
  OpGraph g;
  const auto op = [&](const std::string& kind, double flops, StreamId stream) {
    Op o;
    o.name = kind + std::to_string(stream);
    o.kind = kind;
    o.step = 1;
    o.stream = stream;
    o.flops = flops;
    return g.add_op(o);
  };
  const OpId make_half = op("to_copy", 0, 0);
  const OpId make_float = op("to_copy", 0, 1);
  const OpId grad = op("mm_backward", 4e6, 2);
  const OpId into_reused = op("mm", 4e6, 3);
  const OpId fp32_mm = op("mm", 4e6, 4);
  const auto tensor = [&](const std::string& name, DType dtype, OpId producer, std::vector<OpId> consumers) {
    Tensor t;
    t.name = name;
    t.size_bytes = 512;
    t.dtype = dtype;
    t.producer = producer;
    t.consumers.assign(consumers.begin(), consumers.end());
    g.add_tensor(t);
  };
  tensor("half", DType::kBFloat16, make_half, {grad, into_reused});
  tensor("float", DType::kFloat32, make_float, {grad, fp32_mm});
  tensor("grad_weight", DType::kFloat32, grad, {});
  tensor("fp32_out", DType::kFloat32, fp32_mm, {});
  const AllocationSchedule s = build_allocation_schedule(g);
  const GpuSpec gpu{"t", "test", kGiB, kGiB, 1e12, 1e12, 2e12, 2e12, 0, 1e18, 0, 90, 132, 2048, 1e12};
  const Roofline roofline(gpu, ideal());
  TimelineOptions host;
  host.host_op_ns = 0;
  const Timeline t = simulate_timeline(g, s, &roofline, host);
  const auto took = [&](OpId id) { return t.ops[id].end_ns - t.ops[id].start_ns; };
  CHECK(took(grad) == 2000);
  CHECK(took(into_reused) == 2000);
  CHECK(took(fp32_mm) == 4000);
}

TEST_CASE("timeline: a GEMM-bound step on H100 is within the FLOP count's bound", "[quick][predict]") {
  // Lower bound by hand: a training step does >= 6 * params * tokens FLOPs of GEMMs (2 forward, 4 backward)
  // at bf16 tensor-core peak; gpt2-xl (1,557,611,200 params), batch 8 x 1024 tokens:
  //   6 * 1.5576112e9 * 8192 = 7.656e13 FLOPs / (989.4e12 * 0.83, the default compute efficiency) = 0.0932 s
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
      6.0 * 1'557'611'200.0 * 8192 / (roofline.gpu().peak_flops_per_s(ComputeDType::kBf16) * 0.83);
  CHECK(bound_s == Approx(0.0932).epsilon(0.01));
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
