// Pipeline parallelism (sim/parallel/pipeline_parallel.h) against Megatron-LM's schedules and the activation
// memory Korthikanti et al. 2022 (Section 4.2.3) and Narayanan et al. 2021 derive from them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/core/types.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/pipeline_parallel.h"

using namespace vramsim;

namespace {

std::string order(const PipelineOptions& o, int micro_batches) {
  std::string out;
  for (const PipelineAction& a : pipeline_schedule(o, micro_batches)) {
    if (!out.empty()) {
      out += ' ';
    }
    out += a.forward ? 'F' : 'B';
    if (o.schedule == PipelineSchedule::kInterleaved) {
      out += 'c' + std::to_string(a.chunk) + 'm';
    }
    out += std::to_string(a.micro_batch);
  }
  return out;
}

PipelineOptions pp(int stages, int stage, PipelineSchedule schedule = PipelineSchedule::k1F1B, int v = 1) {
  PipelineOptions o;
  o.stages = stages;
  o.stage = stage;
  o.schedule = schedule;
  o.virtual_stages = v;
  return o;
}

// A GPT layer counted as the paper counts it (test_korthikanti.cpp): s*b*h*34 + 5*a*s^2*b bytes saved.
constexpr std::int64_t kH = 256, kA = 4, kS = 128, kB = 2, kLayers = 8;
constexpr std::int64_t kPerLayer = kS * kB * kH * 34 + 5 * kA * kS * kS * kB;

ModelConfig gpt() { return test::megatron_gpt(kH, kA, kS, static_cast<int>(kLayers)); }

TrainingOptions paper_options(const PipelineOptions& pipeline, int micro_batches) {
  TrainingOptions o = test::megatron_options(kS, kB);
  o.grad_accumulation = micro_batches;
  o.pipeline = pipeline;
  return o;
}

// The most bytes of the decoder layers' saved activations alive at once in the schedule.
std::int64_t peak_layer_activations(const OpGraph& g) {
  const AllocationSchedule s = build_allocation_schedule(g);
  std::int64_t live = 0;
  std::int64_t peak = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const Tensor& t = g.tensor(s.event_tensor[i]);
    if (t.category != TensorCategory::kActivation || t.layer < 0) {
      continue;
    }
    if (s.events[i].action == TraceAction::kAlloc) {
      live += static_cast<std::int64_t>(t.size_bytes);
      peak = std::max(peak, live);
    } else if (s.events[i].action == TraceAction::kFreeCompleted) {
      live -= static_cast<std::int64_t>(t.size_bytes);
    }
  }
  return peak;
}

std::int64_t parameter_bytes(const OpGraph& g) {
  std::int64_t total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kParameter) {
      total += static_cast<std::int64_t>(t.size_bytes);
    }
  }
  return total;
}

}  // namespace

