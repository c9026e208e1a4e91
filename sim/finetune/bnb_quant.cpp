// bitsandbytes' quantized linear layers: storage at load, Linear4bit / Linear8bitLt forward and the
// autograd Functions MatMul4Bit / MatMul8bitLt (bitsandbytes 0.42-0.43 sources).
#include "sim/finetune/bnb_quant.h"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/torchao_nf4.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using torch_ops_detail::with_last;

constexpr std::array<std::pair<std::string_view, BnbFormat>, 4> kFormats{{
    {"nf4", BnbFormat::kNf4},
    {"fp4", BnbFormat::kFp4},
    {"int8", BnbFormat::kInt8},
    {"torchao-nf4", BnbFormat::kTorchaoNf4},
}};

constexpr std::array<std::pair<std::string_view, DType>, 3> kComputeDtypes{{
    {"fp32", DType::kFloat32},
    {"fp16", DType::kFloat16},
    {"bf16", DType::kBFloat16},
}};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The float32 absmax of n elements quantized in blocks of 64.
Bytes absmax_fp32_bytes(std::int64_t n) {
  return tensor_bytes({ceil_div(n, kBnb4bitBlock)}, DType::kFloat32);
}

// A raw tensor of `bytes` in the current op (the quantization state's pieces, kernel scratch).
TensorId raw(EagerTape& t, const std::string& name, Bytes bytes, TensorCategory c) {
  return t.allocate(name, bytes, DType::kUInt8, c);
}

// Note [LLM.int8 outliers]
// With llm_int8_threshold = 6.0 (BitsAndBytesConfig's default) double_quant also collects the input values
// above 6 in magnitude into a COO tensor, and MatMul8bitLt multiplies their columns in fp16 (subA, subB).
// How many there are depends on the data, which a prediction does not have; the tensors are
// nnz-sized (three vectors) and tokens x outlier-columns, small next to the int8 copies. vramsim assumes
// none: it models the threshold > 0 path's nnz_block_ptr but no COO tensor, subA or subB.

// dequantize_4bit(B, quant_state) with grad off: the nested absmax in fp32 while it runs, then the weight.
VarId dequantize_4bit(EagerTape& t, const std::string& name, VarId weight, const BnbWeight& w,
                      bool double_quant) {
  TensorId absmax = kNoTensor;
  if (double_quant) {
    t.begin_op(name + ".dequantize_blockwise", "dequantize_blockwise");
    absmax = raw(t, name + ".absmax_fp32", absmax_fp32_bytes(w.out_features * w.in_features),
                 TensorCategory::kTemporary);
  }
  OpCall c;
  c.name = name + ".dequantize_4bit";
  c.kind = "dequantize_4bit";
  c.inputs = {weight};
  c.outputs = {OutputSpec{"", {w.out_features, w.in_features}, w.quant_dtype, false}};
  const VarId deq = t.op1(c);
  if (absmax != kNoTensor) {
    t.release(absmax);
  }
  return deq;
}

// MatMul4Bit.backward: grad_A = grad_output @ dequantize_4bit(B).to(grad_output.dtype).t()
std::vector<ScratchStep> matmul4bit_backward_scratch(const BnbWeight& w, DType grad_dtype,
                                                     bool double_quant) {
  const std::int64_t n = w.out_features * w.in_features;
  ScratchScript s;
  const int absmax = double_quant ? s.alloc(absmax_fp32_bytes(n)) : -1;
  const int deq = s.alloc(tensor_bytes({w.out_features, w.in_features}, w.quant_dtype));
  if (absmax >= 0) {
    s.free(absmax);
  }
  if (grad_dtype != w.quant_dtype) {
    s.alloc(tensor_bytes({w.out_features, w.in_features}, grad_dtype));
    s.free(deq);
  }
  return s.steps();
}

