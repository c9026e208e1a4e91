// Context parallelism with LoRA and QLoRA (issue 35): torchtune's lora_finetune_distributed.py
// (pytorch/torchtune 10c31c0, "Update Context Parallel Integration" #2879) takes context_parallel_dim for
// LoRA, DoRA and QLoRA, runs torch.distributed.tensor.experimental.context_parallel over the "cp" mesh
// dimension (training/_distributed.py get_context_parallel_manager) and shards the model with FSDP2 over the
// flattened dp_shard_cp mesh. context_parallel only swaps SDPA for ring attention and shards the batch's
// buffers along the sequence, so every adapted (or NF4) linear runs on the rank's seq / N tokens. Bytes
// worked by hand.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph_test_util.h"
#include "peft_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

using test::saved_by;
using test::sizes_named;

namespace {

// The tiny bf16 Llama of peft_test_util.h (width 64, 4 query heads of 16, 2 key/value heads: q_proj 64 -> 64,
// v_proj 64 -> 32), PEFT LoRA r 8 on q_proj and v_proj with fp32 adapters (autocast_adapter_dtype=True),
// batch 2 x seq 64, FSDP2 over `world` GPUs of which `cp` share each sequence.
TrainingOptions lora_cp(int world, int cp) {
  TrainingOptions o = test::tiny_peft_options(test::peft_method(PeftMethod::kLora, 8, {"q_proj", "v_proj"}));
  o.seq = 64;
  o.attention = AttentionKind::kSdpaFlash;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = world;
  o.context_parallel.degree = cp;
  return o;
}

// Bytes of the persistent parameters (what a rank keeps between steps) whose names contain `part`.
Bytes kept_parameters(const OpGraph& g, const std::string& part) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kParameter && t.persistent && t.name.find(part) != std::string::npos) {
      total += t.size_bytes;
    }
  }
  return total;
}

// Bytes of everything saved for backward (category kActivation) in decoder layer `layer`.
Bytes saved_in_layer(const OpGraph& g, int layer) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kActivation && t.layer == layer) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace

