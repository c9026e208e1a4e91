// What a tensor-parallel rank's linears allocate beyond Megatron's plain layers: torchao's float8 tensor
// parallelism as torchtitan applies it (--float8 tensorwise with --tp; sim/training/float8_linear.h
// float8_module_input), and PEFT's LoRA under Megatron's sequence parallelism. Bytes worked by hand from the
// libraries' code.
//   torchao/float8/float8_tensor_parallel.py (PrepareFloat8ModuleInput, Float8ColwiseParallel,
//     Float8RowwiseParallel: the input cast to float8 before DTensor.redistribute);
//   torchtitan 9dec370 torchtitan/parallelisms/parallelize_llama.py apply_tp (enable_float8: the float8
//     classes replace ColwiseParallel / RowwiseParallel / PrepareModuleInput; "attention" and "feed_forward"
//     take PrepareFloat8ModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate()));
//   torchao eab345c (the December 2024 benchmark's) float8_linear.py: an input already cast is not cast
//     again (cast_input_to_float8 -> hp_tensor_to_float8_dynamic returns a Float8Tensor as is), and
//     manual_float8_matmul_with_args_in_float8 saves (input_fp8, weight_fp8_t).
#include <catch2/catch.hpp>

#include <string>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/torch/torch_ops.h"
#include "sim/training/float8_linear.h"

using namespace vramsim;

using test::sizes_from;
using test::sizes_named;

