#include "sim/training/float8_linear.h"

#include <numeric>
#include <string_view>

#include "sim/core/assert.h"
#include "sim/models/model_config.h"
#include "sim/torch/cuda_sort.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// float8 data as the simulator stores it: one byte per element (torch.float8_e4m3fn / float8_e5m2 are one
// byte; their dtype does not change any size).
constexpr DType kFloat8Storage = DType::kUInt8;

struct Float8Var {
  VarId data = kNoVar;
  VarId scale = kNoVar;  // Float8TrainingTensor._scale, alive as long as the data
};

// hp_tensor_to_float8_dynamic(t): tensor_to_amax, amax_to_scale, then _ToFloat8ConstrFunc.forward.
// `scale_shape`: {} (tensorwise) or the axiswise scale's shape. Recorded under no_grad (torchao's
// tensor_to_amax is), unless `differentiable`: then the last op is _ToFloat8ConstrFunc's autograd node,
// which passes its (hp) gradient on to `hp`.
Float8Var cast_to_float8(EagerTape& t, const std::string& name, VarId hp, const Shape& scale_shape,
                         bool differentiable = false) {
  const Shape shape = t.shape(hp);
  const DType dtype = t.dtype(hp);
  const bool grad = t.grad_enabled();
  t.set_grad_enabled(false);
  const auto unary = [&](const std::string& suffix, const char* kind, VarId in, const Shape& out_shape,
                         DType out) {
    OpCall c;
    c.name = name + suffix;
    c.kind = kind;
    c.inputs = {in};
    c.outputs = {OutputSpec{"", out_shape, out}};
    return t.op1(c);
  };
  // tensor_to_amax: torch.max(torch.abs(x)) (rowwise: torch.amax(torch.abs(x), dim, keepdim=True))
  const VarId abs = unary(".abs", "abs", hp, shape, dtype);
  const VarId amax = unary(".amax", scale_shape.empty() ? "max" : "amax", abs, scale_shape, dtype);
  t.drop(abs);
  // amax_to_scale: float8 max / amax.to(float64).clamp(min=EPS), returned as float32
  const VarId scale = unary(".scale", "reciprocal", amax, scale_shape, DType::kFloat32);
  t.drop(amax);
  // _ToFloat8ConstrFunc.forward: tensor_scaled = tensor.to(torch.float32) * scale
  const VarId fp32 = unary(".to_fp32", "_to_copy", hp, shape, DType::kFloat32);
  OpCall mul;
  mul.name = name + ".scaled";
  mul.kind = "mul";
  mul.inputs = {fp32, scale};
  mul.outputs = {OutputSpec{"", shape, DType::kFloat32}};
  const VarId scaled = t.op1(mul);
  t.drop(fp32);
  // to_fp8_saturated: x.clamp(-max, max).to(float8_dtype)
  const VarId clamped = unary(".clamp", "clamp", scaled, shape, DType::kFloat32);
  VarId data = kNoVar;
  if (differentiable) {
    t.set_grad_enabled(grad);
    OpCall c;
    c.name = name + ".float8";
    c.kind = "_to_copy";
    c.inputs = {hp, clamped};  // hp: the function's argument, whose gradient the backward returns as is
    OutputSpec out{"", shape, kFloat8Storage};
    out.grad_dtype = dtype;
    c.outputs = {out};
    c.backward.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}};
    data = t.op1(c);
  } else {
    data = unary(".float8", "_to_copy", clamped, shape, kFloat8Storage);
    t.set_grad_enabled(grad);
  }
  t.drop({clamped, scaled});
  return {data, scale};
}

Shape rowwise_scale(const Shape& shape, std::size_t reduced_dim) {
  Shape s = shape;
  s[reduced_dim] = 1;
  return s;
}

// The backward's cast of `elements` (scale_elements scales) as a scratch script: what it leaves allocated
// (the float8 data and its scale) lives until the backward returns.
void scratch_cast(ScratchScript& s, std::int64_t elements, std::int64_t scale_elements, DType hp) {
  const Bytes n = static_cast<Bytes>(elements);
  const Bytes scale = static_cast<Bytes>(scale_elements) * 4;
  const int abs = s.alloc(n * dtype_size_bytes(hp));
  const int amax = s.alloc(static_cast<Bytes>(scale_elements) * dtype_size_bytes(hp));
  s.free(abs);
  s.alloc(scale);
  s.free(amax);
  const int fp32 = s.alloc(n * 4);
  const int scaled = s.alloc(n * 4);
  s.free(fp32);
  const int clamped = s.alloc(n * 4);
  s.alloc(n);  // the float8 data
  s.free(clamped);
  s.free(scaled);
}

