// The layer stamp (sim/graph/layer_stamp.h, issue 40's "structure once, sizes many") appends decoder layers
// from a recorded one instead of running their code. Its output must be the direct emission's, byte for
// byte: this file builds each configuration of a grid twice, with the stamp switched off
// (set_layer_stamping(false): every layer emitted by its code, as before the stamp existed) and on, and
// compares every op, tensor and edge of the op graph, field by field, and the whole `predict --json`
// document. The grid: parallel layouts (DDP, ZeRO-1/2/3, FSDP1 and FSDP2, Megatron TP with sequence
// parallelism, pipeline, context parallel), PEFT (LoRA, QLoRA on bitsandbytes 4-bit weights), quantization
// (float8 training, 8-bit AdamW), torch.compile, checkpointing full / selective / selective-op / none,
// activation offload, mixed precision, inference and generation, mixture-of-experts and Gemma 2 (layers
// of two kinds), GPT-2. A test that compared a road with itself could not fail, so it also requires that
// the stamp ran (layers_stamped() grew) where it applies, and did not where its conditions exclude it.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sim/cli/prediction_report.h"
#include "sim/core/error.h"
#include "sim/graph/layer_stamp.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

namespace vramsim {
namespace {

RequestArgs small(const std::string& checkpointing) {
  RequestArgs a;
  a.model = "llama-3.2-1b";
  a.gpu = "h100";
  a.batch = 2;
  a.seq = 256;
  a.precision = "bf16";
  a.checkpointing = checkpointing;
  a.steps = 2;
  return a;
}

struct Case {
  std::string label;
  RequestArgs args;
  bool stamps = false;  // the stamp applies (some layers must have been stamped)
};

std::vector<Case> grid() {
  std::vector<Case> out;
  const auto add = [&](std::string label, bool stamps, auto&& edit) {
    RequestArgs a = small("full");
    edit(a);
    out.push_back(Case{std::move(label), a, stamps});
  };
  // The README's quick start: the benchmark's workload (bench/bench_quick_start.cpp).
  add("quick start", true, [](RequestArgs& a) {
    a.model = "llama-2-7b", a.gpu = "h200", a.batch = 4, a.seq = 4096, a.optimizer = "adamw-8bit";
  });
  add("single GPU, full", true, [](RequestArgs&) {});
  add("amp-bf16 (autocast: direct)", false, [](RequestArgs& a) { a.precision = "amp-bf16"; });
  add("DDP", true, [](RequestArgs& a) { a.world_size = 8; });
  add("ZeRO-1", true, [](RequestArgs& a) { a.world_size = 8, a.zero = 1; });
  add("ZeRO-2", true, [](RequestArgs& a) { a.world_size = 8, a.zero = 2; });
  add("ZeRO-3 (parameter hooks: direct)", false, [](RequestArgs& a) { a.world_size = 8, a.zero = 3; });
  add("FSDP1", true, [](RequestArgs& a) { a.world_size = 8, a.fsdp = "full-shard"; });
  add("FSDP2", true, [](RequestArgs& a) { a.world_size = 8, a.fsdp = "full-shard", a.fsdp2 = true; });
  add("TP 2 + SP", true, [](RequestArgs& a) { a.world_size = 2, a.tp = 2, a.sequence_parallel = true; });
  add("TP 2", true, [](RequestArgs& a) { a.world_size = 2, a.tp = 2; });
  add("PP 2", true, [](RequestArgs& a) { a.world_size = 2, a.pp = 2, a.grad_accumulation = 4; });
  add("CP 2", true, [](RequestArgs& a) { a.world_size = 2, a.cp = 2; });
  add("LoRA", true, [](RequestArgs& a) { a.lora_rank = 16; });
  add("QLoRA", true, [](RequestArgs& a) { a.lora_rank = 16, a.base_weights = "nf4"; });
  add("float8", true, [](RequestArgs& a) { a.float8 = "tensorwise"; });
  add("compile (captured: direct)", false, [](RequestArgs& a) { a.compile_mode = "default"; });
  add("activation offload", true, [](RequestArgs& a) { a.offload = "activations"; });
  add("grad accumulation 3", true, [](RequestArgs& a) { a.grad_accumulation = 3; });
  add("mixtral (MoE)", true, [](RequestArgs& a) { a.model = "mixtral-8x7b", a.seq = 128, a.batch = 1; });
  add("qwen1.5-moe", true, [](RequestArgs& a) { a.model = "qwen1.5-moe", a.seq = 128, a.batch = 1; });
  add("gemma-2-2b (two kinds of layers)", true, [](RequestArgs& a) { a.model = "gemma-2-2b"; });
  add("gpt2", true, [](RequestArgs& a) { a.model = "gpt2"; });
  add("checkpointing none (forward with autograd)", true, [](RequestArgs& a) { a.checkpointing = "none"; });
  for (const char* ckpt : {"selective", "selective-op"}) {  // a selective-checkpoint region: direct
    add(std::string("checkpointing ") + ckpt + " (direct)", false,
        [&](RequestArgs& a) { a.checkpointing = ckpt; });
  }
  add("inference", true, [](RequestArgs& a) { a.checkpointing = "none", a.inference = true; });
  add("generation (its own loop: direct)", false,
      [](RequestArgs& a) { a.checkpointing = "none", a.inference = true, a.generate = 8, a.seq = 64; });
  return out;
}

void check_same_graph(const OpGraph& stamped, const OpGraph& direct) {
  REQUIRE(stamped.op_count() == direct.op_count());
  for (OpId i = 0; i < direct.op_count(); ++i) {
    const Op& a = stamped.op(i);
    const Op& b = direct.op(i);
    INFO("op " << i << " " << b.name);
    REQUIRE(a.name == b.name);
    REQUIRE(a.kind == b.kind);
    REQUIRE(a.step == b.step);
    REQUIRE(a.micro_batch == b.micro_batch);
    REQUIRE(a.layer == b.layer);
    REQUIRE(a.phase == b.phase);
    REQUIRE(a.flops == b.flops);
    REQUIRE(a.bytes_moved == b.bytes_moved);
    REQUIRE(a.stream == b.stream);
    REQUIRE(a.host_waits_for == b.host_waits_for);
    REQUIRE(a.stream_waits_for == b.stream_waits_for);
    REQUIRE(a.comm_bytes == b.comm_bytes);
  }
  REQUIRE(stamped.tensors().size() == direct.tensors().size());
  for (const Tensor& b : direct.tensors()) {
    const Tensor& a = stamped.tensor(b.id);
    INFO("tensor " << b.id << " " << b.name);
    REQUIRE(a.id == b.id);
    REQUIRE(a.name == b.name);
    REQUIRE(a.size_bytes == b.size_bytes);
    REQUIRE(a.dtype == b.dtype);
    REQUIRE(a.category == b.category);
    REQUIRE(a.producer == b.producer);
    REQUIRE(a.consumers == b.consumers);
    REQUIRE(a.persistent == b.persistent);
    REQUIRE(a.layer == b.layer);
    REQUIRE(a.record_stream == b.record_stream);
    REQUIRE(a.graph_pool == b.graph_pool);
  }
  REQUIRE(stamped.edges().size() == direct.edges().size());
  for (std::size_t i = 0; i < direct.edges().size(); ++i) {
    INFO("edge " << i);
    REQUIRE(stamped.edges()[i].source == direct.edges()[i].source);
    REQUIRE(stamped.edges()[i].target == direct.edges()[i].target);
    REQUIRE(stamped.edges()[i].dependency.tensor == direct.edges()[i].dependency.tensor);
    REQUIRE(stamped.edges()[i].dependency.kind == direct.edges()[i].dependency.kind);
  }
  CHECK(stamped.kv_cache_bytes == direct.kv_cache_bytes);
  CHECK(stamped.unified_memory_bytes == direct.unified_memory_bytes);
  CHECK(stamped.host_memory.total() == direct.host_memory.total());
}

std::string predict_json(const PredictRequest& request) {
  return cli::prediction_json(predict(request), cli::ReportText{}).dump(1);
}

// Restores the process-wide switch however the test ends.
struct StampingSwitch {
  ~StampingSwitch() { set_layer_stamping(true); }
};

}  // namespace

TEST_CASE("layer stamp: the same op graph and the same predict --json as the direct emission on a grid",
          "[graph][predict][stamp]") {
  StampingSwitch restore;
  int compared = 0;
  for (const Case& c : grid()) {
    INFO(c.label);
    PredictRequest request;
    try {
      request = make_request(c.args);
    } catch (const InputError& e) {
      FAIL("the grid holds a configuration predict refuses: " << e.what());
    }
    set_layer_stamping(false);
    const std::uint64_t before_direct = layers_stamped();
    const OpGraph direct = build_training_steps(request.model, request.options);
    const std::string direct_json = predict_json(request);
    REQUIRE(layers_stamped() == before_direct);  // switched off: nothing stamped

    set_layer_stamping(true);
    const std::uint64_t before = layers_stamped();
    const OpGraph stamped = build_training_steps(request.model, request.options);
    const std::uint64_t stamped_layers = layers_stamped() - before;
    const std::string stamped_json = predict_json(request);
    INFO("layers stamped: " << stamped_layers);
    if (c.stamps) {
      CHECK(stamped_layers > 0);
    } else {
      CHECK(stamped_layers == 0);  // the stamp's conditions (layer_stamp.h) keep this configuration direct
    }
    check_same_graph(stamped, direct);
    CHECK(stamped_json == direct_json);
    ++compared;
  }
  CHECK(compared == 28);
}

// Under full checkpointing every forward pass (no_grad) and every backward (each layer recomputed with
// autograd, in reverse order) emits its first two layers directly (the second one checks that the first
// one's template repeats) and stamps the rest. Llama-3.2-1B has 16 decoder layers. In the first step's
// forward, layer 0's q_proj is the process's first matmul and allocates the main thread's cuBLAS workspace
// (TorchOps::maybe_allocate_workspace, as cuBLAS does at a handle's first GEMM), so layer 0's region is not
// layer 1's: layers 0, 1 and 2 are emitted directly (1 and 2 agree) and 3..15 stamped, 13 layers; the
// second step's forward stamps 2..15, 14 layers. Each backward recomputes layers 15 and 14 directly and
// stamps 13..0, 14 layers (the autograd thread's workspace is made by a backward node, outside the
// recomputed layer). In all 13 + 14 + 2 x 14 = 55.
TEST_CASE("layer stamp: every layer after the first two of each pass is stamped", "[graph][stamp]") {
  StampingSwitch restore;
  set_layer_stamping(true);
  const PredictRequest request = make_request(small("full"));
  REQUIRE(request.model.n_layers == 16);
  const std::uint64_t before = layers_stamped();
  (void)build_training_steps(request.model, request.options);
  CHECK(layers_stamped() - before == 13 + 14 + 2 * 14);
}

}  // namespace vramsim
