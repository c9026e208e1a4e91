// Pipeline parallelism (sim/parallel/pipeline_parallel.h) against Megatron-LM's schedules and the activation
// memory Korthikanti et al. 2022 (Section 4.2.3) and Narayanan et al. 2021 derive from them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"

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
  CHECK_THROWS_AS(parse_pipeline_schedule("gpipe"), InputError);
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
