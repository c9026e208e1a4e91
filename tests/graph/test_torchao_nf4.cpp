// torchao NF4 base weights (sim/finetune/torchao_nf4.h), as torchtune's QLoRA runs them: storage and the
// dequantization of get_original_weight, worked by hand from torchao/dtypes/nf4tensor.py.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/torch/torch_ops.h"
#include "sim/finetune/torchao_nf4.h"

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
