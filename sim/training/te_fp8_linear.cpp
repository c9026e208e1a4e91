// Transformer Engine's te.Linear under fp8_autocast with DelayedScaling (te_fp8_linear.h).
#include "sim/training/te_fp8_linear.h"

#include <string_view>

#include "sim/models/model_config.h"
#include "sim/torch/cuda_sort.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// FP8 data as the simulator stores it: one byte per element, like torch.uint8 (TE keeps Float8Tensor's
// _data and _transpose as uint8 tensors).
constexpr DType kFp8Storage = DType::kUInt8;

// A Float8Tensor made by a Float8Quantizer (tensor/float8_tensor.py): row-wise data, the column-wise
// transpose, and the fp32 scale_inv of one element.
struct Fp8Tensor {
  VarId data = kNoVar;
  VarId transpose = kNoVar;
  VarId scale_inv = kNoVar;
};

// quantizer(t) with the given usages: tex.quantize (a fused cast, or cast-transpose for both usages).
Fp8Tensor quantize(EagerTape& t, const std::string& name, VarId hp, bool rowwise, bool columnwise) {
  const Shape shape = t.shape(hp);
  const std::int64_t cols = shape.back();
  const std::int64_t rows = numel(shape) / cols;
  Fp8Tensor out;
  const auto make = [&](const std::string& suffix, const Shape& s, DType d) {
    OpCall c;
    c.name = name + suffix;
    c.kind = "tex.quantize";
    c.inputs = {hp};
    c.outputs = {OutputSpec{"", s, d}};
    return t.op1(c);
  };
  if (rowwise) {
    out.data = make(".fp8", shape, kFp8Storage);
  }
  if (columnwise) {
    out.transpose = make(".fp8_transpose", {cols, rows}, kFp8Storage);
  }
  out.scale_inv = make(".scale_inv", {1}, DType::kFloat32);
  return out;
}

// Linear.forward: cache_name = None if (is_first_microbatch is None or self.is_fsdp2) else "weight"
bool weight_cached(const Float8Options& o) { return o.te_weight_cache && !o.te_fsdp2; }

void drop(EagerTape& t, const Fp8Tensor& f) {
  for (const VarId v : {f.data, f.transpose, f.scale_inv}) {
    if (v != kNoVar) {
      t.drop(v);
    }
  }
}

}  // namespace

bool is_te_linear_target(const ParameterShape& parameter) {
  const std::string_view name = parameter.name;
  if (parameter.shape.size() != 2 || !name.ends_with(".weight")) {
    return false;
  }
  const std::string_view module = name.substr(0, name.size() - 7);
  const bool embedding = module.ends_with("embed_tokens") || module.ends_with("wte") ||
                         module.ends_with("wpe") || module == "token_embeddings" ||
                         module.ends_with("tok_embeddings");
  // convert_model: `if any(p % 16 != 0 for p in module.weight.shape): return`
  return !embedding && parameter.shape[0] % 16 == 0 && parameter.shape[1] % 16 == 0;
}

TeLinearBytes te_linear_bytes(std::int64_t rows, std::int64_t in, std::int64_t out, const Float8Options& o) {
  TeLinearBytes b;
  const Bytes history = static_cast<Bytes>(o.amax_history_len);
  // sizes within the request's validated bounds (rows, features and amax_history_len are capped)
  b.fp8_meta = 5 * 4 * (history + 1);
  const Bytes weight = static_cast<Bytes>(in) * static_cast<Bytes>(out);
  b.weight_fp8 = o.te_fsdp2 ? weight : 2 * weight;
  b.saved_input = static_cast<Bytes>(rows) * static_cast<Bytes>(in);
  b.grad_output_fp8 = 2 * static_cast<Bytes>(rows) * static_cast<Bytes>(out);
  return b;
}