VarId linear4bit_forward(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w, const BnbOptions& o) {
  EagerTape& t = ops.tape();
  const DType inp_dtype = t.dtype(x);
  const VarId xc = ops.to(name + ".to_compute_dtype", x, o.compute_dtype);  // x = x.to(self.compute_dtype)
  const Shape out_shape = with_last(t.shape(xc), w.out_features);
  OpCall c;
  c.name = name;
  c.inputs = {xc, weight};
  c.outputs = {OutputSpec{"", out_shape, o.compute_dtype}};
  c.flops = 2.0 * static_cast<double>(numel(t.shape(xc))) * static_cast<double>(w.out_features);
  VarId wc = kNoVar;
  if (numel(t.shape(xc)) == w.in_features && !t.requires_grad(xc)) {
    c.kind = "gemv_4bit";  // matmul_4bit's inference path for one token: no dequantized weight
  } else {
    const bool grad = t.grad_enabled();
    t.set_grad_enabled(false);  // inside autograd.Function.forward
    const VarId deq = dequantize_4bit(t, name, weight, w, o.double_quant);
    wc = ops.to(name + ".dequantized_to_input_dtype", deq, o.compute_dtype);  // .to(A.dtype)
    t.drop(deq);
    t.set_grad_enabled(grad);
    c.kind = "MatMul4Bit";
    c.inputs.push_back(wc);
    if (o.matmul4bit_saves_input) {
      c.saved.inputs = {0};
    }
    c.backward.scratch_before_grads = matmul4bit_backward_scratch(w, o.compute_dtype, o.double_quant);
  }
  if (bias != kNoVar) {
    c.inputs.push_back(bias);  // bias.to(compute_dtype): frozen, a copy only when the dtypes differ
  }
  c.backward.grads.assign(c.inputs.size(), GradRule{Kind::kNone});
  c.backward.grads[0] = GradRule{Kind::kAlloc};
  const VarId out = t.op1(c);
  if (wc != kNoVar) {
    t.drop(wc);
  }
  t.drop(xc);
  const VarId y = ops.to(name + ".to_input_dtype", out, inp_dtype);  // out.to(inp_dtype)
  t.drop(out);
  return y;
}

// MatMul8bitLt.backward for A's gradient (CxB path: the row-major weight was swapped for the tiled one):
// double_quant(grad_output.to(fp16)), then undo_layout(CxB).to(A.dtype).mul_(SCB / 127).
std::vector<ScratchStep> matmul8bit_backward_scratch(const BnbWeight& w, std::int64_t rows, DType a_dtype) {
  ScratchScript s;
  const int grad16 =
      a_dtype != DType::kFloat16 ? s.alloc(tensor_bytes({rows, w.out_features}, DType::kFloat16)) : -1;
  s.alloc(tensor_bytes({rows}, DType::kFloat32));                // row_stats
  s.alloc(tensor_bytes({w.out_features}, DType::kFloat32));      // col_stats
  s.alloc(tensor_bytes({rows, w.out_features}, DType::kUInt8));  // out_col (Cgradt)
  s.alloc(tensor_bytes({rows, w.out_features}, DType::kUInt8));  // out_row (Cgrad)
  if (grad16 >= 0) {
    s.free(grad16);
  }
  const Shape weight{w.out_features, w.in_features};
  const int empty = s.alloc(tensor_bytes(weight, DType::kUInt8));     // undo_layout: empty_like
  const int rowmajor = s.alloc(tensor_bytes(weight, DType::kUInt8));  // permute + reshape: a copy
  s.free(empty);
  s.alloc(tensor_bytes(weight, a_dtype));  // .to(ctx.dtype_A)
  s.free(rowmajor);
  const int scale = s.alloc(tensor_bytes({w.out_features}, DType::kFloat32));  // SCB.unsqueeze(1).mul(1/127)
  s.free(scale);
  return s.steps();
}