TEST_CASE("context parallelism with LoRA: the adapters run on the rank's seq / cp tokens",
          "[quick][graph][context-parallel][lora]") {
  const ModelConfig m = test::tiny_peft_model();
  const OpGraph cp1 = build_training_steps(m, lora_cp(2, 1));
  const OpGraph cp2 = build_training_steps(m, lora_cp(2, 2));
  // CP 2: each rank holds 64 / 2 = 32 tokens of each of the 2 sequences (the load balancer's two chunks of
  // 16), T = 64 tokens. CP 1: T = 2 x 64 = 128.
  constexpr Bytes T2 = 2 * 32, T1 = 2 * 64;
  // Layer 0 (its input does not require grad: the embeddings are frozen) saves only what the adapters'
  // gradients need (lora/layer.py Linear.forward): lora_A keeps its input cast to fp32
  // (_cast_input_dtype, T x 64 x 4 B per adapted module, two modules) and lora_B keeps lora_A's fp32
  // output (T x 8 x 4 B per module).
  CHECK(saved_by(cp2, 0, {".lora_cast_input"}) == 2 * T2 * 64 * 4);               // 32,768
  CHECK(saved_by(cp2, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * T2 * 8 * 4);  // 4,096
  CHECK(saved_by(cp1, 0, {".lora_cast_input"}) == 2 * T1 * 64 * 4);               // 65,536
  CHECK(saved_by(cp1, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * T1 * 8 * 4);  // 8,192
  // Attention is ring attention on the local q (2, 4, 32, 16) bf16: 8,192 B.
  CHECK(sizes_named(cp2, "layers.0.attn.sdpa.ring_attention").front() == 2 * 4 * 32 * 16 * 2);
  CHECK(sizes_named(cp1, "layers.0.attn.sdpa.ring_attention").empty());
  // Every tensor layer 1 saves is per token (the norms' inputs and rstd, the projections' inputs, q, k, v,
  // the attention output and its logsumexp, the MLP's, the adapters'), so half the tokens save half the
  // bytes.
  CHECK(2 * saved_in_layer(cp2, 1) == saved_in_layer(cp1, 1));
  // FSDP2 shards over dp_shard x cp (torchtune's dp_shard_cp mesh): the adapters per layer, fp32, are
  // q_proj lora_A 8 x 64 and lora_B 64 x 8, v_proj lora_A 8 x 64 and lora_B 32 x 8: 1,792 elements, 7,168 B;
  // 2 layers 14,336 B, each rank keeping 1 / 2 of them on 2 GPUs whether the 2 share a sequence or not, 1 / 4
  // on 4 GPUs of CP 2 (dp_shard 2 x cp 2).
  CHECK(kept_parameters(cp2, ".lora_") == 14336 / 2);
  CHECK(kept_parameters(cp1, ".lora_") == 14336 / 2);
  CHECK(kept_parameters(build_training_steps(m, lora_cp(4, 2)), ".lora_") == 14336 / 4);
}

TEST_CASE("context parallelism with PEFT methods: what composes and what vramsim refuses",
          "[quick][graph][context-parallel][peft]") {
  const ModelConfig m = test::tiny_peft_model();
  // DoRA and the other linear-layer methods run on the local tokens like LoRA
  TrainingOptions dora = lora_cp(2, 2);
  dora.lora.use_dora = true;
  CHECK_NOTHROW(build_training_steps(m, dora));
  TrainingOptions ia3 = lora_cp(2, 2);
  ia3.lora = test::peft_method(PeftMethod::kIa3);
  CHECK_NOTHROW(build_training_steps(m, ia3));
  // Prompt learning prepends its virtual tokens inside PeftModel.forward, after context_parallel has sharded
  // the ids: no library runs it, vramsim does not model it
  TrainingOptions prompt = lora_cp(2, 2);
  prompt.lora = test::peft_method(PeftMethod::kPromptTuning);
  prompt.lora.num_virtual_tokens = 4;
  CHECK_THROWS_WITH(build_training_steps(m, prompt),
                    "--peft-method prompt-tuning: with --generate, --pp or --cp is not modelled (vramsim)");
}

namespace {

// torchtune's QLoRA on the NF4 test's tiny Llama (tests/graph/test_torchao_nf4_fsdp2.cpp: hidden 256, 4 heads
// of 64, 2 KV heads, MLP 512): LoRA r 8 on q_proj and v_proj with bf16 adapters (torchtune's LoRALinear under
// the recipe's dtype), torchao NF4 base weights, bf16, FSDP2 on 2 GPUs, batch 1 x seq 16, CP `cp`.
ModelConfig nf4_model() {
  ModelConfig m = test::tiny_model("tinyllama-1.1b", 2);
  m.d_model = 256;
  m.head_dim = 64;
  m.d_ff = 512;
  return m;
}
TrainingOptions qlora_cp(int cp) {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 16;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.attention = AttentionKind::kSdpaFlash;
  o.cublas_workspace_bytes = 0;
  o.lora.rank = 8;
  o.lora.targets = {"q_proj", "v_proj"};
  o.bnb.format = BnbFormat::kTorchaoNf4;
  o.bnb.prepare_kbit_training = false;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = 2;
  o.context_parallel.degree = cp;
  return o;
}

}  // namespace

TEST_CASE("context parallelism with QLoRA: NF4 shards over dp_shard x cp, the adapters on seq / cp tokens",
          "[quick][graph][context-parallel][nf4]") {
  const ModelConfig m = nf4_model();
  const OpGraph cp1 = build_training_steps(m, qlora_cp(1));
  const OpGraph cp2 = build_training_steps(m, qlora_cp(2));
  // The layer's NF4 state as test_torchao_nf4_fsdp2.cpp works it out: 589,824 elements give 304,200 B to
  // all-gather (quantized_scalers n / 64, quantization_factor n / 16,384 bf16, quantized_data n / 2); each of
  // the 2 ranks keeps half (152,100 B) and every weight's scaler_mean and nf4 table (7 x 34 B); the bf16
  // norms and adapters are 15,360 B, halved. CP changes none of it: FSDP2's mesh is dp_shard_cp, 2 ranks.
  constexpr Bytes gathered = 304200 + 15360;
  constexpr Bytes kept = 152100 + 7 * 34 + 15360 / 2;
  for (const OpGraph* g : {&cp1, &cp2}) {
    CHECK(kept_parameters(*g, "model.layers.0.") == kept);
    CHECK(sizes_named(*g, "layers.0.all_gather_output") == std::vector<Bytes>{gathered, gathered});
  }
  // The adapters' activations at the rank's tokens: lora_B keeps lora_A's bf16 output, tokens x 8 x 2 B per
  // module, 2 modules: CP 2 has 16 / 2 = 8 tokens (256 B), CP 1 16 (512 B). The bf16 adapters need no fp32
  // copy of their input.
  CHECK(saved_by(cp2, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * 8 * 8 * 2);
  CHECK(saved_by(cp1, 0, {"q_proj.lora_A", "v_proj.lora_A"}) == 2 * 16 * 8 * 2);
  CHECK(saved_by(cp2, 0, {".lora_cast_input"}) == 0);
  // Ring attention on q (1, 4, 8, 64) bf16: 4,096 B.
  CHECK(sizes_named(cp2, "layers.0.attn.sdpa.ring_attention").front() == 1 * 4 * 8 * 64 * 2);
}