std::vector<VarId> create_te_module_state(EagerTape& tape, const std::string& module, VarId weight,
                                          const Float8Options& o) {
  const std::int64_t history = o.amax_history_len;
  std::vector<VarId> out{
      tape.input(module + ".fp8_meta.scaling_fwd.scale", {3}, DType::kFloat32),
      tape.input(module + ".fp8_meta.scaling_fwd.amax_history", {history, 3}, DType::kFloat32),
      tape.input(module + ".fp8_meta.scaling_bwd.scale", {2}, DType::kFloat32),
      tape.input(module + ".fp8_meta.scaling_bwd.amax_history", {history, 2}, DType::kFloat32),
  };
  if (weight_cached(o)) {  // _fp8_workspaces["weight"]: row-wise data, its transpose, scale_inv
    const Shape ws = tape.shape(weight);
    out.push_back(tape.input(module + "._fp8_workspaces.weight._data", ws, kFp8Storage));
    out.push_back(
        tape.input(module + "._fp8_workspaces.weight._transpose", {ws.at(1), ws.at(0)}, kFp8Storage));
    out.push_back(tape.input(module + "._fp8_workspaces.weight._scale_inv", {1}, DType::kFloat32));
  }
  return out;
}

VarId te_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId w, VarId bias,
                        const Float8Options& o) {
  EagerTape& t = ops.tape();
  const Shape xs = t.shape(x);
  const Shape ws = t.shape(w);  // (out, in); copies: the tape's variables move as it grows
  const std::int64_t in = xs.back();
  const std::int64_t out = ws.at(0);
  const std::int64_t rows = numel(xs) / in;
  const DType hp = t.dtype(x);
  const bool training = t.grad_enabled();  // the backward needs the column-wise copies
  t.set_grad_enabled(false);
  // the input first (input_quantizer), then the weight (quantize_weight); column-wise only when the
  // backward needs them
  Fp8Tensor x8 = quantize(t, name + ".input", x, true, training);
  Fp8Tensor w8;
  const bool fresh_weight = !weight_cached(o);
  if (fresh_weight) {
    w8 = quantize(t, name + ".weight", w, true, training && !o.te_fsdp2);
  }
  t.set_grad_enabled(training);
  OpCall c;
  c.name = name;
  c.kind = "te._Linear";
  c.inputs = {x, w};
  if (bias != kNoVar) {
    c.inputs.push_back(bias);
  }
  c.inputs.push_back(x8.data);
  const int x8_index = static_cast<int>(c.inputs.size());
  if (x8.transpose != kNoVar) {
    c.inputs.push_back(x8.transpose);
  }
  c.inputs.push_back(x8.scale_inv);
  int w8_index = -1;
  if (fresh_weight) {
    w8_index = static_cast<int>(c.inputs.size());
    c.inputs.push_back(w8.data);
    if (w8.transpose != kNoVar) {
      c.inputs.push_back(w8.transpose);
    }
    c.inputs.push_back(w8.scale_inv);
  }
  Shape ys = xs;
  ys.back() = out;
  c.outputs = {OutputSpec{"", ys, hp}};
  // ctx.save_for_backward: the column-wise input (and its scale_inv), and wt_save = weightmat (not under
  // FSDP2; with the cache the workspace, alive anyway)
  c.saved.inputs = {x8_index};
  if (x8.transpose != kNoVar) {
    c.saved.inputs.push_back(x8_index + 1);
  }
  if (fresh_weight && !o.te_fsdp2) {
    for (int i = w8_index; i < static_cast<int>(c.inputs.size()); ++i) {
      c.saved.inputs.push_back(i);
    }
  }
  c.backward.grads.assign(c.inputs.size(), GradRule{Kind::kNone});
  c.backward.grads[0] = GradRule{Kind::kAlloc, false, xs.size() > 2};
  c.backward.grads[1] = GradRule{Kind::kAlloc};
  if (bias != kNoVar) {
    c.backward.grads[2] = GradRule{Kind::kAlloc};
  }
  // grad_output_quantizer (row-wise and column-wise) and, under FSDP2, the weight's column-wise cast again
  ScratchScript s;
  s.alloc(2 * static_cast<Bytes>(rows) * static_cast<Bytes>(out));
  s.alloc(4);
  if (o.te_fsdp2) {
    s.alloc(static_cast<Bytes>(in) * static_cast<Bytes>(out));
    s.alloc(4);
  }
  c.backward.scratch_before_grads = s.steps();
  c.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  const VarId y = t.op1(c);
  ops.first_matmul_workspace();
  // inputmat.update_usage(rowwise_usage=False): the row-wise data goes once the GEMM ran
  drop(t, x8);
  drop(t, w8);
  return y;
}

}  // namespace vramsim
