// The aten operations the emitters call, one method each, with what PyTorch allocates, what autograd saves
// (derivatives.yaml) and what the backward allocates; plus torch.autocast's casting rules.
//
// Conventions:
//   * Every returned VarId carries one Python reference: the caller drops it when the Python variable goes
//     away (EagerTape::drop). Inputs are never dropped here.
//   * Shapes are logical (PyTorch's); the methods do not track strides, so callers insert contiguous() where
//     the Python code makes reshape/einsum copy a non-contiguous operand.
//   * Backward allocation is the node's peak: each differentiable input gets its gradient (or the incoming
//   one,
//     for pass-through ops) and `temp_bytes` covers scratch alive inside the backward kernel sequence.
//
// Autocast (CUDA lists of PyTorch 2.x autocast_mode.cpp): matmuls and SDPA run in the low dtype (weights cast
// once per region and cached; activations cast per call, each cast a new tensor); exp, log, pow, rsqrt,
// layer_norm and the losses run in fp32 (a low-precision input is cast first); softmax, log_softmax, sum and
// vector norms take an fp32 output dtype without a separate cast; everything else follows type promotion.
#pragma once

#include <optional>
#include <unordered_map>
#include <utility>

#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/peft_lora.h"
#include "sim/graph/eager_tape.h"
#include "sim/training/float8_linear.h"

namespace vramsim {

namespace torch_ops_detail {
// Shape helpers shared by torch_ops.cpp and torch_ops_nn.cpp.
inline Shape with_last(Shape s, std::int64_t last) {
  s.back() = last;
  return s;
}
inline double numel_d(const Shape& s) { return static_cast<double>(numel(s)); }
}  // namespace torch_ops_detail

class TorchOps {
 public:
  explicit TorchOps(EagerTape& tape) : m_tape(tape) {}
  EagerTape& tape() { return m_tape; }

  // ---- torch.autocast
  void set_autocast(std::optional<DType> low) { m_autocast = low; }
  std::optional<DType> autocast() const { return m_autocast; }
  void clear_autocast_cache();  // leaving the outermost autocast region
  // The tensor a lower-precision op reads (x itself, with one more reference, when no cast is needed). For
  // ops on autocast's list that copy operands before their matmul (einsum), call it first.
  VarId autocast_operand(const std::string& name, VarId x) { return autocast_low(name, x); }

  // The first matmul of the process makes cuBLAS allocate its workspace (through the caching allocator).
  void set_forward_workspace_bytes(Bytes bytes) { m_workspace_bytes = bytes; }
  // PEFT LoRA: linear() on a wrapped base weight runs lora.Linear.forward (peft_lora.h). `training`: the
  // adapters' dropout is active. The pointers must outlive this object.
  void set_lora(const LoraAdapters* adapters, const LoraOptions* options, bool training) {
    m_lora = adapters;
    m_lora_options = options;
    m_lora_training = training;
  }

  // bitsandbytes: linear() on a quantized weight runs Linear4bit / Linear8bitLt (bnb_quant.h) instead of
  // F.linear. The pointers must outlive this object.
  void set_bnb(const BnbWeights* weights, const BnbOptions* options) {
    m_bnb = weights;
    m_bnb_options = options;
  }

  // torchao float8 (float8_linear.h): linear() on a converted weight runs Float8Linear.forward. The pointers
  // must outlive this object.
  void set_float8(const Float8Weights* weights, const Float8Options* options) {
    m_float8 = weights;
    m_float8_options = options;
  }
  // Context parallelism (context_parallel.h): the fused SDPA kernels run as ring attention over `degree`
  // ranks. The pointer must outlive this object; nullptr or degree 1: plain SDPA.
  void set_context_parallel(const ContextParallelOptions* cp) { m_context_parallel = cp; }
  // Makes the process's first cuBLAS workspace if this is its first matmul (for matmuls recorded outside).
  void first_matmul_workspace() { maybe_allocate_workspace(); }

  // ---- matmuls (lower precision under autocast)
  // nn.Linear / F.linear and GPT-2's Conv1D (addmm): x [..., in] -> [..., out]; saves x and w.
  // weight_first: the weight is the first operand of the Python call (einsum(self.weight, x, ...)), so
  // autocast casts it before x.
  VarId linear(const std::string& name, VarId x, VarId w, VarId bias = kNoVar, bool weight_first = false);
  // The base layer of an adapted linear alone (no PEFT method applied): for callers that run the method's
  // forward themselves (PEFT's LoraParallelLinear under sequence parallelism).
  VarId base_linear(const std::string& name, VarId x, VarId w, VarId bias = kNoVar);
  // PEFT LoRA on `w` (nullptr: not adapted, or a method other than plain LoRA), its options, and whether the
  // adapters train.
  const LoraAdapter* plain_lora_adapter(VarId w) const;
  const LoraOptions& lora_options() const { return *m_lora_options; }
  bool lora_training() const { return m_lora_training; }
  // torch.matmul / bmm / einsum contraction of batched matrices already laid out for bmm; saves a and b.
  // cublas=false for degenerate contractions (inner size 1) that do not reach cuBLAS.
  VarId matmul(const std::string& name, VarId a, VarId b, const Shape& out_shape, bool cublas = true);