VarId linear8bit_forward(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w) {
  EagerTape& t = ops.tape();
  const DType a_dtype = t.dtype(x);
  const std::int64_t cols = w.in_features;
  const std::int64_t rows = numel(t.shape(x)) / cols;
  const bool grad = t.grad_enabled();
  t.set_grad_enabled(false);  // inside autograd.Function.forward
  const VarId a16 = ops.to(name + ".A_fp16", x, DType::kFloat16);
  OpCall q;  // F.double_quant(A16, threshold): row/col absmax, nnz_block_ptr, out_col, out_row
  q.name = name + ".double_quant";
  q.kind = "double_quant";
  q.inputs = {a16};
  q.outputs = {OutputSpec{"SCA", {rows}, DType::kFloat32, false},
               OutputSpec{"SCAt", {cols}, DType::kFloat32, false},
               OutputSpec{"CAt", {rows, cols}, DType::kUInt8, false},
               OutputSpec{"CA", {rows, cols}, DType::kUInt8, false}};
  // nnz_block_ptr: int32, (tiled rows x column tiles + 1)
  q.scratch_bytes = {
      tensor_bytes({numel({ceil_div(rows, 16) * 16, ceil_div(cols, 256)}) + 1}, DType::kFloat32)};
  const std::vector<VarId> qa = t.op(q);
  t.drop(a16);
  OpCall tr;  // F.transform(CA, "col32"): int8, columns padded to 32
  tr.name = name + ".transform_col32";
  tr.kind = "transform";
  tr.inputs = {qa[3]};
  tr.outputs = {OutputSpec{"", {rows, ceil_div(cols, 32) * 32}, DType::kUInt8, false}};
  const VarId c32a = t.op1(tr);
  OpCall mm;  // F.igemmlt: int32 (rows x out, col32), held as bytes
  mm.name = name + ".igemmlt";
  mm.kind = "igemmlt";
  mm.inputs = {c32a, weight};
  mm.outputs = {OutputSpec{"", {rows, ceil_div(w.out_features, 32) * 32 * 4}, DType::kUInt8, false}};
  mm.flops =
      2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(w.out_features);
  const VarId out32 = t.op1(mm);
  OpCall dq;  // F.mm_dequant: fp16 output; new_row_stats and new_col_stats while it runs
  dq.name = name + ".mm_dequant";
  dq.kind = "mm_dequant";
  dq.inputs = {out32, qa[0]};
  dq.outputs = {OutputSpec{"", with_last(t.shape(x), w.out_features), DType::kFloat16, false}};
  dq.scratch_bytes = {tensor_bytes({rows}, DType::kFloat32), tensor_bytes({w.out_features}, DType::kFloat32)};
  const VarId out16 = t.op1(dq);
  const VarId out = ops.to(name + ".output_to_A_dtype", out16, a_dtype);  // output.to(A.dtype)
  t.drop(out16);
  t.set_grad_enabled(grad);
  OpCall c;  // clone_func(output.view(output_shape)); ctx.tensors = (CAt, subA, A), tensor_states (SCAt, idx)
  c.name = name;
  c.kind = "MatMul8bitLt";
  c.inputs = {x, weight, qa[2], qa[1], out};
  if (bias != kNoVar) {
    c.inputs.push_back(bias);
  }
  c.outputs = {OutputSpec{"", t.shape(out), a_dtype}};
  c.saved.inputs = {0, 2, 3};
  c.backward.grads.assign(c.inputs.size(), GradRule{Kind::kNone});
  c.backward.grads[0] = GradRule{Kind::kAlloc, false, t.shape(x).size() > 2};
  c.backward.scratch_before_grads = matmul8bit_backward_scratch(w, rows, a_dtype);
  const VarId y = t.op1(c);
  for (VarId v : qa) {
    t.drop(v);
  }
  t.drop({c32a, out32, out});
  return y;
}

}  // namespace

BnbFormat parse_base_weights(std::string_view text, std::string_view option) {
  for (const auto& [name, value] : kFormats) {
    if (name == text) {
      return value;
    }
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: nf4, fp4, int8, torchao-nf4)", option, text));
}

DType parse_bnb_compute_dtype(std::string_view text, std::string_view option) {
  for (const auto& [name, value] : kComputeDtypes) {
    if (name == text) {
      return value;
    }
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: fp32, fp16, bf16)", option, text));
}

DType parse_bnb_quant_storage(std::string_view text, std::string_view option) {
  if (text == "uint8") {
    return DType::kUInt8;
  }
  for (const auto& [name, value] :
       kComputeDtypes) {  // the floating dtypes bitsandbytes accepts as storage too
    if (name == text) {
      return value;
    }
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: uint8, fp32, fp16, bf16)", option, text));
}

std::string_view base_weights_name(BnbFormat f) {
  for (const auto& [name, value] : kFormats) {
    if (value == f) {
      return name;
    }
  }
  return "";
}

Bnb4bitBytes bnb_4bit_bytes(std::int64_t numel, bool double_quant) {
  const std::int64_t blocks = ceil_div(numel, kBnb4bitBlock);
  Bnb4bitBytes b;
  b.packed = static_cast<Bytes>((numel + 1) / 2);
  b.code = 16 * 4;
  if (double_quant) {
    b.absmax = static_cast<Bytes>(blocks);
    b.absmax2 = tensor_bytes({ceil_div(blocks, kBnbNestedBlock)}, DType::kFloat32);
    b.offset = 4;
  } else {
    b.absmax = tensor_bytes({blocks}, DType::kFloat32);
  }
  return b;
}

BnbInt8Bytes bnb_int8_bytes(std::int64_t out_features, std::int64_t in_features) {
  BnbInt8Bytes b;
  b.weight = tensor_bytes({out_features, in_features}, DType::kUInt8);
  b.scb = tensor_bytes({out_features}, DType::kFloat32);
  return b;
}

