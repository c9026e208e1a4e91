// torch.compile's memory model on small hand-built cases: Inductor's wrapper-code memory planning
// (inductor_memory.h: free at last use, reuse of a dead buffer of the same dtype and size, in-place reuse by
// a pointwise kernel) and a compiled call through the tape (torch_compile.h). Every expected event is worked
// out by hand below from those rules.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

#include "run_cli.h"
#include "sim/compile/inductor_memory.h"
#include "sim/compile/torch_compile.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/torch/torch_ops.h"

using namespace vramsim;

namespace {

// (action, bytes) of the allocs and requested frees, in order.
std::vector<std::pair<char, Bytes>> allocs_and_frees(const OpGraph& graph) {
  std::vector<std::pair<char, Bytes>> out;
  for (const TraceEvent& e : build_allocation_schedule(graph).events) {
    if (e.action == TraceAction::kAlloc) {
      out.emplace_back('A', e.size_bytes);
    } else if (e.action == TraceAction::kFreeRequested) {
      out.emplace_back('F', e.size_bytes);
    }
  }
  return out;
}

inductor::Buffer buffer(Bytes size, bool output = false) {
  inductor::Buffer b;
  b.name = "buf";
  b.size_bytes = size;
  b.graph_output = output;
  return b;
}

inductor::Kernel kernel(std::vector<int> reads, std::vector<int> writes, bool triton) {
  inductor::Kernel k;
  k.name = triton ? "triton" : "extern";
  k.kind = k.name;
  k.reads = std::move(reads);
  k.writes = std::move(writes);
  k.in_place_ok = triton;
  return k;
}

}  // namespace

// Buffers A, B, C, D of 400 B, E of 200 B (returned), F a 100-byte graph input the graph owns.
//   k0 extern writes A                  -> alloc 400 (A)
//   k1 extern reads A, writes B         -> alloc 400 (B); A dies here, into the pool (not in place: extern)
//   k2 triton reads B and F, writes C   -> B dies at this pointwise kernel: C takes B's memory in place (no
//                                          event); F's last use: freed (100)
//   k3 extern reads C, writes D         -> D takes A from the pool (no event); C dies, nothing later takes a
//                                          400-byte buffer: its memory (B's) is freed (400)
//   k4 triton reads D, writes E         -> E is returned: a fresh 200; D dies: its memory (A's) freed (400)
TEST_CASE("inductor memory: free at last use, reuse from the pool, in-place writes", "[quick][graph]") {
  OpGraph graph;
  EagerTape tape(graph);
  tape.begin_op("setup", "setup");
  const TensorId f = tape.allocate("F", 100, DType::kFloat32, TensorCategory::kTemporary);
  inductor::GraphPlan plan;
  plan.buffers = {buffer(400), buffer(400), buffer(400), buffer(400), buffer(200, true), buffer(100)};
  plan.buffers[5].storage = f;
  plan.buffers[5].owned = true;  // the graph's reference: released after its last reader
  plan.kernels = {kernel({}, {0}, false), kernel({0}, {1}, false), kernel({1, 5}, {2}, true),
                  kernel({2}, {3}, false), kernel({3}, {4}, true)};
  const std::vector<TensorId> storage = inductor::emit(tape, plan);
  CHECK(storage[2] == storage[1]);  // C in B's memory
  CHECK(storage[3] == storage[0]);  // D in A's memory
  const std::vector<std::pair<char, Bytes>> expected = {{'A', 100}, {'A', 400}, {'A', 400}, {'F', 100},
                                                        {'F', 400}, {'A', 200}, {'F', 400}};
  tape.finish();  // E is still referenced (the caller's): it lives on
  CHECK(allocs_and_frees(graph) == expected);
}

