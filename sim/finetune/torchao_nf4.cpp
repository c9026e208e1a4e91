#include "sim/finetune/torchao_nf4.h"

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// NF4Tensor.get_original_weight() for n elements of `dtype`, as its allocations happen: `alloc` returns a
// handle, `free` takes one, `stack` makes the dequantized weight (n elements of `dtype`), which the caller
// keeps.
template <class Alloc, class Free, class Stack>
void get_original_weight(std::int64_t n, DType dtype, Alloc alloc, Free free, Stack stack) {
  const std::int64_t half = n / 2;
  const auto bytes = [&](std::int64_t elements, DType d) { return storage_bytes(elements, d, {n}); };
  // first_elements = (quantized_data >> 4).to(torch.long); second_elements = (quantized_data & 0b1111)...
  const auto nibbles = [&] {
    const int shifted = alloc(bytes(half, DType::kUInt8));
    const int indices = alloc(bytes(half, DType::kInt64));
    free(shifted);
    return indices;
  };
  const int first = nibbles();
  const int second = nibbles();
  const int dequantized_first = alloc(bytes(half, dtype));  // self.nf4[first_elements]
  const int dequantized_second = alloc(bytes(half, dtype));
  // dequantize_scalers: quantized_scalers / quantization_factor.unsqueeze(-1), then + scaler_mean
  const int divided = alloc(bytes(n / kTorchaoNf4Block, dtype));
  const int scalers = alloc(bytes(n / kTorchaoNf4Block, dtype));
  free(divided);
  // repeated = scalers.unsqueeze(-1).expand(...): a view; repeated.flatten() copies, once per half
  const auto scaled = [&](int) {
    const int flat = alloc(bytes(half, dtype));
    const int product = alloc(bytes(half, dtype));
    free(flat);
    return product;
  };
  const int scaled_first = scaled(dequantized_first);
  const int scaled_second = scaled(dequantized_second);
  stack(bytes(n, dtype));  // torch.stack([...], dim=-1).reshape(self.shape)
  // The locals go when the function returns.
  for (int h : {first, second, dequantized_first, dequantized_second, scalers, scaled_first, scaled_second}) {
    free(h);
  }
}

// The backward's dequantization, as a kernel scratch script (what it leaves allocated, the weight, lives
// until the input gradient is made).
std::vector<ScratchStep> dequantize_scratch(std::int64_t n, DType dtype) {
  ScratchScript s;
  get_original_weight(
      n, dtype, [&](Bytes b) { return s.alloc(b); }, [&](int h) { s.free(h); }, [&](Bytes b) { s.alloc(b); });
  return s.steps();
}

}  // namespace

TorchaoNf4Bytes torchao_nf4_bytes(std::int64_t numel, DType dtype, const std::string& name) {
  if (numel % kTorchaoNf4Block != 0 || (numel / kTorchaoNf4Block) % kTorchaoScalerBlock != 0) {
    throw InputError(fmt::format(
        "{}: torchao NF4 needs a multiple of {} elements (block_size {} x scaler_block_size {}), not {}",
        name, kTorchaoNf4Block * kTorchaoScalerBlock, kTorchaoNf4Block, kTorchaoScalerBlock, numel));
  }
  const Shape shape{numel};
  TorchaoNf4Bytes b;
  b.quantized_data = storage_bytes(numel / 2, DType::kUInt8, shape);
  b.quantized_scalers = storage_bytes(numel / kTorchaoNf4Block, DType::kUInt8, shape);  // int8
  b.quantization_factor = storage_bytes(numel / (kTorchaoNf4Block * kTorchaoScalerBlock), dtype, shape);
  b.scaler_mean = dtype_size_bytes(dtype);
  b.nf4 = 16 * dtype_size_bytes(dtype);
  return b;
}