TEST_CASE("Megatron 1F1B: warm-up forwards, one forward one backward, cool-down backwards",
          "[quick][graph]") {
  // forward_backward_pipelining_without_interleaving: stage r of p runs min(p - r - 1, M) warm-up forwards.
  CHECK(order(pp(4, 0), 6) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(order(pp(4, 1), 6) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  CHECK(order(pp(4, 3), 6) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  CHECK(order(pp(4, 0), 2) == "F0 F1 B0 B1");  // fewer micro-batches than stages: all warm-up
}

TEST_CASE("Megatron interleaved: chunk and micro-batch of each virtual micro-batch", "[quick][graph]") {
  // p = 2, v = 2, M = 4, rank 0: warm-up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4; virtual micro-batch k runs
  // chunk (k mod 4) / 2 (backward: 1 - that) on micro-batch (k / 4) * 2 + k mod 2.
  CHECK(order(pp(2, 0, PipelineSchedule::kInterleaved, 2), 4) ==
        "Fc0m0 Fc0m1 Fc1m0 Fc1m1 "
        "Fc0m2 Bc1m0 Fc0m3 Bc1m1 Fc1m2 Bc0m0 Fc1m3 Bc0m1 "
        "Bc1m2 Bc1m3 Bc0m2 Bc0m3");
  // rank 1: warm-up (2 - 1 - 1) * 2 + 2 = 2.
  CHECK(order(pp(2, 1, PipelineSchedule::kInterleaved, 2), 4) ==
        "Fc0m0 Fc0m1 "
        "Fc1m0 Bc1m0 Fc1m1 Bc1m1 Fc0m2 Bc0m0 Fc0m3 Bc0m1 Fc1m2 Bc1m2 Fc1m3 Bc1m3 "
        "Bc0m2 Bc0m3");
  // Chunk c of rank r is virtual stage c * p + r: layers 2..3 and 6..7 of 8 on rank 1.
  const std::vector<PipelineChunk> chunks = pipeline_chunks(8, pp(2, 1, PipelineSchedule::kInterleaved, 2));
  REQUIRE(chunks.size() == 2);
  CHECK((chunks[0].first_layer == 2 && chunks[0].layers == 2 && !chunks[0].embeddings && !chunks[0].head));
  CHECK((chunks[1].first_layer == 6 && chunks[1].layers == 2 && !chunks[1].embeddings && chunks[1].head));
}

TEST_CASE("Pipeline layouts Megatron refuses are one-line errors", "[quick][graph]") {
  CHECK_THROWS_AS(pipeline_chunks(10, pp(4, 0)), InputError);  // 10 layers over 4 stages
  CHECK_THROWS_AS(validate(pp(4, 4), 8), InputError);          // no stage 4 of 4
  CHECK_THROWS_AS(validate(pp(4, 0, PipelineSchedule::kInterleaved, 2), 6), InputError);  // 6 % 4
  CHECK_THROWS_AS(validate(pp(4, 0, PipelineSchedule::kInterleaved, 1), 8), InputError);  // one chunk
  CHECK_THROWS_AS(parse_pipeline_schedule("zero-bubble"), InputError);
  // Megatron's even split names torchtitan's as the way out.
  CHECK_THROWS_WITH(pipeline_chunks(126, pp(8, 0)),
                    Catch::Contains("126 layers do not split evenly over 8 stages") &&
                        Catch::Contains("--pp-split torchtitan"));
}

namespace {

PipelineOptions torchtitan(int stages, int stage, PipelineSchedule schedule = PipelineSchedule::k1F1B,
                           int v = 1) {
  PipelineOptions o = pp(stages, stage, schedule, v);
  o.split = PipelineSplit::kTorchtitan;
  return o;
}

}  // namespace

TEST_CASE("torchtitan's split: the embeddings and the output weigh one layer each, the remainder goes first",
          "[quick][graph]") {
  // torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part(num_stages, num_layers,
  // input_weight=1, output_weight=1), by hand. Llama-3.1-405B (126 layers) on 8 stages, as torchtitan's
  // 405B benchmark runs it: (126 + 2) / 8 = 16 effective layers each, no remainder; stage 0 gives one to the
  // embeddings and stage 7 one to the norm + output.
  CHECK(layers_per_virtual_stage(126, torchtitan(8, 0)) == std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15});
  // Interleaved, 2 stages per rank: 16 virtual stages of 128 / 16 = 8.
  CHECK(layers_per_virtual_stage(126, torchtitan(8, 0, PipelineSchedule::kInterleaved, 2)) ==
        std::vector<int>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7});
  // 9 layers on 4 stages: 11 effective, 2 each and the first 3 stages one more: 3 - 1, 3, 3, 2 - 1.
  CHECK(layers_per_virtual_stage(9, torchtitan(4, 0)) == std::vector<int>{2, 3, 3, 1});
  // "loop" placement: rank 1's chunks are virtual stages 1 and 9, layers 7..14 and 71..78.
  const std::vector<PipelineChunk> chunks =
      pipeline_chunks(126, torchtitan(8, 1, PipelineSchedule::kInterleaved, 2));
  REQUIRE(chunks.size() == 2);
  CHECK((chunks[0].first_layer == 7 && chunks[0].layers == 8 && !chunks[0].embeddings && !chunks[0].head));
  CHECK((chunks[1].first_layer == 71 && chunks[1].layers == 8 && !chunks[1].embeddings && !chunks[1].head));
  // Its ValueErrors, quoted.
  CHECK_THROWS_WITH(layers_per_virtual_stage(4, torchtitan(8, 0)),
                    Catch::Contains("Number of stages (8) cannot be greater than effective layers (6)"));
  PipelineOptions heavy = torchtitan(4, 0);
  heavy.first_stage_less_layers = 4;  // 10 + 4 + 1 = 15 effective, 3 per stage
  CHECK_THROWS_WITH(layers_per_virtual_stage(10, heavy),
                    Catch::Contains("input_weight (4) exceeds minimum layers per stage (3)."));
}

TEST_CASE("GPipe: every forward, then every backward, each stage holding all micro-batches", "[graph]") {
  // torch.distributed.pipelining ScheduleGPipe (Huang et al. 2019): the forwards of micro-batches 0..M-1,
  // then their backwards in the same order, on every stage.
  CHECK(order(pp(4, 0, PipelineSchedule::kGPipe), 3) == "F0 F1 F2 B0 B1 B2");
  CHECK(order(pp(4, 3, PipelineSchedule::kGPipe), 3) == "F0 F1 F2 B0 B1 B2");
  const int p = 4;
  const int layers_per_stage = static_cast<int>(kLayers) / p;
  for (int r : {0, p - 1}) {
    INFO("stage " << r);
    CHECK(peak_layer_activations(
              build_training_steps(gpt(), paper_options(pp(p, r, PipelineSchedule::kGPipe), 6))) ==
          6 * layers_per_stage * kPerLayer);
  }
}

TEST_CASE("1F1B: stage r holds the activations of p - r micro-batches of its layers", "[graph]") {
  // Korthikanti et al. 2022, Section 4.2.3: "the first stage must store activations for p microbatches
  // ... of L/p layers", as much as one micro-batch through all L layers, whatever p is.
  const int p = 4;
  const int layers_per_stage = static_cast<int>(kLayers) / p;
  for (int r = 0; r < p; ++r) {
    const OpGraph g = build_training_steps(gpt(), paper_options(pp(p, r), 8));
    INFO("stage " << r);
    CHECK(peak_layer_activations(g) == (p - r) * layers_per_stage * kPerLayer);
  }
  CHECK(peak_layer_activations(build_training_steps(gpt(), paper_options(pp(p, 0), 8))) ==
        kLayers * kPerLayer);
  // With fewer micro-batches than stages, only M are ever in flight.
  CHECK(peak_layer_activations(build_training_steps(gpt(), paper_options(pp(p, 0), 2))) ==
        2 * layers_per_stage * kPerLayer);
}

TEST_CASE("1F1B with full checkpointing: in-flight micro-batches keep their layers' inputs only", "[graph]") {
  // torch.utils.checkpoint keeps each layer's input hidden state (s * b * h bf16 values, 2sbh bytes; the
  // stage's first layer's input too: the embeddings' output or the received tensor), so stage r holds
  // (p - r) micro-batches x n layers x 2sbh, against (p - r) x n x kPerLayer without (Korthikanti et al.
  // 2022, Section 5: full recomputation keeps 2sbh per layer). The replay in backward makes one layer's
  // activations at a time, outside any layer's forward (not counted here). The forward's context must
  // outlive the forward, as the replay runs after later micro-batches' forwards (this crashed before).
  const int p = 4;
  const std::int64_t n = kLayers / p;
  const std::int64_t input = 2 * kS * kB * kH;
  for (int r = 0; r < p; ++r) {
    TrainingOptions o = paper_options(pp(p, r), 8);
    o.checkpointing = Checkpointing::kFull;
    INFO("stage " << r);
    CHECK(peak_layer_activations(build_training_steps(gpt(), o)) == (p - r) * n * input);
  }
}

TEST_CASE("Interleaved 1F1B: the first stage holds L * (1 + (p - 1) / (p * v)) layers' activations",
          "[graph]") {
  // Korthikanti et al. 2022, Section 4.2.3 (Narayanan et al. 2021's interleaved schedule): p = 2, v = 2,
  // L = 8: 8 * (1 + 1 / 4) = 10 layers, i.e. five chunk-forwards of 2 layers in flight before the first
  // backward (the four warm-up forwards and the first steady-state one).
  const OpGraph g =
      build_training_steps(gpt(), paper_options(pp(2, 0, PipelineSchedule::kInterleaved, 2), 4));
  CHECK(peak_layer_activations(g) == 10 * kPerLayer);
}

TEST_CASE("Pipeline stages hold their own layers, the first the embeddings, the last the head",
          "[quick][graph]") {
  // GPT-2 in bf16, by hand: a layer has 12h^2 + 13h parameters (c_attn 3h^2 + 3h, c_proj h^2 + h, c_fc
  // 4h^2 + 4h, mlp c_proj 4h^2 + h, two LayerNorms 2h each); wte V*h and wpe S*h; ln_f 2h. The head is tied
  // to wte, and Megatron keeps a copy of the word embeddings on the last stage for it.
  const std::int64_t layer = 12 * kH * kH + 13 * kH;
  const std::int64_t wte = 1024 * kH;
  const std::int64_t wpe = kS * kH;
  const int p = 4;
  const std::int64_t per_stage = (kLayers / p) * layer;
  CHECK(parameter_bytes(build_training_steps(gpt(), paper_options(pp(p, 0), 4))) ==
        2 * (per_stage + wte + wpe));
  CHECK(parameter_bytes(build_training_steps(gpt(), paper_options(pp(p, 1), 4))) == 2 * per_stage);
  CHECK(parameter_bytes(build_training_steps(gpt(), paper_options(pp(p, 3), 4))) ==
        2 * (per_stage + 2 * kH + wte));
}

TEST_CASE("FSDP2 under torch.distributed.pipelining reduces the gradients once per step, accumulated in fp32",
          "[quick][graph]") {
  // torch/distributed/pipelining/stage.py backward_maybe_with_nosync: every backward of a stage but its last
  // runs with set_requires_gradient_sync(False) and set_reshard_after_backward(False); FSDP2's post_backward
  // then upcasts each unsharded gradient to reduce_dtype (FSDPParam.to_accumulated_grad_if_needed) and adds
  // later micro-batches' into it. Stage 0 of 2 of the tiny Llama (2 layers of 49,536 parameters, h 64,
  // vocabulary 1,000) holds layer 0 and embed_tokens (64,000): one fp32 accumulated gradient per parameter
  // per step, 4 B x (49,536 + 64,000), and one reduce-scatter per unit per step, not one per micro-batch.
  constexpr std::int64_t kLayerParams = 49'536;
  constexpr std::int64_t kEmbedding = 1000 * 64;
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.grad_accumulation = 4;
  o.pipeline = pp(2, 0);
  o.data_parallel.scheme = "fsdp2-shard-grad-op";
  o.data_parallel.world_size = 2;
  o.data_parallel.fsdp_reduce_dtype = DType::kFloat32;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  Bytes accumulated = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.ends_with(".unsharded_accumulated_grad")) {
      accumulated += t.size_bytes;
    }
  }
  CHECK(accumulated == static_cast<Bytes>(o.steps * 4 * (kLayerParams + kEmbedding)));
  CHECK(test::sizes_named(g, "layers.0.reduce_output").size() == static_cast<std::size_t>(o.steps));
  // Without a reduce dtype the bf16 gradients accumulate in .grad itself: nothing is upcast, and the
  // reduction still runs once per step.
  o.data_parallel.fsdp_reduce_dtype.reset();
  const OpGraph same = build_training_steps(test::tiny_model("llama-2-7b"), o);
  for (const Tensor& t : same.tensors()) {
    CHECK_FALSE(t.name.ends_with(".unsharded_accumulated_grad"));
  }
  CHECK(test::sizes_named(same, "layers.0.reduce_output").size() == static_cast<std::size_t>(o.steps));
}

