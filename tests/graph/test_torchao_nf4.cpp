// torchao NF4 base weights (sim/finetune/torchao_nf4.h), as torchtune's QLoRA runs them: storage and the
// dequantization of get_original_weight, worked by hand from torchao/dtypes/nf4tensor.py.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/torchao_nf4.h"
#include "sim/models/transformer_builder.h"
#include "sim/torch/torch_ops.h"

using namespace vramsim;

using test::sizes_from;

TEST_CASE("torchao NF4: a 4096 x 4096 bf16 weight's NF4Tensor", "[quick][graph]") {
  // to_nf4 / NF4Tensor.from_tensor, n = 16,777,216: quantized_data uint8 n / 2 = 8,388,608 B;
  // quantized_scalers int8 n / 64 = 262,144 B; quantization_factor bf16 n / (64 x 256) = 1,024 values =
  // 2,048 B; scaler_mean one bf16 (2 B); the nf4 table 16 bf16 (32 B).
  const TorchaoNf4Bytes b = torchao_nf4_bytes(4096 * 4096, DType::kBFloat16, "w");
  CHECK(b.quantized_data == 8388608);
  CHECK(b.quantized_scalers == 262144);
  CHECK(b.quantization_factor == 2048);
  CHECK(b.scaler_mean == 2);
  CHECK(b.nf4 == 32);
  CHECK(b.total() == 8652834);
  // 4.127 bits per weight: 0.127 bits of constants as bitsandbytes' double quantization (QLoRA, section 3)
  CHECK(static_cast<double>(b.total()) * 8 / (4096.0 * 4096.0) == Approx(4.126).epsilon(0.001));
  // torchao asserts numel % block_size == 0 and n_scaler_blocks % scaler_block_size == 0: 64 x 256
  CHECK_THROWS_AS(torchao_nf4_bytes(4096, DType::kBFloat16, "w"), InputError);  // 64 blocks of 64
  CHECK(torchao_nf4_bytes(16384, DType::kBFloat16, "w").total() == 8192 + 256 + 2 + 2 + 32);
  CHECK_THROWS_WITH(torchao_nf4_bytes(64 * 100, DType::kBFloat16, "layers.0.w"),
                    Catch::Contains("layers.0.w") && Catch::Contains("16384"));
}

TEST_CASE("torchao NF4: linear_nf4 dequantizes in forward and again in backward, saving only the weight",
          "[quick][graph]") {
  // x (T = 8 tokens, in = 128) bf16, a 128 x 128 bf16 weight (n = 16,384: one scaler block).
  constexpr std::int64_t T = 8, in = 128, out = 128, n = out * in;
  OpGraph g;
  EagerTape tape(g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  BnbOptions o;
  o.format = BnbFormat::kTorchaoNf4;
  BnbWeights weights;
  const std::size_t load_first = g.tensors().size();
  const VarId w = load_bnb_weight(tape, "proj.weight", out, in, DType::kBFloat16, o, weights);
  // the bf16 weight, then quantized_data, quantized_scalers, quantization_factor, scaler_mean, nf4
  CHECK(sizes_from(g, load_first) == std::vector<Bytes>{n * 2, n / 2, n / 64, 2, 2, 32});
  const VarId x = tape.parameter("hidden", {T, in}, DType::kBFloat16);  // requires grad
  ops.set_bnb(&weights, &o);
  const std::size_t first = g.tensors().size();
  const VarId y = ops.linear("proj", x, w);
  // get_original_weight: (data >> 4) uint8 n/2, .to(long) int64 n/2 (4n B); the same for & 0b1111; the two
  // lookups nf4[...] bf16 n/2 each (n B); scalers / factor and + mean, bf16 n/64 each (n/32 B); per half
  // the flattened expand (a copy, n B) and the product (n B); torch.stack's weight, bf16 n (2n B); then
  // F.linear's output (T x out bf16). .to(bf16) of a bf16 weight is the weight itself.
  const std::vector<Bytes> dequantize{n / 2, 4 * n, n / 2, 4 * n, n, n, n / 32, n / 32, n, n, n, n, 2 * n};
  std::vector<Bytes> forward = dequantize;
  forward.push_back(T * out * 2);
  CHECK(sizes_from(g, first) == forward);
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    CHECK(g.tensors()[i].category != TensorCategory::kActivation);  // LinearNF4 saves only the weight
  }
  const VarId loss = ops.mean_all("loss", y);
  tape.drop(y);
  const std::size_t backward_first = g.tensors().size();
  tape.backward(loss);
  // LinearNF4.backward: grad_output @ weight.to(grad_output.dtype): the same dequantization
  CHECK(sizes_from(g, backward_first, "proj.backward.scratch") == dequantize);
  CHECK(tape.grad(w) == kNoTensor);
}

// torchtune's QLoRA builds the model under its training dtype (recipes/lora_finetune_single_device.py:
// `with training.set_default_dtype(self._dtype), self._device: model = config.instantiate(cfg_model)`), so
// LoRALinear's lora_a / lora_b nn.Linear are bf16 next to the NF4 base weight: 2 B per adapter element, where
// PEFT over bitsandbytes' 4-bit weights keeps fp32 adapters.
TEST_CASE("torchao NF4: torchtune's adapters have the recipe's dtype, not fp32", "[quick][graph]") {
  ModelConfig m = test::tiny_model("tinyllama-1.1b");  // hidden 64, q_proj 64 x 64
  m.d_model = 128;
  m.head_dim = 32;
  m.d_ff = 128;
  TrainingOptions o;
  o.batch = 1;
  o.seq = 16;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  o.lora.rank = 8;
  o.lora.targets = {"q_proj"};
  o.bnb.format = BnbFormat::kTorchaoNf4;
  o.bnb.prepare_kbit_training = false;
  const OpGraph g = build_training_steps(m, o);
  int adapters = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.ends_with(".lora_A.default.weight")) {
      ++adapters;
      CHECK(t.dtype == DType::kBFloat16);
      CHECK(t.size_bytes == static_cast<Bytes>(8 * 128 * 2));  // (r, in) in bf16
    }
  }
  CHECK(adapters == m.n_layers);
}
