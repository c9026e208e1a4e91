// torchtune's distributed QLoRA: torchao NF4Tensor base weights sharded by FSDP2 (sim/finetune/torchao_nf4.h,
// sim/parallel/fsdp2.cpp). Bytes worked by hand from
//   * torchao/dtypes/nf4tensor.py (pytorch/ao 0598012907): NF4Tensor.fsdp_pre_all_gather returns
//     (quantized_scalers, quantization_factor, quantized_data); nf4_split and nf4_new_zeros cut each of them
//     into equal flat chunks; scaler_mean and nf4 travel as metadata;
//   * torchtune/training/_distributed.py (pytorch/torchtune bd2a0fc7c) load_from_full_model_state_dict:
//     to_nf4 on the device, torch.chunk along dim 0, this rank's chunk copied into new_zeros;
//   * torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_all_gather packs every all-gather
//     input of the unit into one buffer (as bytes when dtypes differ), foreach_all_gather_copy_out gives each
//     input its own unsharded tensor (FSDPParam.init_all_gather_outputs).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

using test::sizes_named;

namespace {

// The composition matrix's tiny Llama (tests/data/tiny-llama.config.json): hidden 256, 4 heads of 64, 2 KV
// heads (k/v 128 x 256), MLP 512, so that every linear has a multiple of 64 x 256 elements (torchao's
// asserts).
ModelConfig tiny() {
  ModelConfig m = test::tiny_model("tinyllama-1.1b", 2);
  m.d_model = 256;
  m.head_dim = 64;
  m.d_ff = 512;
  return m;
}

// torchtune's llama2/7B_qlora on `world` GPUs: LoRA on q_proj and v_proj (rank 8, bf16 adapters), NF4 base,
// bf16, FSDP2 fully_shard per decoder layer and the root (reshard_after_forward=True).
TrainingOptions qlora(int world, const std::string& scheme = "fsdp2-full-shard") {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 16;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  o.lora.rank = 8;
  o.lora.targets = {"q_proj", "v_proj"};
  o.bnb.format = BnbFormat::kTorchaoNf4;
  o.bnb.prepare_kbit_training = false;
  o.data_parallel.scheme = scheme;
  o.data_parallel.world_size = world;
  return o;
}

// Bytes of the parameters (category kParameter, alive at the end) whose names start with `prefix`.
Bytes parameter_bytes(const OpGraph& g, const std::string& prefix) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kParameter && t.persistent && t.name.starts_with(prefix)) {
      total += t.size_bytes;
    }
  }
  return total;
}