  // ---- elementwise
  VarId add(const std::string& name, VarId a, VarId b);
  VarId sub(const std::string& name, VarId a, VarId b);
  VarId mul(const std::string& name, VarId a, VarId b);
  VarId div(const std::string& name, VarId a, VarId b);
  VarId scale(const std::string& name, VarId a);       // a * python scalar, a / python scalar
  VarId add_scalar(const std::string& name, VarId a);  // a + python scalar
  VarId neg(const std::string& name, VarId a);
  VarId pow2(const std::string& name, VarId a);
  VarId pow3(const std::string& name, VarId a);  // torch.pow(a, 3.0)
  VarId tanh(const std::string& name, VarId a);
  VarId sqrt(const std::string& name, VarId a);
  VarId rsqrt(const std::string& name, VarId a);
  VarId exp(const std::string& name, VarId a);
  VarId log(const std::string& name, VarId a);
  VarId sigmoid(const std::string& name, VarId a);
  VarId silu(const std::string& name, VarId a);
  VarId gelu(const std::string& name, VarId a);
  VarId to(const std::string& name, VarId a, DType dtype);  // same dtype: returns `a` with one more reference
  VarId contiguous(const std::string& name, VarId a);       // a copy (clone)
  // x.contiguous() where the caller knows the layout: a copy unless `already` (then x itself, one more
  // reference, as Tensor::contiguous returns a contiguous tensor).
  VarId contiguous(const std::string& name, VarId a, bool already);
  VarId cat_last(const std::string& name, VarId a, VarId b);
  VarId cat_dim(const std::string& name, VarId a, VarId b, std::size_t dim);  // torch.cat([a, b], dim)

  // ---- reductions over the last dimension, keepdim=True
  VarId mean_last(const std::string& name, VarId a);
  VarId sum_last(const std::string& name, VarId a);
  std::pair<VarId, VarId> max_last(const std::string& name, VarId a);  // values, int64 indices
  VarId amax_last(const std::string& name, VarId a);
  VarId vector_norm_last(const std::string& name, VarId a);
  VarId mean_all(const std::string& name, VarId a);

  // ---- attention pieces
  VarId softmax_last(const std::string& name, VarId a, std::optional<DType> dtype = std::nullopt);
  VarId log_softmax_last(const std::string& name, VarId a);
  VarId masked_fill(const std::string& name, VarId a, VarId mask);
  VarId where(const std::string& name, VarId mask, VarId a);  // torch.where(mask, a, python scalar)
  std::pair<VarId, VarId> dropout(const std::string& name, VarId a, double p);  // output, bool mask
  // F.scaled_dot_product_attention taking the flash (or, for fp32, memory-efficient) kernel: saves q, k, v,
  // the output and an fp32 logsumexp; q [b, h, s, d], k/v [b, h_kv, s, d].
  VarId sdpa_flash(const std::string& name, VarId q, VarId k, VarId v);
  // F.scaled_dot_product_attention taking the memory-efficient kernel: saves q, k, v, the output, an fp32
  // logsumexp whose row count is padded to 32 (b, h, ceil(s / 32) * 32) and the additive mask if one is given
  // (kNoVar: is_causal).
  VarId sdpa_efficient(const std::string& name, VarId q, VarId k, VarId v, VarId mask = kNoVar);
  // Its composite fallback (_scaled_dot_product_attention_math, is_causal): q and k each scaled by
  // sqrt(scale), the (s, s) causal mask built as bool ones -> tril -> an additive float mask, scores,
  // softmax, (dropout), probabilities @ v.
  VarId sdpa_math(const std::string& name, VarId q, VarId k, VarId v, double dropout_p);

  // ---- indexing and routing (mixture-of-experts blocks)
  // torch.topk(a, k, dim=-1): values (differentiable; TopkBackward keeps the indices) and int64 indices.
  std::pair<VarId, VarId> topk_last(const std::string& name, VarId a, std::int64_t k);
  // x[index] over the first dimension with `rows` int64 indices (advanced indexing): [rows, ...]. Backward
  // (IndexBackward) writes the gradient into zeros of x's full shape.
  VarId index_rows(const std::string& name, VarId x, VarId index, std::int64_t rows);
  // x[index] with an int64 index tensor of any shape over x's first dimension (weight[token_ids]):
  // index's shape + x.shape[1:]. Backward: zeros of x's shape, then the sorting index_put_.
  VarId index(const std::string& name, VarId x, VarId index);
  // x[torch.arange(n), cols] for a 2-D x (n, m) and int64 cols (n) on the device: the arange is a host
  // tensor that indexing copies to the device (forward and backward); -> (n).
  VarId index_arange_rows(const std::string& name, VarId x, VarId cols);
  // target.index_add_(0, index, source), in place: returns target's new version. Backward passes the
  // gradient through to target and gathers source's rows (index_select, a new tensor).
  VarId index_add_rows(const std::string& name, VarId target, VarId index, VarId source);
  // a /= b in place (b broadcast over a's last dimension).
  VarId div_inplace(const std::string& name, VarId a, VarId b);

