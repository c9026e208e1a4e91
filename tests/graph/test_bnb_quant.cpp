// bitsandbytes quantized base weights (sim/finetune/bnb_quant.h): storage worked by hand from bitsandbytes'
// layout, the temporaries of Linear4bit / Linear8bitLt, and the QLoRA recording in traces/samples.
#include <catch2/catch.hpp>

#include <cmath>

#include "graph_test_util.h"
#include "recorded_peaks.h"
#include "sim/core/error.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "sim/torch/torch_ops.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

using test::persistent_bytes;
using test::sizes_from;

}  // namespace

TEST_CASE("bnb: a 4096 x 4096 weight in NF4, with and without double quantization, and in int8",
          "[quick][graph]") {
  // quantize_4bit (bitsandbytes/functional.py): out = zeros(((n + 1) // 2, 1), uint8); absmax = zeros(blocks,
  // float32) with blocks = ceil(n / 64); code = get_4bit_type(): 16 float32.
  // n = 16,777,216: packed 8,388,608 B, 262,144 blocks -> absmax 1,048,576 B, code 64 B.
  const Bnb4bitBytes plain = bnb_4bit_bytes(4096 * 4096, false);
  CHECK(plain.packed == 8388608);
  CHECK(plain.absmax == 1048576);
  CHECK(plain.code == 64);
  CHECK(plain.total() == 9437248);
  // compress_statistics: the absmax quantized by quantize_blockwise(absmax, blocksize=256): 262,144 uint8,
  // 1,024 float32 second-level absmax (4,096 B), the float32 offset (4 B).
  const Bnb4bitBytes nested = bnb_4bit_bytes(4096 * 4096, true);
  CHECK(nested.absmax == 262144);
  CHECK(nested.absmax2 == 4096);
  CHECK(nested.offset == 4);
  CHECK(nested.total() == 8388608 + 262144 + 4096 + 4 + 64);
  // QLoRA (Dettmers et al. 2023, section 3, "Double Quantization"): the constants cost 32/64 = 0.5 bits per
  // parameter, 8/64 + 32/(64 * 256) = 0.127 bits after double quantization.
  const double n = 4096.0 * 4096.0;
  CHECK(static_cast<double>(plain.absmax) * 8 / n == Approx(0.5));
  CHECK(static_cast<double>(nested.absmax + nested.absmax2) * 8 / n == Approx(0.127).epsilon(0.01));
  // Int8Params: CB int8 (n B) and SCB float32 per output row.
  const BnbInt8Bytes int8 = bnb_int8_bytes(4096, 4096);
  CHECK(int8.weight == 16777216);
  CHECK(int8.scb == 16384);
  // an odd element count rounds the packed bytes down ((n + 1) // 2 is n / 2 for even n, (n + 1) / 2 for odd)
  CHECK(bnb_4bit_bytes(63, false).packed == 32);
  CHECK(bnb_4bit_bytes(65, false).absmax == 8);  // two blocks
}

TEST_CASE("bnb: Linear4bit's dequantized weight in forward and again in backward", "[quick][graph]") {
  // x (T = 8 tokens, in = 128) fp32, a 64 x 128 weight loaded in fp16, compute dtype fp32 (transformers'
  // default): MatMul4Bit.forward = F.linear(A, dequantize_4bit(B).to(A.dtype).t()).
  constexpr std::int64_t T = 8, in = 128, out = 64;
  OpGraph g;
  EagerTape tape(g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  BnbOptions o;
  o.format = BnbFormat::kNf4;
  BnbWeights weights;
  const std::size_t load_first = g.tensors().size();
  const VarId w = load_bnb_weight(tape, "proj.weight", out, in, DType::kFloat16, o, weights);
  // at load: the fp16 weight, absmax, packed codes, code table; the fp16 copy is freed
  CHECK(sizes_from(g, load_first) == std::vector<Bytes>{out * in * 2, out * in / 64 * 4, out * in / 2, 64});
  const VarId x = tape.parameter("hidden", {T, in}, DType::kFloat32);  // a tensor that requires grad
  ops.set_bnb(&weights, &o);
  const std::size_t first = g.tensors().size();
  const VarId y = ops.linear("proj", x, w);
  // dequantized (fp16), .to(fp32), the output; nothing saved: the weight is a parameter
  CHECK(sizes_from(g, first) == std::vector<Bytes>{out * in * 2, out * in * 4, T * out * 4});
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    CHECK(g.tensors()[i].category != TensorCategory::kActivation);
  }
  const VarId loss = ops.mean_all("loss", y);
  tape.drop(y);
  const std::size_t backward_first = g.tensors().size();
  tape.backward(loss);
  // MatMul4Bit.backward: dequantize_4bit(B) (fp16) .to(grad_output.dtype) (fp32), then grad_A
  std::vector<Bytes> scratch;
  for (std::size_t i = backward_first; i < g.tensors().size(); ++i) {
    if (g.tensors()[i].name == "proj.backward.scratch") {
      scratch.push_back(g.tensors()[i].size_bytes);
    }
  }
  CHECK(scratch == std::vector<Bytes>{out * in * 2, out * in * 4});
  CHECK(tape.grad(w) == kNoTensor);

  // compute dtype bf16: x.to(bf16), the fp16 weight .to(bf16), a bf16 output, out.to(fp32)
  BnbOptions bf16 = o;
  bf16.compute_dtype = DType::kBFloat16;
  ops.set_bnb(&weights, &bf16);
  tape.begin_op("next", "next");
  const VarId x2 = tape.parameter("hidden2", {T, in}, DType::kFloat32);
  const std::size_t second = g.tensors().size();
  tape.drop(ops.linear("proj2", x2, w));
  CHECK(sizes_from(g, second) ==
        std::vector<Bytes>{T * in * 2, out * in * 2, out * in * 2, T * out * 2, T * out * 4});
}

