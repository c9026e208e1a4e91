#include "sim/parallel/context_parallel.h"

#include "sim/torch/torch_ops.h"

namespace vramsim {

RingAttentionBytes ring_attention_bytes(Bytes q_bytes, Bytes kv_bytes, Bytes lse_bytes, int degree,
                                        CpRotate rotate, DType compute) {
  const Bytes n = static_cast<Bytes>(degree);
  const Bytes widen = 4 / dtype_size_bytes(compute);  // fp32 copies of compute-dtype tensors
  RingAttentionBytes b;
  // _AllGatherRotater: the gathered N x 2 kv buffer and the step's cat (2 kv); _AllToAllRotater: the step's
  // cat, the buffer permute_tensor fills and the one received last step, each 2 kv.
  b.kv_rotation_forward = rotate == CpRotate::kAllGather ? (n + 1) * 2 * kv_bytes : 3 * 2 * kv_bytes;
  // _SDPAMerger.step / _merge_one with convert_to_f32: the step's output (compute dtype) and logsumexp, their
  // output's fp32 copy (none in fp32), the merged fp32 output, (out - block_out) and
  // sigmoid(...) * (out - block_out); the logsumexp is fp32 already.
  b.merge_forward = q_bytes + lse_bytes + (widen > 1 ? 4 : 3) * widen * q_bytes;
  b.kv_rotation_backward = b.kv_rotation_forward;
  b.accumulators = widen * (q_bytes + 2 * kv_bytes);
  b.dkv_rotation = 3 * widen * 2 * kv_bytes;
  b.step_grads = q_bytes + 2 * kv_bytes;
  return b;
}

VarId ring_attention(TorchOps& ops, const std::string& name, const char* kind, VarId q, VarId k, VarId v,
                     std::int64_t lse_rows, const std::vector<Bytes>& kernel_backward_temps,
                     const ContextParallelOptions& cp) {
  EagerTape& t = ops.tape();
  // SDPA is on autocast's lower-precision list: q, k, v are cast as for the plain kernel.
  const VarId qa = ops.autocast_operand(name, q);
  const VarId ka = ops.autocast_operand(name, k);
  const VarId va = ops.autocast_operand(name, v);
  const Shape qs = t.shape(qa);  // b, h, s/N, d (a copy: the tape's variables move as it grows)
  const DType compute = t.dtype(qa);
  const Bytes q_bytes = tensor_bytes(qs, compute);
  const Bytes kv_bytes = tensor_bytes(t.shape(ka), compute);
  const Bytes lse_bytes = tensor_bytes({qs[0], qs[1], lse_rows}, DType::kFloat32);
  const RingAttentionBytes b =
      ring_attention_bytes(q_bytes, kv_bytes, lse_bytes, cp.degree, cp.rotate, compute);
  OpCall c;
  c.name = name + ".ring_attention";
  c.kind = kind;
  c.inputs = {qa, ka, va};
  c.outputs = {OutputSpec{"", qs, compute},
               OutputSpec{"logsumexp", {qs[0], qs[1], lse_rows}, DType::kFloat32, false}};
  c.saved = SavedSpec{{0, 1, 2}, {0, 1}};
  c.scratch_bytes = {b.kv_rotation_forward, b.merge_forward};
  c.backward.temp_bytes = {b.kv_rotation_backward, b.accumulators, b.dkv_rotation, b.step_grads};
  c.backward.temp_bytes.insert(c.backward.temp_bytes.end(), kernel_backward_temps.begin(),
                               kernel_backward_temps.end());
  // Causal attention over the whole sequence, split evenly by the load balancer: the local queries see
  // N times their own length of keys, half of it masked.
  const std::int64_t keys = qs[2] * cp.degree;
  c.flops = 4.0 * static_cast<double>(numel(qs)) * static_cast<double>(keys) / 2.0;
  const std::vector<VarId> out = t.op(c);
  t.drop(out[1]);  // the logsumexp is only referenced by the backward node
  t.drop({qa, ka, va});
  return out[0];
}

}  // namespace vramsim