// matmul_with_hp_or_float8_args.backward's allocations besides grad_input and grad_weight.
// The backward of a linear whose input came cast (float8_module_input): _NoopFwToFloat8BwDynamic's backward
// casts grad_output once before the node runs, and its float8 result is the node's incoming gradient until
// the node returns; the saved input is float8 already. What is left are _scaled_mm's layout copies.
std::vector<ScratchStep> backward_scratch_float8_input(std::int64_t rows, std::int64_t in, std::int64_t out,
                                                       DType hp) {
  ScratchScript s;
  scratch_cast(s, rows * out, 1, hp);
  s.free(s.alloc(static_cast<Bytes>(in * out)));    // grad_input: the weight operand, column-major
  s.free(s.alloc(static_cast<Bytes>(rows * out)));  // grad_weight: grad_output.t().contiguous()
  s.free(s.alloc(static_cast<Bytes>(rows * in)));   // and the saved input, b.t().contiguous().t()
  return s.steps();
}

std::vector<ScratchStep> backward_scratch(std::int64_t rows, std::int64_t in, std::int64_t out, DType hp,
                                          const Float8Options& o, bool weight_is_float8) {
  ScratchScript s;
  const bool rowwise = o.recipe == Float8Recipe::kRowwise;
  const std::int64_t one = 1;
  // grad_output (rows, out), dim 0: per row when rowwise
  scratch_cast(s, rows * out, rowwise ? rows : one, hp);
  if (rowwise) {
    // pytorch#141881's workaround: g_reshaped = grad_output * 0 (a local), zero = g_reshaped[:1] * 0,
    // weight_hp_t = weight_hp_t + zero (a bf16 copy of the weight), then its cast, per output column
    s.alloc(static_cast<Bytes>(rows * out) * dtype_size_bytes(hp));
    const int zero = s.alloc(static_cast<Bytes>(out) * dtype_size_bytes(hp));
    s.alloc(static_cast<Bytes>(in * out) * dtype_size_bytes(hp));
    s.free(zero);
    scratch_cast(s, in * out, out, hp);
  }
  // tensorwise: the weight's float8 cast is what the forward saved (or the float8-gathered weight): no cast
  (void)weight_is_float8;
  // grad_input = _scaled_mm(grad_output_fp8, weight_fp8_t.t()): the weight operand is row-major and is
  // copied column-major
  s.free(s.alloc(static_cast<Bytes>(in * out)));
  // grad_output dim 1 (per column when rowwise), the saved input (per column of x when rowwise)
  scratch_cast(s, rows * out, rowwise ? out : one, hp);
  scratch_cast(s, rows * in, rowwise ? in : one, hp);
  // grad_weight = _scaled_mm(grad_output_fp8.t(), input_fp8): a.contiguous(), b.t().contiguous().t()
  s.free(s.alloc(static_cast<Bytes>(rows * out)));
  s.free(s.alloc(static_cast<Bytes>(rows * in)));
  return s.steps();
}

}  // namespace

bool is_float8_target(const ParameterShape& parameter) {
  const std::string_view name = parameter.name;
  if (parameter.shape.size() != 2 || !name.ends_with(".weight")) {
    return false;
  }
  const std::string_view module = name.substr(0, name.size() - 7);
  const bool embedding = module.ends_with("embed_tokens") || module.ends_with("wte") ||
                         module.ends_with("wpe") || module == "token_embeddings" ||
                         module.ends_with("tok_embeddings");
  const bool output = module == "lm_head" || module == "output";  // filter_fqns = ["output"]
  return !embedding && !output && parameter.shape[0] % 16 == 0 && parameter.shape[1] % 16 == 0;
}

Float8CastBytes float8_cast_bytes(std::int64_t rows, std::int64_t cols, DType hp, Float8Recipe recipe) {
  const Bytes n = static_cast<Bytes>(rows) * static_cast<Bytes>(cols);
  Float8CastBytes b;
  b.abs_copy = n * dtype_size_bytes(hp);
  b.fp32_copy = n * 4;
  b.float8 = n;
  b.scale = recipe == Float8Recipe::kRowwise ? static_cast<Bytes>(rows) * 4 : 4;
  return b;
}