TEST_CASE("bnb: Linear8bitLt's int8 copies of the input and what it saves", "[quick][graph]") {
  // bitsandbytes 0.43 MatMul8bitLt.forward, has_fp16_weights=False, threshold 6.0, no outlier columns.
  constexpr std::int64_t T = 8, in = 128, out = 64;
  OpGraph g;
  EagerTape tape(g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  BnbOptions o;
  o.format = BnbFormat::kInt8;
  BnbWeights weights;
  const std::size_t load_first = g.tensors().size();
  const VarId w = load_bnb_weight(tape, "proj.weight", out, in, DType::kFloat16, o, weights);
  // Int8Params.cuda: B = half().cuda(); double_quant(B): SCB (row stats), SCBt (column), CBt, CB
  CHECK(sizes_from(g, load_first) == std::vector<Bytes>{out * in * 2, out * 4, in * 4, out * in, out * in});
  const VarId x = tape.parameter("hidden", {T, in}, DType::kFloat32);
  ops.set_bnb(&weights, &o);
  const std::size_t first = g.tensors().size();
  const VarId y = ops.linear("proj", x, w);
  // A.to(fp16); double_quant: row stats (T fp32), column stats (in fp32), CAt and CA (int8), nnz_block_ptr
  // ((ceil(T / 16) * 16 * ceil(in / 256) + 1) int32 = 17 x 4); transform(CA, col32); igemmlt's int32 output;
  // mm_dequant's fp16 output and its two fp32 stat vectors; output.to(fp32); the clone that is returned.
  CHECK(sizes_from(g, first) == std::vector<Bytes>{T * in * 2, T * 4, in * 4, T * in, T * in, 68, T * in,
                                                   T * out * 4, T * out * 2, T * 4, out * 4, T * out * 4,
                                                   T * out * 4});
  // ctx.tensors = (CAt, subA, A), ctx.tensor_states = (SCAt, idx): the int8 transposed copy and its scales
  Bytes saved = 0;
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    if (g.tensors()[i].category == TensorCategory::kActivation) {
      saved += g.tensors()[i].size_bytes;
    }
  }
  CHECK(saved == T * in + in * 4);
  const VarId loss = ops.mean_all("loss", y);
  tape.drop(y);
  tape.backward(loss);
  CHECK(tape.grad(w) == kNoTensor);
  CHECK(tape.grad(x) != kNoTensor);
}

TEST_CASE("bnb: options are checked and need transformers' model code", "[quick][graph]") {
  CHECK(parse_base_weights("nf4") == BnbFormat::kNf4);
  CHECK(parse_base_weights("int8") == BnbFormat::kInt8);
  CHECK_THROWS_AS(parse_base_weights("int4"), InputError);
  CHECK_THROWS_AS(parse_bnb_compute_dtype("fp8"), InputError);
  CHECK(is_bnb_target(ParameterShape{"model.layers.0.mlp.down_proj.weight", {64, 172}, 0}));
  CHECK_FALSE(is_bnb_target(ParameterShape{"lm_head.weight", {32000, 64}, -1}));
  CHECK_FALSE(is_bnb_target(ParameterShape{"model.embed_tokens.weight", {32000, 64}, -1}));
  CHECK_FALSE(is_bnb_target(ParameterShape{"model.norm.weight", {64}, -1}));
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.bnb.format = BnbFormat::kNf4;
  // training a purely quantized model: transformers' Trainer refuses ("You cannot perform fine-tuning on
  // purely quantized models")
  CHECK_THROWS_AS(build_training_steps(m, o), InputError);
  o.lora.rank = 4;
  CHECK_NOTHROW(build_training_steps(m, o));
  ModelConfig cs336 = m;
  cs336.code = "cs336-basics";
  CHECK_THROWS_AS(build_training_steps(cs336, o), InputError);
}

