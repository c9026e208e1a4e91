// Megatron-LM's sequence-parallel communication around tensor-parallel layers, as TorchOps ops: what each
// collective allocates through the caching allocator and what autograd keeps (torch_ops.h).
#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using torch_ops_detail::numel_d;
using torch_ops_detail::with_last;

// The sequence dimension of Megatron's [s, b, h] hidden states is HF's dimension 1 of [b, s, h].
Shape with_sequence(Shape shape, std::int64_t seq) {
  SIM_ASSERT(shape.size() == 3);
  shape[1] = seq;
  return shape;
}

}  // namespace

VarId TorchOps::sequence_parallel_linear(const std::string& name, VarId shard, VarId w, VarId bias, int tp) {
  const VarId xa = autocast_low(name, shard);
  const VarId wa = autocast_low(name, w);
  const VarId ba = bias == kNoVar ? kNoVar : autocast_low(name, bias);
  const Shape& ws = m_tape.shape(w);
  const Shape& xs = m_tape.shape(shard);
  const std::int64_t in = xs.back();
  const std::int64_t out_features = ws[0] == in && ws[1] != in ? ws[1] : ws[0];
  const Shape gathered = with_sequence(xs, xs[1] * tp);
  const DType dtype = m_tape.dtype(xa);
  OpCall c;
  c.name = name;  // the GEMM (mm / addmm) is the kernel; the all-gather is communication
  // get_global_memory_buffer().get_tensor(dim_size, dtype, "mpu"): allocated at the first use, kept, and
  // grown when a larger one is asked for.
  const Bytes buffer_bytes = tensor_bytes(gathered, dtype);
  if (buffer_bytes > m_sequence_parallel_buffer_bytes) {
    m_tape.begin_op(name + ".global_memory_buffer", "empty");
    if (m_sequence_parallel_buffer != kNoTensor) {
      m_tape.release(m_sequence_parallel_buffer);
    }
    m_sequence_parallel_buffer =
        m_tape.allocate("megatron.global_memory_buffer", buffer_bytes, dtype, TensorCategory::kCommunication);
    m_sequence_parallel_buffer_bytes = buffer_bytes;
  }
  c.outputs = {OutputSpec{"", with_last(gathered, out_features), m_autocast ? *m_autocast : dtype}};
  // LinearWithGradAccumulationAndAsyncCommunication: ctx.save_for_backward(input, weight) with the shard
  // (record_linear saves the operands mm saves). backward: grad_input = grad_output @ weight over the whole
  // sequence, reduce-scattered into the shard's gradient; the weight's gradient reads the input gathered
  // again into the global buffer.
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{}};
  c.backward.temp_bytes = {tensor_bytes(gathered, dtype)};
  c.flops = 2.0 * numel_d(gathered) * static_cast<double>(out_features);
  return record_linear(c, xa, wa, ba);
}

VarId TorchOps::reduce_scatter_sequence(const std::string& name, VarId partial, int tp) {
  const Shape& s = m_tape.shape(partial);
  SIM_ASSERT(s.size() == 3 && s[1] % tp == 0);
  OpCall c;
  c.name = name;
  c.kind = "reduce_scatter_tensor";
  c.inputs = {partial};
  c.outputs = {OutputSpec{"", with_sequence(s, s[1] / tp), m_tape.dtype(partial)}};
  c.backward.grads = {GradRule{Kind::kAlloc}};  // _ReduceScatterToSequenceParallelRegion.backward: all-gather
  return m_tape.op1(c);
}

VarId TorchOps::scatter_sequence(const std::string& name, VarId full, int tp) {
  const Shape& s = m_tape.shape(full);
  SIM_ASSERT(s.size() == 3 && s[1] % tp == 0);
  OpCall c;
  c.name = name;
  c.kind = "contiguous";  // _split_along_first_dim: narrow(...).contiguous()
  c.inputs = {full};
  c.outputs = {OutputSpec{"", with_sequence(s, s[1] / tp), m_tape.dtype(full)}};
  c.backward.grads = {GradRule{Kind::kAlloc}};  // _ScatterToSequenceParallelRegion.backward: all-gather
  return m_tape.op1(c);
}

}  // namespace vramsim