// y = (h * sigmoid(h)) @ w2.T with h = x @ w1.T, compiled (x: 4 x 8 fp32, w1: 16 x 8, w2: 8 x 16).
// The partitioner (test_aot_partitioner.cpp's first case): saved = {x, w1, h, t = h * sigmoid(h), w2};
// sigmoid is recomputed. Inductor: h is an mm output (4 x 16 fp32, 256 B), t a Triton kernel (sigmoid fused
// into it, 256 B), y the output (4 x 8, 128 B): three allocations in the forward, sigmoid's output never
// exists. Both stay alive after the forward (saved for the backward); after backward() they are gone and both
// weights have gradients.
TEST_CASE("torch.compile: a compiled SiLU MLP saves the matmul outputs and fuses the sigmoid",
          "[quick][graph]") {
  OpGraph graph;
  EagerTape tape(graph);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  const VarId w1 = tape.parameter("w1", {16, 8}, DType::kFloat32);
  const VarId w2 = tape.parameter("w2", {8, 16}, DType::kFloat32);
  const VarId x = tape.input("x", {4, 8}, DType::kFloat32);
  InductorProcess process;
  process.autotuned_before = true;
  const std::size_t tensors_before = graph.tensors().size();
  const VarId y = compiled_call(
      tape, "mlp",
      [&]() {
        const VarId h = ops.linear("fc1", x, w1);
        const VarId s = ops.sigmoid("act.sigmoid", h);
        const VarId t = ops.mul("act.mul", h, s);
        const VarId out = ops.linear("fc2", t, w2);
        tape.drop({h, s, t});
        return out;
      },
      process);
  std::vector<Bytes> made;
  for (std::size_t i = tensors_before; i < graph.tensors().size(); ++i) {
    made.push_back(graph.tensors()[i].size_bytes);
  }
  CHECK(made == std::vector<Bytes>{256, 256, 128});  // h, t, y
  CHECK(tape.alive(graph.tensors()[tensors_before].id));
  CHECK(tape.alive(graph.tensors()[tensors_before + 1].id));
  tape.backward(y);
  CHECK(tape.grad(w1) != kNoTensor);
  CHECK(tape.grad(w2) != kNoTensor);
  CHECK_FALSE(tape.alive(graph.tensors()[tensors_before].id));
  CHECK_FALSE(tape.alive(graph.tensors()[tensors_before + 1].id));
}

// What the compiled path does not model is refused with the combination named, not silently mispredicted.
TEST_CASE("torch.compile: combinations it does not model are refused", "[quick][graph]") {
  TrainingOptions o;
  o.compile = CompileMode::kDefault;
  o.data_parallel.scheme = "zero3";
  o.data_parallel.world_size = 8;
  CHECK_THROWS_WITH(validate(o), Catch::Contains("--compile: not modelled together with"));
  o.data_parallel = {};
  // composes: the hooks pack what the compiled graph saves (test_activation_offload.cpp)
  o.offload_activations = true;
  CHECK_NOTHROW(validate(o));
  CHECK_THROWS_AS(parse_compile_mode("fastest"), InputError);
}

// cudagraph trees: the compiled graphs allocate from their private pool (the allocator model's pool stream),
// and the eager loss's gradient is copied into a static input of the backward graph, kept by the pool.
TEST_CASE("torch.compile reduce-overhead: graph allocations come from the private pool", "[quick][graph]") {
  ModelConfig m = model_preset("gpt2");
  m.n_layers = 2;
  TrainingOptions o;
  o.batch = 2;
  o.seq = 64;
  o.steps = 1;
  o.compile = CompileMode::kReduceOverhead;
  const OpGraph graph = build_training_steps(m, o);
  int pool = 0;
  int tangent_copies = 0;
  for (const Tensor& t : graph.tensors()) {
    pool += t.graph_pool ? 1 : 0;
    if (t.name == "compiled_model.tangent.static_input") {
      ++tangent_copies;
      CHECK(t.graph_pool);
      CHECK(t.size_bytes == Bytes{2} * 64 * 50257 * 4);  // the fp32 logits' gradient
    }
  }
  CHECK(pool > 0);
  CHECK(tangent_copies == 1);
  o.compile = CompileMode::kDefault;
  const OpGraph eager_pool = build_training_steps(m, o);
  for (const Tensor& t : eager_pool.tensors()) {
    CHECK_FALSE(t.graph_pool);
  }
}