namespace {

// The tiny Llama (2 layers, h 64, vocabulary 1,000) in bf16 on 2 stages, 4 micro-batches of 2 x 32 tokens,
// 2 steps; one layer per stage under either split (torchtitan's: (2 + 2) / 2 = 2 effective layers each, one
// of them the embeddings or the head).
OpGraph two_stage_run(PipelineSplit split, int stage) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.grad_accumulation = 4;
  o.pipeline = pp(2, stage);
  o.pipeline.split = split;
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

std::int64_t live_at_second_step(const OpGraph& g) {
  return build_allocation_schedule(g).live_bytes_at(2, Phase::kForward).value();
}

}  // namespace

TEST_CASE(
    "torch.distributed.pipelining (2024-12) keeps receive buffers, outputs and input gradients per "
    "micro-batch until the next step",
    "[quick][graph]") {
  // torch/distributed/pipelining/stage.py of PyTorch 2024-12-23 (torchtitan's 2024-12 benchmarks), by hand.
  // One micro-batch's hidden states: b * s * h * 2 B = 2 * 32 * 64 * 2 = 8,192 B; its logits (torchtitan's
  // Transformer.forward returns self.output(h), bf16): 2 * 32 * 1,000 * 2 = 128,000 B. M = 4.
  constexpr std::int64_t kHidden = 2 * 32 * 64 * 2;
  constexpr std::int64_t kLogits = 2 * 32 * 1000 * 2;
  constexpr int kM = 4;
  const OpGraph first = two_stage_run(PipelineSplit::kTorchtitan, 0);
  const OpGraph last = two_stage_run(PipelineSplit::kTorchtitan, 1);
  // _prepare_forward_infra / _prepare_backward_infra, once at the first step: a receive buffer per
  // micro-batch on every stage but the first, a buffer for the output's gradient on every stage but the
  // last; made once for both steps, never freed.
  for (int mb = 0; mb < kM; ++mb) {
    const std::string n = "pipeline.chunk0.mb" + std::to_string(mb);
    CHECK(test::sizes_named(first, n + ".grad_recv_buffer") == std::vector<Bytes>{kHidden});
    CHECK(test::sizes_named(first, n + ".recv_buffer").empty());
    CHECK(test::sizes_named(last, n + ".recv_buffer") == std::vector<Bytes>{kHidden});
    CHECK(test::sizes_named(last, n + ".grad_recv_buffer").empty());
  }
  // Where the second step begins (before its clear_runtime_states), against Megatron's runtime on the same
  // layers (deallocate_output_tensor frees what was sent; received tensors and their gradients go with each
  // backward): the first stage still holds its M outputs (output_chunks) and M gradient buffers; the last
  // its M receive buffers, their M gradients (.grad, set to None by clear_runtime_states) and M logits
  // (output_chunks; the merged copy schedule.step returned was dropped by the training loop).
  CHECK(live_at_second_step(first) - live_at_second_step(two_stage_run(PipelineSplit::kMegatron, 0)) ==
        kM * kHidden + kM * kHidden);
  CHECK(live_at_second_step(last) - live_at_second_step(two_stage_run(PipelineSplit::kMegatron, 1)) ==
        kM * kHidden + kM * kHidden + kM * kLogits);
  // _merge_outputs on the last stage: merge_chunks concatenates the M logits along dimension 0, each step.
  CHECK(test::sizes_named(last, "pipeline.merge_output_chunks") ==
        std::vector<Bytes>{kM * kLogits, kM * kLogits});
  CHECK(test::sizes_named(first, "pipeline.merge_output_chunks").empty());
}

TEST_CASE("torchtitan's pipeline stages run their compiled TransformerBlocks", "[quick][graph]") {
  // torchtitan/parallelisms/parallelize_llama.py (9dec370) applies torch.compile to each TransformerBlock of
  // each stage's model chunk after the split: every forward of layer 0 on stage 0 is a call of its compiled
  // graph, and every backward runs its compiled backward graph once (whose kernel summing the gradient of
  // the layer's input is `layers.0.compiled.grad_sum`): 4 micro-batches x 2 steps. (The pipeline path ran the
  // layers eagerly before, while the report said compiled.)
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.grad_accumulation = 4;
  o.pipeline = torchtitan(2, 0);
  o.compile = CompileMode::kDefault;
  o.compile_scope = CompileScope::kLayer;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  int backwards = 0;
  for (OpId id = 0; id < g.op_count(); ++id) {
    const Op& op = g.op(id);
    backwards += op.name == "layers.0.compiled.grad_sum" && op.kind == "triton_backward" ? 1 : 0;
  }
  CHECK(backwards == 4 * 2);
}