namespace {

// hp_tensor_to_float8_dynamic on n bf16 elements with one fp32 scale: torch.abs(x) (2n), the bf16 amax (2),
// the fp32 scale (4), x.to(float32) (4n), * scale (4n), clamp (4n), .to(float8) (n).
std::vector<Bytes> cast(Bytes n) { return {2 * n, 2, 4, 4 * n, 4 * n, 4 * n, n}; }

std::vector<Bytes> concat(std::initializer_list<std::vector<Bytes>> parts) {
  std::vector<Bytes> all;
  for (const std::vector<Bytes>& p : parts) {
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

TensorCategory category_of(const OpGraph& g, const std::string& name) {
  for (const Tensor& t : g.tensors()) {
    if (t.name == name) {
      return t.category;
    }
  }
  FAIL("no tensor named " << name);
  return TensorCategory::kTemporary;
}

}  // namespace

TEST_CASE("float8 tensor parallelism: the shard cast, gathered in float8 once, shared by two linears",
          "[quick][graph][float8-tp]") {
  // One rank of tp = 2 under sequence parallelism: its slice x is [1, 16, 64] bf16 (32 tokens in all); two
  // column-parallel linears (wq, wk: 128 x 64 each, the rank's shards) share the module input.
  OpGraph g;
  EagerTape tape(g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  const VarId x = tape.parameter("hidden", {1, 16, 64}, DType::kBFloat16);
  const VarId wq = tape.parameter("wq.weight", {128, 64}, DType::kBFloat16);
  const VarId wk = tape.parameter("wk.weight", {128, 64}, DType::kBFloat16);
  Float8Options o;
  o.recipe = Float8Recipe::kTensorwise;
  const Float8Weights weights{wq, wk};
  ops.set_float8(&weights, &o);
  const std::size_t first = g.tensors().size();
  const VarId xin = float8_module_input(ops, "attn.prepare", x, 2);
  const VarId q = ops.linear("q", xin, wq);
  const VarId k = ops.linear("k", xin, wk);
  tape.drop(xin);
  // PrepareFloat8ModuleInput: the slice's 1,024 elements cast (one tensorwise scale), then all-gathered into
  // [1, 32, 64] float8, 2,048 B. Each Float8ColwiseParallel linear casts only its weight (8,192 elements)
  // and writes its bf16 output, 32 x 128 x 2 B = 8,192 B: the input is not cast again.
  CHECK(sizes_from(g, first) == concat({cast(1024), {2048}, cast(8192), {8192}, cast(8192), {8192}}));
  // What the functions save: the gathered float8 input (once, shared) and each float8 weight.
  CHECK(category_of(g, "attn.prepare.all_gather") == TensorCategory::kActivation);
  CHECK(category_of(g, "q.weight.float8") == TensorCategory::kActivation);
  // The slice's own float8 cast is not kept: the all-gather's backward needs nothing.
  CHECK(category_of(g, "attn.prepare.input.float8") == TensorCategory::kTemporary);

  const VarId sum = ops.add("sum", q, k);
  tape.drop({q, k});
  const VarId loss = ops.mean_all("loss", sum);
  tape.drop(sum);
  const std::size_t backward_first = g.tensors().size();
  tape.backward(loss);
  // Each linear's backward: grad_output cast once (_NoopFwToFloat8BwDynamic; 32 x 128 = 4,096 elements),
  // then _scaled_mm's layout copies: the float8 weight column-major (8,192 B), grad_output.t().contiguous()
  // (4,096 B) and the saved float8 input b.t().contiguous().t() (32 x 64 = 2,048 B). Neither the saved input
  // nor grad_output is cast again.
  CHECK(sizes_from(g, backward_first, "q.backward.scratch") == concat({cast(4096), {8192, 4096, 2048}}));
  // The gathered float8 tensor takes its gradient in bf16 (Float8Tensor's orig dtype): [1, 32, 64] x 2 B =
  // 4,096 B per linear, not the 2,048 B of one byte per element.
  const std::vector<Bytes> gathered_grads = sizes_named(g, "attn.prepare.all_gather.grad");
  REQUIRE_FALSE(gathered_grads.empty());
  for (Bytes b : gathered_grads) {
    CHECK(b == 4096);
  }
  // The all-gather's backward reduce-scatters their sum back to the slice: [1, 16, 64] bf16 = 2,048 B, which
  // the cast's backward (_ToFloat8ConstrFunc: `return g, None, ...`) hands to x as it is (x.grad).
  CHECK(sizes_named(g, "hidden.grad") == std::vector<Bytes>{2048});
}

namespace {

// A tiny Llama (hidden 64, 4 heads of 16, MLP 256) on one rank of tp = 2 with sequence parallelism, bf16,
// batch 1 x 32, no checkpointing.
TrainingOptions tp_options(Float8Recipe recipe) {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 32;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.tensor_parallel = 2;
  o.sequence_parallel = true;
  o.data_parallel.world_size = 2;
  o.float8.recipe = recipe;
  return o;
}

}  // namespace

TEST_CASE("float8 tensor parallelism: what a decoder layer keeps, as torchtitan's plan casts it",
          "[quick][graph][float8-tp]") {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  m.d_ff = 256;  // the rank's MLP shards (128 x 64, 64 x 128) pass torchao's % 16 filter
  const OpGraph g = build_training_steps(tensor_parallel_rank(m, 2), tp_options(Float8Recipe::kTensorwise));
  // "attention" and "feed_forward": PrepareFloat8ModuleInput gathers the normed slice into [1, 32, 64]
  // float8, 2,048 B, kept for the backward of wq / wk / wv and of w1 / w3.
  CHECK(sizes_named(g, "layers.0.attn.prepare_float8_input.all_gather") == std::vector<Bytes>{2048});
  CHECK(sizes_named(g, "layers.0.mlp.prepare_float8_input.all_gather") == std::vector<Bytes>{2048});
  CHECK(category_of(g, "layers.0.mlp.prepare_float8_input.all_gather") == TensorCategory::kActivation);
  // wo and w2 (Float8RowwiseParallel): their inputs are the rank's last-dimension shards, cast where they
  // are: the attention output [1, 32, 2 heads x 16] = 1,024 elements and the MLP product [1, 32, 128] =
  // 4,096, one byte each, kept for their backward.
  CHECK(sizes_named(g, "layers.0.attn.o_proj.input.float8") == std::vector<Bytes>{1024});
  CHECK(sizes_named(g, "layers.0.mlp.down_proj.input.float8") == std::vector<Bytes>{4096});
  CHECK(category_of(g, "layers.0.mlp.down_proj.input.float8") == TensorCategory::kActivation);
  // The output layer stays bf16 (torchtitan's filter_fqns ["output"]) under plain ColwiseParallel: only it
  // gathers its input in bf16, into Megatron's buffer as vramsim lays regular TP out (1 x 32 x 64 x 2 B).
  CHECK(sizes_named(g, "megatron.global_memory_buffer") == std::vector<Bytes>{4096});
}

TEST_CASE("rowwise float8 under tensor parallelism: torchtitan's regular plan, bf16 all-gathers",
          "[quick][graph][float8-tp]") {
  // torchtitan: "For rowwise recipes, we use regular TP and all-gather happens in high precision"
  // (enable_float8_tensorwise_tp false): PrepareModuleInput gathers the normed slice into a new [1, 32, 64]
  // bf16 tensor (4,096 B), which wq / wk / wv share and save (Float8Linear's rowwise function saves its
  // high-precision input); each casts it inside the function (32 x 64 = 2,048 float8 bytes, not kept).
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  m.d_ff = 256;
  const OpGraph g = build_training_steps(tensor_parallel_rank(m, 2), tp_options(Float8Recipe::kRowwise));
  CHECK(sizes_named(g, "layers.0.attn.prepare_input.all_gather") == std::vector<Bytes>{4096});
  CHECK(category_of(g, "layers.0.attn.prepare_input.all_gather") == TensorCategory::kActivation);
  CHECK(sizes_named(g, "layers.0.attn.q_proj.input.float8") == std::vector<Bytes>{2048});
  CHECK(category_of(g, "layers.0.attn.q_proj.input.float8") == TensorCategory::kTemporary);
  // RowwiseParallel does not cast: wo's Float8Linear casts its [1, 32, 32] input inside and saves it in bf16.
  CHECK(sizes_named(g, "layers.0.attn.o_proj.input.float8") == std::vector<Bytes>{1024});
  CHECK(category_of(g, "layers.0.attn.o_proj.input.float8") == TensorCategory::kTemporary);
  CHECK(sizes_named(g, "layers.0.attn.prepare_float8_input.all_gather").empty());
}

TEST_CASE("float8 tensor parallelism: the combination torchao refuses", "[quick][graph][float8-tp]") {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  // An MLP whose rank shards are not multiples of 16 (172 / 2 = 86) stays nn.Linear, and
  // Float8ColwiseParallel._apply raises ValueError("Expecting module to be Float8Linear ...").
  m.d_ff = 172;
  CHECK_THROWS_WITH(build_training_steps(tensor_parallel_rank(m, 2), tp_options(Float8Recipe::kTensorwise)),
                    Catch::Contains("Float8ColwiseParallel / Float8RowwiseParallel expect Float8Linear"));
}

namespace {

TrainingOptions lora_sp_options() {
  TrainingOptions o = tp_options(Float8Recipe::kNone);
  o.lora.rank = 8;
  o.lora.all_linear = true;
  return o;
}

}  // namespace

TEST_CASE("LoRA under Megatron sequence parallelism: PEFT's LoraParallelLinear on the rank's slice",
          "[quick][graph][lora-tp]") {
  // peft/tuners/lora/tp_layer.py LoraParallelLinear with megatron_config.sequence_parallel, on a tiny Llama
  // (hidden 64, 4 heads of 16, MLP 256) at tp = 2, 32 tokens (16 a rank's slice), r = 8, fp32 adapters
  // (autocast_adapter_dtype: the input is cast to fp32 first).
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  m.d_ff = 256;
  const OpGraph g = build_training_steps(tensor_parallel_rank(m, 2), lora_sp_options());
  // q_proj, a ColumnParallelLinear: lora_A (nn.Linear) on the slice, [1, 16, 64] -> [1, 16, 8] fp32 = 512 B;
  // lora_B (ColumnParallelLinear) gathers that along the sequence and gives the rank's 32 of the 64 outputs
  // for all 32 tokens, [1, 32, 32] fp32 = 4,096 B.
  CHECK(sizes_named(g, "layers.0.attn.q_proj.lora_cast_input") == std::vector<Bytes>{16 * 64 * 4});
  CHECK(sizes_named(g, "layers.0.attn.q_proj.lora_A") == std::vector<Bytes>{16 * 8 * 4});
  CHECK(sizes_named(g, "layers.0.attn.q_proj.lora_B") == std::vector<Bytes>{32 * 32 * 4});
  // o_proj, a RowParallelLinear: lora_A (RowParallelLinear) multiplies the rank's 32 input columns of all 32
  // tokens, [1, 32, 8] fp32 = 1,024 B, reduce-scattered to the slice, [1, 16, 8] = 512 B; lora_B (nn.Linear)
  // gives the slice's [1, 16, 64] fp32 = 4,096 B, added to the base's reduce-scattered output.
  CHECK(sizes_named(g, "layers.0.attn.o_proj.lora_A") == std::vector<Bytes>{32 * 8 * 4});
  CHECK(sizes_named(g, "layers.0.attn.o_proj.lora_A.reduce_scatter") == std::vector<Bytes>{16 * 8 * 4});
  CHECK(sizes_named(g, "layers.0.attn.o_proj.lora_B") == std::vector<Bytes>{16 * 64 * 4});
}
