// torchao float8 training (sim/training/float8_linear.h) and context parallelism
// (sim/parallel/context_parallel.h): bytes worked by hand from the libraries' code, cited per case.
#include <catch2/catch.hpp>

#include <string>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/context_parallel.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/step_prediction.h"
#include "sim/torch/torch_ops.h"
#include "sim/training/float8_linear.h"

using namespace vramsim;

using test::sizes_from;
using test::sizes_named;

namespace {

// x (T = 32 tokens, in = 64) and w (out = 128, in = 64), both bf16 and requiring grad.
constexpr std::int64_t T = 32, in = 64, out = 128;

struct LinearRun {
  OpGraph g;
  std::vector<Bytes> forward;
  std::vector<Bytes> backward_scratch;
  bool weight_cast_alive_after_forward = false;  // the float8 weight is saved for backward
};

LinearRun run_linear(Float8Recipe recipe) {
  LinearRun r;
  EagerTape tape(r.g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  const VarId x = tape.parameter("hidden", {T, in}, DType::kBFloat16);
  const VarId w = tape.parameter("proj.weight", {out, in}, DType::kBFloat16);
  Float8Options o;
  o.recipe = recipe;
  const Float8Weights weights{w};
  ops.set_float8(&weights, &o);
  const std::size_t first = r.g.tensors().size();
  const VarId y = ops.linear("proj", x, w);
  r.forward = sizes_from(r.g, first);
  for (std::size_t i = first; i < r.g.tensors().size(); ++i) {
    const Tensor& t = r.g.tensors()[i];
    if (t.name == "proj.weight.float8") {
      r.weight_cast_alive_after_forward = t.category == TensorCategory::kActivation;  // saved
    }
  }
  const VarId loss = ops.mean_all("loss", y);
  tape.drop(y);
  const std::size_t backward_first = r.g.tensors().size();
  tape.backward(loss);
  r.backward_scratch = sizes_from(r.g, backward_first, "proj.backward.scratch");
  return r;
}

// hp_tensor_to_float8_dynamic on n bf16 elements with `scales` fp32 scales (torchao float8_utils.py
// tensor_to_amax, amax_to_scale; float8_training_tensor.py _ToFloat8ConstrFunc.forward; to_fp8_saturated):
// torch.abs(x) bf16 (2n), the amax in bf16 (2 x scales), the fp32 scale (4 x scales), x.to(float32) (4n),
// * scale (4n), clamp (4n), .to(float8) (n).
std::vector<Bytes> cast(Bytes n, Bytes scales) {
  return {2 * n, 2 * scales, 4 * scales, 4 * n, 4 * n, 4 * n, n};
}

std::vector<Bytes> concat(std::initializer_list<std::vector<Bytes>> parts) {
  std::vector<Bytes> all;
  for (const std::vector<Bytes>& p : parts) {
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

}  // namespace

TEST_CASE("float8 tensorwise: the weight cast outside the function is what backward keeps",
          "[quick][graph]") {
  const LinearRun r = run_linear(Float8Recipe::kTensorwise);
  // Float8Linear.forward (torchao/float8/float8_linear.py): without axiswise scaling the weight is cast
  // first (_get_weight_scale, _cast_weight_to_float8_t: 128 x 64 = 8,192 elements, one scale), then
  // matmul_with_hp_or_float8_args.forward casts the input (32 x 64 = 2,048) and _scaled_mm writes the bf16
  // output, 32 x 128 x 2 B = 8,192 B.
  CHECK(r.forward == concat({cast(8192, 1), cast(2048, 1), {8192}}));
  // ctx.save_for_backward(input_hp, weight_hp_t) with weight_hp_t the float8 weight: its 8,192 B live on.
  CHECK(r.weight_cast_alive_after_forward);
  // backward: grad_output (32 x 128 = 4,096) cast for grad_input; the saved float8 weight is not cast again;
  // _scaled_mm's second operand weight_t_fp8.t() is row-major: copied column-major (8,192 B,
  // float8_ops.py float8_mm); grad_output cast again for grad_weight, the bf16 input cast (2,048);
  // grad_weight's operands grad_output_fp8.t() (a.contiguous(): 4,096 B) and input_fp8
  // (b.t().contiguous().t(): 2,048 B).
  CHECK(r.backward_scratch == concat({cast(4096, 1), {8192}, cast(4096, 1), cast(2048, 1), {4096, 2048}}));
}

TEST_CASE("float8 rowwise: both casts inside the function, the bf16 weight saved, the #141881 copies",
          "[quick][graph]") {
  const LinearRun r = run_linear(Float8Recipe::kRowwise);
  // Axiswise scaling: the weight goes into matmul_with_hp_or_float8_args as weight.t() (the parameter); the
  // input is cast first, one scale per row (32), then the weight (128 rows of out).
  CHECK(r.forward == concat({cast(2048, 32), cast(8192, 128), {8192}}));
  CHECK_FALSE(r.weight_cast_alive_after_forward);  // made and freed inside forward: nothing float8 is saved
  // backward: grad_output per row (32 scales); the workaround of pytorch#141881: g_reshaped = grad_output * 0
  // (4,096 x 2 B), zero = g_reshaped[:1] * 0 (128 x 2 B), weight_hp_t + zero (8,192 x 2 B) and its cast per
  // output column (128 scales); the weight operand copied column-major (8,192); grad_output per column (128
  // scales) and the input per column (64 scales) for grad_weight, and that GEMM's two operand copies.
  CHECK(r.backward_scratch == concat({cast(4096, 32),
                                      {8192, 256, 16384},
                                      cast(8192, 128),
                                      {8192},
                                      cast(4096, 128),
                                      cast(2048, 64),
                                      {4096, 2048}}));
}

TEST_CASE("float8: torchtitan's filter skips the output layer and dims that are not multiples of 16",
          "[quick][graph]") {
  // torchtitan/components/quantization/float8.py module_filter_fn: nn.Linear only, both weight dims % 16,
  // and no filtered fqn (filter_fqns default ["output"]; transformers calls it lm_head)
  CHECK(is_float8_target({"model.layers.0.self_attn.q_proj.weight", {4096, 4096}, 0}));
  CHECK(is_float8_target({"model.layers.0.mlp.down_proj.weight", {4096, 14336}, 0}));
  CHECK_FALSE(is_float8_target({"lm_head.weight", {128256, 4096}, -1}));
  CHECK_FALSE(is_float8_target({"output.weight", {128256, 4096}, -1}));
  CHECK_FALSE(is_float8_target({"model.embed_tokens.weight", {128256, 4096}, -1}));
  CHECK_FALSE(is_float8_target({"model.layers.0.mlp.up_proj.weight", {172, 64}, 0}));  // 172 % 16 = 12
  CHECK_FALSE(is_float8_target({"model.layers.0.input_layernorm.weight", {4096}, 0}));
}

TEST_CASE("float8 with FSDP2's float8 all-gather: one byte per converted weight element", "[quick][graph]") {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");  // hidden 64, 4 heads of 16
  m.d_ff = 256;                                        // so the MLP's linears pass the % 16 filter too
  TrainingOptions o;
  o.batch = 1;
  o.seq = 32;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = 2;
  o.float8.recipe = Float8Recipe::kTensorwise;
  // Layer 0's unit: q, k, v, o (64 x 64 = 4,096 each), gate and up (256 x 64 = 16,384), down (64 x 256)
  // and the two RMSNorm weights (64 each): bf16, 2 x (4 x 4,096 + 3 x 16,384 + 2 x 64) = 131,328 B.
  const OpGraph bf16 = build_training_steps(m, o);
  CHECK(sizes_named(bf16, "layers.0.all_gather_output").front() == 131328);
  CHECK(sizes_named(bf16, "model.layers.0.self_attn.q_proj.weight.unsharded").front() == 8192);
  // enable_fsdp_float8_all_gather (torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor
  // fsdp_pre_all_gather returns the float8 shard): the seven linears' 65,536 elements in one byte each, the
  // norms still bf16 (256 B): 65,792 B, and no weight cast in the forward.
  o.float8.fsdp_float8_all_gather = true;
  const OpGraph float8 = build_training_steps(m, o);
  CHECK(sizes_named(float8, "layers.0.all_gather_output").front() == 65792);
  CHECK(sizes_named(float8, "model.layers.0.self_attn.q_proj.weight.unsharded").front() == 4096);
  CHECK(sizes_named(float8, "model.layers.0.input_layernorm.weight.unsharded").front() == 128);
  CHECK(sizes_named(float8, "layers.0.attn.q_proj.weight.float8").empty());
  CHECK_FALSE(sizes_named(bf16, "layers.0.attn.q_proj.weight.float8").empty());
}

TEST_CASE("float8: the options torchao and torchtitan refuse", "[quick][graph]") {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  TrainingOptions o;
  o.seq = 32;
  o.float8.recipe = Float8Recipe::kTensorwise;
  CHECK_THROWS_WITH(build_training_steps(m, o), Catch::StartsWith("--float8:"));  // fp32: not bf16
  o.precision = Precision::kBf16;
  o.float8.recipe = Float8Recipe::kRowwise;
  o.float8.fsdp_float8_all_gather = true;
  CHECK_THROWS_WITH(build_training_steps(m, o), Catch::Contains("tensorwise only"));
  CHECK_THROWS_WITH(parse_float8_recipe("delayed"), Catch::StartsWith("--float8: unknown value 'delayed'"));
}

TEST_CASE("float8 on a GPU without FP8 tensor cores: the run's own error", "[quick][graph][float8]") {
  // torch._scaled_mm checks the device first (ATen Blas.cpp _scaled_mm_out_cuda: CUDA 8.9+ or ROCm MI300+);
  // Transformer Engine's fp8_autocast asserts check_fp8_support() (8.9 or more). An A100 is 8.0, an L4 8.9,
  // an H100 9.0.
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.batch = 1;
  a.seq = 64;
  a.precision = "bf16";
  a.gpu = "a100-80gb";
  a.float8 = "tensorwise";
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("A100-80GB (compute capability 8.0)") &&
                                         Catch::Contains("torch._scaled_mm is only supported on CUDA devices "
                                                         "with compute capability >= 9.0 or 8.9"));
  a.float8 = "te";
  CHECK_THROWS_WITH(make_request(a),
                    Catch::Contains("Device compute capability 8.9 or higher required for FP8 execution."));
  for (const char* gpu : {"l4", "h100"}) {
    a.gpu = gpu;
    a.float8 = "tensorwise";
    CHECK_NOTHROW(make_request(a));
  }
  a.gpu.clear();  // --capacity names no GPU: nothing to check against
  a.capacity = "80GiB";
  CHECK_NOTHROW(make_request(a));
}

namespace {

// A tiny Llama (b = 2, 4 heads of 16, bf16) with context parallelism of `cp` over `cp` GPUs.
OpGraph cp_run(std::int64_t seq, int cp, CpRotate rotate) {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  TrainingOptions o;
  o.batch = 2;
  o.seq = seq;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = cp;
  o.context_parallel.degree = cp;
  o.context_parallel.rotate = rotate;
  return build_training_steps(m, o);
}

}  // namespace

TEST_CASE("context parallelism: each rank runs seq / N tokens, and ring attention's buffers",
          "[quick][graph]") {
  // seq 128 over 4 ranks: 32 local tokens (two load-balanced chunks of 16). q, k, v (2, 4, 32, 16) bf16:
  // 8,192 B each; the logsumexp (2, 4, 32) fp32: 1,024 B.
  const OpGraph g = cp_run(128, 4, CpRotate::kAllGather);
  CHECK(sizes_named(g, "input_ids") == std::vector<Bytes>{2 * 32 * 8});
  const std::string attention = "layers.0.attn.sdpa.ring_attention";
  CHECK(sizes_named(g, attention).front() == 8192);
  CHECK(sizes_named(g, attention + ".logsumexp").front() == 1024);
  // forward (_templated_ring_attention): _AllGatherRotater's all_gather_tensor of cat([k, v]) over 4 ranks
  // (4 x 16,384) plus a step's cat (16,384): 81,920; _SDPAMerger with convert_to_f32: the step's output
  // (8,192) and logsumexp (1,024), the output's fp32 copy, the merged fp32 output, (out - block_out) and
  // the sigmoid product (4 x 16,384): 74,752.
  CHECK(sizes_named(g, attention + ".scratch") == std::vector<Bytes>{81920, 74752});
  // backward (_templated_ring_attention_backward): the kv rotation again (81,920); fp32 zeros for dq, dk,
  // dv (3 x 16,384); the dk/dv rotation, always all-to-all in fp32: cat, sent and received (3 x 32,768);
  // a step's kernel gradients (3 x 8,192); then the flash kernel's own scratch at local size: dq_accum
  // (2, 128, 4, 32) fp32 = 131,072 and softmax_d (2, 4, 128) fp32 = 4,096 (s rounded up to 128).
  CHECK(sizes_named(g, attention + ".backward.scratch") ==
        std::vector<Bytes>{81920, 49152, 98304, 24576, 131072, 4096});
  // _AllToAllRotater: a step's cat, the buffer permute_tensor fills and the last one received (3 x 16,384)
  const OpGraph a2a = cp_run(128, 4, CpRotate::kAllToAll);
  CHECK(sizes_named(a2a, attention + ".scratch") == std::vector<Bytes>{49152, 74752});
}

TEST_CASE(
    "context parallelism composes with tensor + sequence parallelism and pipeline stages (torchtitan's 4D)",
    "[quick][graph][composition]") {
  // torchtitan runs CP inside TP (Table 6 of benchmarks/llama3_h100_202412_torchtitan.md: FSDP x TP 8 x PP 8
  // x CP up to 8): context_parallel shards the sequence first, then the TP plan splits the heads, so ring
  // attention runs on this rank's heads of its seq / N tokens. The tiny Llama of cp_run at TP 2, CP 4, seq
  // 128: q (2, 2, 32, 16) bf16 = 4,096 B, the logsumexp (2, 2, 32) fp32 = 512 B.
  const ModelConfig m = tensor_parallel_rank(test::tiny_model("tinyllama-1.1b"), 2);
  TrainingOptions o;
  o.batch = 2;
  o.seq = 128;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = 4;
  o.context_parallel.degree = 4;
  o.tensor_parallel = 2;
  o.sequence_parallel = true;
  const OpGraph g = build_training_steps(m, o);
  const std::string attention = "layers.0.attn.sdpa.ring_attention";
  CHECK(sizes_named(g, attention).front() == 4096);
  CHECK(sizes_named(g, attention + ".logsumexp").front() == 512);
  // the all-gather of cat([k, v]) over 4 ranks (4 x 8,192) and a step's cat (8,192): 40,960; the merger's
  // step output (4,096), logsumexp (512) and four fp32 q-sized buffers (4 x 8,192): 37,376
  CHECK(sizes_named(g, attention + ".scratch") == std::vector<Bytes>{40960, 37376});
  // and with two pipeline stages: each stage's layers run the same ring attention on the local tokens
  o.pipeline.stages = 2;
  o.pipeline.stage = 0;
  o.grad_accumulation = 2;
  const OpGraph staged = build_training_steps(m, o);
  CHECK(sizes_named(staged, attention + ".scratch").front() == 40960);
  // sequence parallelism splits the rank's seq / cp tokens: 8 / 4 = 2 tokens over tp 4 is refused as the
  // input's error, not an internal invariant
  o.pipeline.stages = 1;
  o.grad_accumulation = 1;
  o.seq = 8;
  o.context_parallel.degree = 4;
  o.tensor_parallel = 4;
  CHECK_THROWS_WITH(
      build_training_steps(tensor_parallel_rank(test::tiny_model("tinyllama-1.1b"), 4), o),
      "--sequence-parallel: this rank's 2 tokens (--seq 8 / --cp 4) are not a multiple of --tp 4");
}

TEST_CASE("context parallelism: the layout torch's context_parallel refuses", "[quick][graph]") {
  // the load balancer cuts the sequence into 2 x cp chunks
  CHECK_THROWS_WITH(cp_run(100, 4, CpRotate::kAllGather), Catch::Contains("multiple of 2 x 4"));
  ModelConfig m = test::tiny_model("tinyllama-1.1b");
  TrainingOptions o;
  o.seq = 64;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kEager;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = 2;
  o.context_parallel.degree = 2;
  CHECK_THROWS_WITH(build_training_steps(m, o), Catch::Contains("use sdpa-flash or sdpa-efficient"));
  CHECK_THROWS_WITH(parse_cp_rotate("ring"), Catch::StartsWith("--cp-rotate-method: unknown value 'ring'"));
}

TEST_CASE("context parallelism: fit --vary seq tries only lengths context_parallel accepts", "[graph]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.capacity = "24GiB";
  a.batch = 1;
  a.seq = 1024;
  a.precision = "bf16";
  a.attention = "sdpa-flash";
  a.checkpointing = "full";
  a.world_size = 4;
  a.fsdp = "full-shard";
  a.fsdp2 = true;
  a.cp = 4;
  const FitResult r = fit(make_request(a), FitVary::kSeq, 0.1);
  REQUIRE(r.best > 0);
  CHECK(r.best % 8 == 0);  // 2 x cp load-balanced chunks
  for (const FitTrial& t : r.trials) {
    CHECK(t.value % 8 == 0);
  }
}