  // ---- Megatron-LM sequence parallelism (megatron/core/tensor_parallel/layers.py and mappings.py;
  // Korthikanti et al. 2022, Section 4.2.2), on a tensor-parallel group of `tp` ranks. Outside the attention
  // core and the MLP the hidden states are split along the sequence ([b, s/tp, h] per rank).
  // ColumnParallelLinear with sequence_parallel: all-gathers the shard into Megatron's global memory buffer
  // (one persistent buffer, reused by every layer) and multiplies; saves the shard, not the gathered input
  // (backward gathers it again), and reduce-scatters the input gradient: [b, s/tp, in] -> [b, s, out].
  VarId sequence_parallel_linear(const std::string& name, VarId shard, VarId w, VarId bias, int tp);
  // reduce_scatter_to_sequence_parallel_region after a RowParallelLinear: [b, s, h] -> [b, s/tp, h].
  VarId reduce_scatter_sequence(const std::string& name, VarId partial, int tp);
  // scatter_to_sequence_parallel_region after the embeddings: this rank's slice, made contiguous.
  VarId scatter_sequence(const std::string& name, VarId full, int tp);

  // ---- embedding, loss
  VarId embedding(const std::string& name, VarId weight, VarId ids);  // F.embedding (nn.Embedding)
  VarId gather_last(const std::string& name, VarId a, VarId index);   // -> [..., 1]
  VarId nll_loss(const std::string& name, VarId log_probs, VarId target);
  // save_statistics=false: the mean/rstd outputs are neither kept nor saved (Megatron accounting).
  VarId layer_norm(const std::string& name, VarId x, VarId weight, VarId bias, bool save_statistics = true);

  // The tensor a lower-precision op reads under autocast: a cast (cached for parameters) or `x` itself, with
  // one more reference either way.
  VarId autocast_low(const std::string& name, VarId x);

 private:
  VarId linear_impl(const std::string& name, VarId x, VarId w, VarId bias, bool weight_first, bool adapters);
  VarId torch_linear(const std::string& name, VarId x, VarId w, VarId bias, bool weight_first);  // F.linear
  VarId autocast_fp32(const std::string& name, VarId x);
  // The fused SDPA kernels: out and an fp32 logsumexp of (b, h, lse_rows), saved with q, k, v (and the mask).
  VarId fused_attention(const std::string& name, const char* kind, VarId q, VarId k, VarId v, VarId mask,
                        std::int64_t lse_rows, std::vector<Bytes> backward_temps);
  // x[index] producing `out`, with `positions` indices into x's first dimension (index_rows, index).
  VarId advanced_index(const std::string& name, VarId x, VarId index, const Shape& out,
                       std::int64_t positions);
  VarId unary(const std::string& name, const std::string& kind, VarId a, DType out, SavedSpec saved,
              std::vector<Bytes> temps = {});
  // `temps`: scratch of the backward formulas (BackwardRule::temp_bytes).
  VarId binary(const std::string& name, const std::string& kind, VarId a, VarId b, SavedSpec saved,
               bool a_pass, bool b_pass, std::vector<Bytes> temps = {});
  void maybe_allocate_workspace();
  // The GEMM op of a linear layer on its (autocast) operands: input xa, weight wa, bias ba or kNoVar. `c`
  // comes with name, outputs, flops and the backward rules of xa and wa; this sets kind, inputs, what mm
  // saves and the bias's rule, records the op, makes the first cuBLAS workspace and drops the operands.
  VarId record_linear(OpCall& c, VarId xa, VarId wa, VarId ba);

  EagerTape& m_tape;
  std::optional<DType> m_autocast;
  std::unordered_map<VarId, VarId> m_cast_cache;  // parameter -> its cached low-precision copy
  Bytes m_workspace_bytes = 0;
  const LoraAdapters* m_lora = nullptr;
  const LoraOptions* m_lora_options = nullptr;
  bool m_lora_training = true;
  TensorId m_sequence_parallel_buffer = kNoTensor;  // Megatron's global memory buffer ("mpu")
  Bytes m_sequence_parallel_buffer_bytes = 0;
  const BnbWeights* m_bnb = nullptr;
  const BnbOptions* m_bnb_options = nullptr;
  const Float8Weights* m_float8 = nullptr;
  const Float8Options* m_float8_options = nullptr;
  const ContextParallelOptions* m_context_parallel = nullptr;
};

Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace vramsim
