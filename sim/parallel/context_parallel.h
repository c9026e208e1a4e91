// Context parallelism as torchtitan runs it: torch.distributed.tensor.experimental.context_parallel over the
// "cp" mesh dimension (torchtitan/distributed/utils.py create_context_parallel_ctx, train.py), with ring
// attention replacing F.scaled_dot_product_attention (torch/distributed/tensor/experimental/_attention.py:
// _templated_ring_attention, _templated_ring_attention_backward, _SDPAMerger, _AllGatherRotater,
// _AllToAllRotater).
//
// The sequence. context_parallel() shards the batch's buffers (input ids, labels, rotary tables) along the
// sequence with the round-robin load balancer: the sequence is cut into 2 x N chunks and rank r keeps chunks
// r and 2N - 1 - r, so every rank holds seq / N tokens and every activation outside attention is seq / N long
// (the step builder runs the model on the local seq / N tokens).
//
// Attention, per layer, on local q [b, h, s/N, d] and k, v [b, h_kv, s/N, d] (kv = one of them):
//   forward : key/value rotate N - 1 times. allgather: torch.cat([k.flatten(), v.flatten()]) (2 kv) is
//             all-gathered once into one buffer of N x 2 kv (every rank's keys and values, alive until the
//             attention returns) and a cat of the current chunk is made at each step (2 kv); alltoall:
//             each step's cat (2 kv) is sent with permute_tensor into a new buffer (2 kv) while the last
//             received one (2 kv) is still read. Each step's flash/efficient kernel returns an output (bf16,
//             q's size) and an fp32 logsumexp that _SDPAMerger (convert_to_f32=True) upcasts and merges into
//             an fp32 output: out - sigmoid(block_lse - lse) * (out - block_out), whose temporaries are fp32
//             q-sized; results() casts the merged output back to bf16.
//   saved   : what the aten flash/efficient node saves, at local size: q, k, v, the merged output and its
//             logsumexp (b, h, s/N) fp32 (the efficient kernel's padded to 32 rows).
//   backward: fp32 accumulators for dq, dk, dv (torch.zeros_like(..., dtype=float32)); the key/value rotation
//             again (allgather: the N x 2 kv buffer; alltoall: 2 buffers); each step's kernel gradients
//             (bf16, q + 2 kv) and its kernel scratch; the dk/dv rotation always all-to-all, in fp32: a cat
//             (2 kv x 2) and the received buffer (2 kv x 2). The final .to(dtype) casts are the gradients.
// Simplification: the forward's temporaries are counted as alive together with the merged output (the
// real code frees the step's fp32 copies before results() casts it).
#pragma once

#include <string>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;

// Bytes of the attention's transient buffers, for the tests' hand calculations; q_bytes and kv_bytes are
// the local q and one of k / v in the compute dtype, lse_bytes the fp32 logsumexp.
struct RingAttentionBytes {
  Bytes kv_rotation_forward = 0;   // allgather: (N + 1) x 2 kv; alltoall: 3 x 2 kv
  Bytes merge_forward = 0;         // block output, its fp32 copy, the merged fp32 output, 2 fp32 temporaries
  Bytes kv_rotation_backward = 0;  // as the forward's
  Bytes accumulators = 0;          // fp32 dq, dk, dv
  Bytes dkv_rotation = 0;          // fp32: a cat, the buffer sent and the buffer received
  Bytes step_grads = 0;            // one step's kernel gradients, bf16 q + 2 kv
};
RingAttentionBytes ring_attention_bytes(Bytes q_bytes, Bytes kv_bytes, Bytes lse_bytes, int degree,
                                        CpRotate rotate, DType compute);

// _scaled_dot_product_ring_flash_attention / _efficient_attention on local q, k, v: `kind` is the aten op
// ("_scaled_dot_product_flash_attention" or "_scaled_dot_product_efficient_attention"), `lse_rows` its
// logsumexp's rows, `kernel_backward_temps` one step's kernel backward scratch. Returns the output.
VarId ring_attention(TorchOps& ops, const std::string& name, const char* kind, VarId q, VarId k, VarId v,
                     std::int64_t lse_rows, const std::vector<Bytes>& kernel_backward_temps,
                     const ContextParallelOptions& cp);

}  // namespace vramsim