TEST_CASE("bnb: QLoRA TinyLlama parameters match the cranberrii recording", "[quick][graph]") {
  // traces/samples/cranberrii_memory_snapshot.pickle (cranberrii/ftcourse @ 9f4902cf): TinyLlama-1.1B-Chat
  // with BitsAndBytesConfig 4-bit (the blocks say 4-bit, not the 8-bit of the INDEX note: each 5632 x 2048
  // MLP weight holds 5,767,168 B = n / 2), default fp4 and no double quantization, then
  // prepare_model_for_kbit_training and LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05) on PEFT's
  // default q_proj, v_proj. The blocks live before the trace starts, by requested size (read from the
  // pickle's segments minus what the trace allocates):
  //   5,767,168 x 66, 2,097,152 x 44, 262,144 x 88, 720,896 x 66, 32,768 x 44, 64 x 154   quantized weights
  //   262,144,000 x 2 (embed_tokens, lm_head in fp32), 8,192 x 45 (norms in fp32)
  //   131,072 x 66, 16,384 x 22                                                             LoRA adapters
  //   128 x 22 (rotary inv_freq), 8,000 (input_ids), 8,519,680 x 2 (cuBLAS workspaces)     not parameters
  // total 1,095,725,248 B. By hand, per layer q, o 2048 x 2048, k, v 256 x 2048, gate, up, down 5632 x 2048:
  // 22 x 44,040,192 = 968,884,224 elements -> 484,442,112 B packed + 60,555,264 B absmax + 154 x 64 B code;
  // embeddings and head 524,288,000 B; norms 368,640 B; adapters 22 x 409,600 = 9,011,200 B.
  constexpr Bytes kRecordedParameters = 1095725248 - 22 * 128 - 8000 - 2 * 8519680;
  static_assert(kRecordedParameters == 484442112 + 60555264 + 154 * 64 + 524288000 + 368640 + 9011200);
  TrainingOptions o = test::small_options();
  o.batch = 1;
  o.seq = 1000;
  o.bnb.format = BnbFormat::kFp4;
  o.lora.rank = 16;
  o.lora.alpha = 32;
  o.lora.dropout = 0.05;
  const OpGraph g = build_training_steps(model_preset("tinyllama-1.1b"), o);
  CHECK(persistent_bytes(g, TensorCategory::kParameter) == kRecordedParameters);
}

TEST_CASE("bnb: QLoRA TinyLlama step peaks against the cranberrii recording", "[quick][graph]") {
  // The recording's step (see the previous test for its configuration): forward and backward of one
  // sequence of 1,000 tokens, in a process that had run steps before (both cuBLAS workspaces exist: 2 x
  // 8,519,680 B, the Ampere size). prepare_model_for_kbit_training turned gradient checkpointing on, but
  // from_pretrained leaves the model in eval mode and transformers only checkpoints in training mode, so no
  // layer is recomputed (the trace dequantizes each MLP weight twice: 132 x 23,068,672 B, not three times);
  // PEFT's dropout modules are new, hence in training mode (44 x 2,048,000 B masks). Its bitsandbytes keeps
  // MatMul4Bit's input A for backward (the down_proj inputs, 88 x 22,528,000 B at the peak).
  // Default flags (current bitsandbytes, which does not keep A) are further off; that figure is reported
  // in docs/known-misses.md, not asserted.
  // Recorded: read off the file (tests/recorded_peaks.h, segment and block sizes, not the allocator model):
  // peak reserved 6,471,811,072 B (also INDEX.json's peak_reserved_during_trace_bytes), peak allocated
  // 5,888,012,288 B (a lower bound: `vramsim replay` places blocks and finds 5,914,094,592 B).
  const Snapshot rec =
      load_snapshot((test::source_dir() / "traces/samples/cranberrii_memory_snapshot.pickle").string());
  const test::RecordedPeaks recorded = test::recorded_peaks(rec);
  REQUIRE(recorded.peak_reserved == 6471811072);
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.batch = 1;
  a.seq = 1000;
  a.steps = 1;
  a.gpu = "a100";
  a.warm = "step";
  a.lora_rank = 16;
  a.lora_alpha = 32;
  a.lora_dropout = 0.05;
  a.base_weights = "fp4";
  a.bnb_saves_input = true;  // what the recording's bitsandbytes did (its trace keeps A)
  const Prediction p = predict(make_request(a));
  // The recording ran older PyTorch and transformers releases than the model follows, and what they did
  // differently is not a flag (docs/known-misses.md: the figures and the tensors that explain them, e.g.
  // 45 x 8,192,000 B that MeanBackward1 kept alive then). The check is the accuracy a fit verdict needs
  // across those releases, 10 % on both peaks, on the raw prediction; the measured error is reported, not
  // asserted.
  const auto error = [](std::int64_t predicted, std::int64_t rec_bytes) {
    return static_cast<double>(predicted - rec_bytes) / static_cast<double>(rec_bytes);
  };
  const double allocated_error = error(p.peak_allocated_bytes, recorded.peak_allocated);
  const double reserved_error = error(p.peak_reserved_bytes, recorded.peak_reserved);
  INFO("peak allocated " << p.peak_allocated_bytes << " recorded " << recorded.peak_allocated << " ("
                         << allocated_error << "); peak reserved " << p.peak_reserved_bytes << " recorded "
                         << recorded.peak_reserved << " (" << reserved_error << ")");
  CHECK(std::abs(allocated_error) < 0.10);
  CHECK(std::abs(reserved_error) < 0.10);
}