bool is_bnb_target(const ParameterShape& parameter) {
  const std::string_view name = parameter.name;
  if (parameter.shape.size() != 2 || !name.ends_with(".weight")) {
    return false;
  }
  const std::string_view module = name.substr(0, name.size() - 7);
  const bool embedding = module.ends_with("embed_tokens") || module.ends_with("wte") ||
                         module.ends_with("wpe") || module == "token_embeddings";
  return !embedding && module != "lm_head";
}

VarId load_bnb_weight(EagerTape& t, const std::string& name, std::int64_t out_features,
                      std::int64_t in_features, DType load_dtype, const BnbOptions& o, BnbWeights& weights,
                      const std::function<std::int64_t(std::int64_t)>& resident_numel) {
  if (o.format == BnbFormat::kTorchaoNf4) {
    return load_torchao_nf4_weight(t, name, out_features, in_features, load_dtype, weights, resident_numel);
  }
  const Shape shape{out_features, in_features};
  const std::int64_t n = numel(shape);
  t.begin_op(name + ".quantize", o.format == BnbFormat::kInt8 ? "double_quant" : "quantize_4bit");
  // w = self.data.contiguous().cuda(device) (Int8Params: .half().cuda())
  const DType arrives = o.format == BnbFormat::kInt8 ? DType::kFloat16 : load_dtype;
  const TensorId full =
      raw(t, name + ".unquantized", tensor_bytes(shape, arrives), TensorCategory::kTemporary);
  VarId v = kNoVar;
  if (o.format == BnbFormat::kInt8) {  // double_quant(B): row/col stats, out_col (CBt, deleted), out_row (CB)
    const BnbInt8Bytes b = bnb_int8_bytes(out_features, in_features);
    raw(t, name + ".SCB", b.scb, TensorCategory::kParameter);  // weight.SCB, then state.SCB: kept for the run
    const TensorId scbt =
        raw(t, name + ".SCBt", tensor_bytes({in_features}, DType::kFloat32), TensorCategory::kTemporary);
    const TensorId cbt = raw(t, name + ".CBt", b.weight, TensorCategory::kTemporary);
    v = t.parameter(name, shape, DType::kUInt8);
    t.release(cbt);
    t.release(scbt);
  } else {  // quantize_4bit: absmax, out, code; double quantization: offset, quantize_blockwise(absmax, 256)
    const Bnb4bitBytes b = bnb_4bit_bytes(n, o.double_quant);
    const Bytes absmax_fp32 = absmax_fp32_bytes(n);
    const TensorId absmax = raw(t, name + ".absmax", absmax_fp32,
                                o.double_quant ? TensorCategory::kTemporary : TensorCategory::kParameter);
    // out = torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1), dtype=quant_storage)
    const std::int64_t itemsize = static_cast<std::int64_t>(dtype_size_bytes(o.quant_storage));
    const std::int64_t packed = (n + 1) / (itemsize * 2);
    v = t.parameter(name, Shape{packed, 1}, o.quant_storage, resident_numel ? resident_numel(packed) : -1);
    raw(t, name + ".quant_state.code", b.code, TensorCategory::kParameter);
    if (o.double_quant) {
      raw(t, name + ".quant_state.offset", b.offset, TensorCategory::kParameter);
      if (weights.empty()) {  // name2qmap["dynamic"]: made by the first quantize_blockwise, shared
        raw(t, "bitsandbytes.dynamic_map", 256 * 4, TensorCategory::kParameter);
      }
      raw(t, name + ".quant_state.state2.absmax", b.absmax2, TensorCategory::kParameter);
      raw(t, name + ".quant_state.absmax", b.absmax, TensorCategory::kParameter);
      t.release(absmax);  // del absmax
    }
  }
  t.release(full);
  t.freeze(v);
  weights.emplace(v, BnbWeight{o.format, out_features, in_features, load_dtype});
  return v;
}

VarId bnb_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w, const BnbOptions& options) {
  if (w.format == BnbFormat::kInt8) {
    return linear8bit_forward(ops, name, x, weight, bias, w);
  }
  if (w.format == BnbFormat::kTorchaoNf4) {
    return torchao_linear_nf4(ops, name, x, weight, bias, w);
  }
  return linear4bit_forward(ops, name, x, weight, bias, w, options);
}

}  // namespace vramsim