// The sizes of the tensors whose names end with `suffix` and contain `part`, in creation order.
std::vector<Bytes> sizes_ending(const OpGraph& g, const std::string& part, const std::string& suffix) {
  std::vector<Bytes> out;
  for (const Tensor& t : g.tensors()) {
    if (t.name.ends_with(suffix) && t.name.find(part) != std::string::npos) {
      out.push_back(t.size_bytes);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("FSDP2 + torchao NF4: one layer's sharded NF4 state per rank and its all-gather buffer",
          "[quick][graph][fsdp2][nf4]") {
  const OpGraph g = build_training_steps(tiny(), qlora(2));
  // The layer's seven NF4 weights, n elements each: q and o 256 x 256 = 65,536; k and v 128 x 256 = 32,768;
  // gate and up 512 x 256, down 256 x 512 = 131,072: 589,824 in all.
  constexpr Bytes n_layer = 2 * 65536 + 2 * 32768 + 3 * 131072;
  static_assert(n_layer == 589824);
  // Per weight, what fsdp_pre_all_gather hands FSDP2: quantized_scalers int8 n / 64, quantization_factor
  // bf16 n / (64 x 256), quantized_data uint8 n / 2. For the layer: 9,216 + 36 x 2 + 294,912 = 304,200 B.
  constexpr Bytes nf4_gathered = n_layer / 64 + n_layer / (64 * 256) * 2 + n_layer / 2;
  static_assert(nf4_gathered == 304200);
  // Each rank keeps half of each of the three (nf4_split into 2 equal flat chunks), and scaler_mean (one
  // bf16) and the nf4 table (16 bf16) of every weight whole: 152,100 + 7 x 34 = 152,338 B.
  constexpr Bytes nf4_shard = nf4_gathered / 2 + 7 * (2 + 16 * 2);
  static_assert(nf4_shard == 152338);
  // The layer's other parameters, bf16, also halved: two RMSNorm scales (2 x 256), the q_proj adapter
  // lora_A 8 x 256 and lora_B 256 x 8, the v_proj adapter lora_A 8 x 256 and lora_B 128 x 8:
  // (512 + 4,096 + 3,072) x 2 B = 15,360 B gathered.
  constexpr Bytes bf16_gathered = (2 * 256 + (8 * 256 + 256 * 8) + (8 * 256 + 128 * 8)) * 2;
  static_assert(bf16_gathered == 15360);
  CHECK(parameter_bytes(g, "model.layers.0.") == nf4_shard + bf16_gathered / 2);
  // q_proj's shard: quantized_data 65,536 / 2 / 2 = 16,384 B (the parameter's own storage), quantized_scalers
  // 65,536 / 64 / 2 = 512 B, quantization_factor 4 / 2 = 2 bf16 = 4 B.
  CHECK(sizes_named(g, "model.layers.0.self_attn.q_proj.weight").front() == 16384);
  CHECK(sizes_named(g, "model.layers.0.self_attn.q_proj.weight.quantized_scalers").front() == 512);
  CHECK(sizes_named(g, "model.layers.0.self_attn.q_proj.weight.quantization_factor").front() == 4);
  // The unit's all-gather output: every input of every parameter, times the 2 ranks' shards = the whole.
  const std::vector<Bytes> outputs = sizes_named(g, "layers.0.all_gather_output");
  REQUIRE(outputs.size() == 2);  // forward, and again in backward (resharded after forward)
  CHECK(outputs[0] == nf4_gathered + bf16_gathered);
  CHECK(outputs[1] == nf4_gathered + bf16_gathered);
  // The copy-out: one unsharded tensor per input (torch.empty(numel x world_size)), which
  // fsdp_post_all_gather wraps in the full NF4Tensor.
  const std::string q = "model.layers.0.self_attn.q_proj.weight.unsharded";
  CHECK(sizes_named(g, q + ".quantized_scalers").front() == 1024);
  CHECK(sizes_named(g, q + ".quantization_factor").front() == 8);
  CHECK(sizes_named(g, q + ".quantized_data").front() == 32768);
  CHECK(sizes_named(g, q).empty());  // not gathered as a 65,536-element tensor of its own
}

TEST_CASE("FSDP2 + torchao NF4: linear_nf4's dequantization is the one-GPU one, on the gathered weight",
          "[quick][graph][fsdp2][nf4]") {
  const OpGraph sharded = build_training_steps(tiny(), qlora(2));
  TrainingOptions one = qlora(1);
  one.data_parallel.scheme = "none";
  const OpGraph single = build_training_steps(tiny(), one);
  // get_original_weight of q_proj (n = 65,536) in forward: (data >> 4) uint8 n/2, .to(long) 4n; the same for
  // & 0b1111; two nf4[...] lookups bf16 n; scalers / factor and + mean bf16 n/32 each; per half the
  // flattened expand and the product (n each); then torch.stack's weight, 2n.
  constexpr Bytes n = 65536;
  const std::vector<Bytes> locals{n / 2, 4 * n, n / 2, 4 * n, n, n, n / 32, n / 32, n, n, n, n};
  CHECK(sizes_ending(sharded, "layers.0.", "q_proj.dequantize") == locals);
  CHECK(sizes_ending(single, "layers.0.", "q_proj.dequantize") == locals);
  CHECK(sizes_ending(sharded, "layers.0.", "q_proj.dequantized") == std::vector<Bytes>{2 * n});
  CHECK(sizes_ending(single, "layers.0.", "q_proj.dequantized") == std::vector<Bytes>{2 * n});
}

TEST_CASE("FSDP2 + torchao NF4: what torchtune, torchao and FSDP2 refuse", "[quick][graph][fsdp2][nf4]") {
  // 4 ranks: k_proj's quantization_factor has 32,768 / 16,384 = 2 elements, which nf4_split cannot cut into
  // 4 equal chunks, and FSDP2 cannot pad an NF4Tensor's inner tensors.
  CHECK_THROWS_WITH(build_training_steps(tiny(), qlora(4)),
                    Catch::Contains("k_proj.weight.quantization_factor") && Catch::Contains("4 ranks") &&
                        Catch::Contains("padded sharded size"));
  // torchtune's load_from_full_model_state_dict raises on a 2-D mesh
  TrainingOptions hybrid = qlora(2, "fsdp2-hybrid-shard");
  hybrid.data_parallel.gpus_per_node = 1;
  CHECK_THROWS_WITH(validate(hybrid), Catch::Contains("only support 1D FSDP"));
  // FSDP1 and ZeRO-3 with NF4Tensor: torchtune shards it with FSDP2 only
  CHECK_THROWS_WITH(validate(qlora(2, "fsdp-full-shard")), Catch::Contains("FSDP2 only"));
  CHECK_THROWS_WITH(validate(qlora(2, "zero3")), Catch::Contains("FSDP2 only"));
  CHECK_NOTHROW(validate(qlora(2)));
}