VarId float8_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId w, VarId bias,
                            const Float8Options& options, bool weight_is_float8) {
  EagerTape& t = ops.tape();
  const Shape xs = t.shape(x);
  const Shape ws = t.shape(w);  // (out, in); copies: the tape's variables move as it grows
  const std::int64_t in = xs.back();
  const std::int64_t out = ws[0];
  const std::int64_t rows = numel(xs) / in;
  const bool input_is_float8 = t.dtype(x) == kFloat8Storage;
  const DType hp = t.grad_dtype(x);
  const bool rowwise = options.recipe == Float8Recipe::kRowwise;
  SIM_ASSERT(!(input_is_float8 && rowwise));  // float8 tensor parallelism is tensorwise only
  Float8Var w8;
  Float8Var x8;
  if (!rowwise && !weight_is_float8) {
    // Float8Linear.forward: _get_weight_scale, _cast_weight_to_float8_t outside the autograd function
    w8 = cast_to_float8(t, name + ".weight", w, {});
  }
  // inside matmul_with_hp_or_float8_args.forward
  if (!input_is_float8) {
    x8 = cast_to_float8(t, name + ".input", x, rowwise ? rowwise_scale(xs, xs.size() - 1) : Shape{});
  }
  if (rowwise) {
    w8 = cast_to_float8(t, name + ".weight", w, rowwise_scale(ws, 1));
  }
  OpCall c;
  c.name = name;
  c.kind = "_scaled_mm";
  c.inputs = {x, w};
  if (x8.data != kNoVar) {
    c.inputs.push_back(x8.data);
  }
  if (w8.data != kNoVar) {
    c.inputs.push_back(w8.data);
  }
  const int w8_input = static_cast<int>(c.inputs.size()) - 1;
  Shape ys = xs;
  ys.back() = out;
  c.outputs = {OutputSpec{"", ys, hp}};
  // ctx.save_for_backward(input_hp, weight_hp_t): the bf16 input, and the weight argument: tensorwise the
  // float8 cast made outside (input 3), rowwise the parameter itself, float8-gathered the unsharded float8
  // weight (the parameter's storage under FSDP2)
  c.saved.inputs = {0, !rowwise && w8.data != kNoVar ? w8_input : 1};
  c.backward.grads = {GradRule{Kind::kAlloc, false, xs.size() > 2}, GradRule{Kind::kAlloc},
                      GradRule{Kind::kNone}, GradRule{Kind::kNone}};
  c.backward.grads.resize(c.inputs.size());
  c.backward.order.resize(c.inputs.size());  // grad_input, then grad_weight (the float8 casts have none)
  std::iota(c.backward.order.begin(), c.backward.order.end(), 0);
  c.backward.scratch_before_grads = input_is_float8
                                        ? backward_scratch_float8_input(rows, in, out, hp)
                                        : backward_scratch(rows, in, out, hp, options, weight_is_float8);
  c.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  VarId y = t.op1(c);
  ops.first_matmul_workspace();
  if (x8.data != kNoVar) {
    t.drop({x8.data, x8.scale});
  }
  if (w8.data != kNoVar) {
    t.drop({w8.data, w8.scale});
  }
  if (bias != kNoVar) {  // output + self.bias.to(output.dtype)
    const VarId b = ops.to(name + ".bias_cast", bias, hp);
    const VarId sum = ops.add(name + ".bias_add", y, b);
    t.drop({b, y});
    y = sum;
  }
  return y;
}

VarId float8_module_input(TorchOps& ops, const std::string& name, VarId x, int sequence_shards) {
  EagerTape& t = ops.tape();
  const Float8Var x8 = cast_to_float8(t, name + ".input", x, {}, /*differentiable=*/true);
  if (sequence_shards <= 1) {
    t.drop(x8.scale);  // the scale's 4 bytes are not followed through the saved float8 tensors
    return x8.data;
  }
  const VarId y = sequence_all_gather(t, name, x8.data, sequence_shards);
  t.drop({x8.data, x8.scale});
  return y;
}

VarId sequence_all_gather(EagerTape& t, const std::string& name, VarId shard, int sequence_shards) {
  Shape gathered = t.shape(shard);
  SIM_ASSERT(gathered.size() == 3);
  gathered[1] *= sequence_shards;
  OpCall c;
  c.name = name + ".all_gather";
  c.kind = "all_gather_into_tensor";
  c.inputs = {shard};
  OutputSpec out{"", gathered, t.dtype(shard)};
  out.grad_dtype = t.grad_dtype(shard);
  c.outputs = {out};
  c.backward.grads = {GradRule{Kind::kAlloc}};  // reduce_scatter_tensor of the gradient: a new slice
  return t.op1(c);
}

}  // namespace vramsim