// The CLI: --compile on predict, fit and sweep; the compiled prediction of a GPT-2 step saves less than the
// eager one (the partitioner recomputes GELU's pointwise chain, Inductor fuses dropout-free residual adds);
// a bad mode is one line and exit 2.
TEST_CASE("cli: --compile on predict, fit and sweep", "[cli]") {
  int status = -1;
  const std::string eager =
      test::run_cli("predict --model gpt2 --capacity 8GiB --batch 4 --seq 256 --steps 1 --json", &status);
  REQUIRE(status == 0);
  const std::string compiled = test::run_cli(
      "predict --model gpt2 --capacity 8GiB --batch 4 --seq 256 --steps 1 --json --compile", &status);
  REQUIRE(status == 0);
  CHECK(nlohmann::json::parse(compiled)["peak_allocated_bytes"].get<std::int64_t>() <
        nlohmann::json::parse(eager)["peak_allocated_bytes"].get<std::int64_t>());
  CHECK_THAT(test::run_cli("predict --model gpt2 --capacity 8GiB --batch 4 --seq 256 --steps 1 --compile"),
             Catch::Contains("torch.compile    mode default, the model one graph"));
  CHECK_THAT(
      test::run_cli("fit --model gpt2 --capacity 4GiB --seq 128 --steps 1 --compile-mode reduce-overhead",
                    &status),
      Catch::Contains("largest batch that fits"));
  CHECK(status == 0);
  test::run_cli("sweep --model gpt2 --capacity 8GiB --batch 2 --seq uniform:64..256 --steps 3 --compile",
                &status);
  CHECK(status == 0);
  CHECK_THAT(test::run_cli("predict --model gpt2 --capacity 8GiB --batch 1 --seq 128 --compile-mode fastest",
                           &status),
             Catch::Contains("vramsim: error: --compile-mode: unknown value 'fastest'"));
  CHECK(status == 2);
  CHECK_THAT(test::run_cli("predict --model gpt2 --capacity 8GiB --batch 1 --seq 128 --compile-scope layer",
                           &status),
             Catch::Contains("--compile-scope: needs --compile"));
  CHECK(status == 2);
}

// --compile-scope model-and-loss: the loss is a graph output, the logits never leave the graph; the same step
// with the loss in the loop keeps the logits (the loop's variable) and the eager loss's fp32 log_softmax
// (2 x 128 x 50257 x 4 B = 51 MB here, more than the two small layers' activations), which the graph does not
// save: its log-probabilities are recomputed in the backward from the logits and a row statistic.
TEST_CASE("torch.compile: the model computing its loss inside the graph", "[quick][graph]") {
  ModelConfig m = model_preset("gpt2");
  m.n_layers = 2;
  TrainingOptions o;
  o.batch = 2;
  o.seq = 128;
  o.steps = 1;
  o.compile = CompileMode::kDefault;
  o.compile_scope = CompileScope::kModelAndLoss;
  const OpGraph inside = build_training_steps(m, o);
  o.compile_scope = CompileScope::kModel;
  const OpGraph outside = build_training_steps(m, o);
  const auto named = [](const OpGraph& g, const std::string& name) {
    int n = 0;
    for (const Tensor& t : g.tensors()) {
      n += t.name.rfind(name, 0) == 0 ? 1 : 0;
    }
    return n;
  };
  CHECK(named(inside, "loss (inside the compiled graph)") == 0);  // a marker op, no tensor
  CHECK(named(outside, "loss.") > 0);                             // the eager loss's tensors
  const AllocationSchedule a = build_allocation_schedule(inside);
  const AllocationSchedule b = build_allocation_schedule(outside);
  CHECK(a.phase_begin(1, Phase::kLoss).has_value());
  CHECK(a.peak_live_bytes < b.peak_live_bytes);
}