VarId load_torchao_nf4_weight(EagerTape& t, const std::string& name, std::int64_t out_features,
                              std::int64_t in_features, DType dtype, BnbWeights& weights,
                              const std::function<std::int64_t(std::int64_t)>& resident_numel) {
  const Shape shape{out_features, in_features};
  const std::int64_t n = numel(shape);
  const TorchaoNf4Bytes b = torchao_nf4_bytes(n, dtype, name);
  const auto resident = [&](std::int64_t elements) {
    return resident_numel ? resident_numel(elements) : elements;
  };
  const bool sharded = resident(n / 2) != n / 2;
  t.begin_op(name + ".to_nf4", "to_nf4");
  // FrozenNF4Linear / LoRALinear: the weight is made in the default dtype, then swapped for to_nf4(weight).
  // Under FSDP2 torchtune moves the checkpoint's tensor to the device and quantizes it there.
  const TensorId full =
      t.allocate(name + ".unquantized", tensor_bytes(shape, dtype), dtype, TensorCategory::kTemporary);
  if (!sharded) {
    const VarId v = t.parameter(name, shape, DType::kUInt8, static_cast<std::int64_t>(b.quantized_data));
    for (const auto& [what, bytes] : {std::pair{"quantized_scalers", b.quantized_scalers},
                                      std::pair{"quantization_factor", b.quantization_factor},
                                      std::pair{"scaler_mean", b.scaler_mean}, std::pair{"nf4", b.nf4}}) {
      t.allocate(name + "." + what, bytes, DType::kUInt8, TensorCategory::kParameter);
    }
    t.release(full);
    t.freeze(v);
    weights.emplace(v, BnbWeight{BnbFormat::kTorchaoNf4, out_features, in_features, dtype});
    return v;
  }
  // The whole NF4Tensor: its sharded inner tensors go once this rank's chunk is copied out; scaler_mean and
  // nf4 stay, referenced by the shard.
  std::vector<TensorId> whole;
  for (const auto& [what, bytes] :
       {std::pair{"quantized_data", b.quantized_data}, std::pair{"quantized_scalers", b.quantized_scalers},
        std::pair{"quantization_factor", b.quantization_factor}}) {
    whole.push_back(t.allocate(name + ".to_nf4." + what, bytes, DType::kUInt8, TensorCategory::kTemporary));
  }
  t.allocate(name + ".scaler_mean", b.scaler_mean, DType::kUInt8, TensorCategory::kParameter);
  t.allocate(name + ".nf4", b.nf4, DType::kUInt8, TensorCategory::kParameter);
  t.release(full);                               // full_tensor = to_nf4(full_tensor)
  t.begin_op(name + ".new_zeros", "new_zeros");  // sharded_param = full_tensor.new_zeros(chunk.size())
  const VarId v = t.parameter(name, shape, DType::kUInt8, resident(n / 2));
  t.allocate(name + ".quantized_scalers", storage_bytes(resident(n / kTorchaoNf4Block), DType::kUInt8, shape),
             DType::kUInt8, TensorCategory::kParameter);
  t.allocate(name + ".quantization_factor",
             storage_bytes(resident(n / (kTorchaoNf4Block * kTorchaoScalerBlock)), dtype, shape), dtype,
             TensorCategory::kParameter);
  for (const TensorId w : whole) {
    t.release(w);
  }
  t.freeze(v);
  weights.emplace(v, BnbWeight{BnbFormat::kTorchaoNf4, out_features, in_features, dtype});
  return v;
}

std::vector<AllGatherInput> torchao_nf4_all_gather_inputs(const BnbWeight& w) {
  const std::int64_t n = w.out_features * w.in_features;
  return {AllGatherInput{".quantized_scalers", n / kTorchaoNf4Block, DType::kUInt8},  // int8
          AllGatherInput{".quantization_factor", n / (kTorchaoNf4Block * kTorchaoScalerBlock), w.quant_dtype},
          AllGatherInput{".quantized_data", n / 2, DType::kUInt8}};
}

VarId torchao_linear_nf4(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w) {
  EagerTape& t = ops.tape();
  const std::int64_t n = w.out_features * w.in_features;
  const DType dtype = t.dtype(x);
  // LinearNF4.forward runs with grad off: weight.to(input.dtype) dequantizes.
  const bool grad = t.grad_enabled();
  t.set_grad_enabled(false);
  t.begin_op(name + ".get_original_weight", "get_original_weight");
  std::vector<TensorId> made;
  VarId original = kNoVar;
  get_original_weight(
      n, w.quant_dtype,
      [&](Bytes b) {
        made.push_back(t.allocate(name + ".dequantize", b, DType::kUInt8, TensorCategory::kTemporary));
        return static_cast<int>(made.size() - 1);
      },
      [&](int h) { t.release(made[static_cast<std::size_t>(h)]); },
      [&](Bytes) {
        OpCall st;
        st.name = name + ".dequantized";
        st.kind = "stack";
        st.inputs = {weight};
        st.outputs = {OutputSpec{"", {w.out_features, w.in_features}, w.quant_dtype, false}};
        original = t.op1(st);
      });
  const VarId wc = ops.to(name + ".weight_to_input_dtype", original, dtype);  // .to(input.dtype)
  t.drop(original);
  t.set_grad_enabled(grad);
  OpCall c;
  c.name = name;
  c.kind = "linear_nf4";
  c.inputs = {x, weight, wc};
  c.outputs = {OutputSpec{"", torch_ops_detail::with_last(t.shape(x), w.out_features), dtype}};
  c.flops = 2.0 * static_cast<double>(numel(t.shape(x))) * static_cast<double>(w.out_features);
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}, GradRule{Kind::kNone}};
  c.backward.scratch_before_grads = dequantize_scratch(n, w.quant_dtype);  // saves only the NF4 weight
  if (bias != kNoVar) {
    c.inputs.push_back(bias);
    c.backward.grads.push_back(GradRule{Kind::kNone});
  }
  const VarId y = t.op1(c);
  t.drop(wc);
  return y;
}

}  // namespace vramsim
