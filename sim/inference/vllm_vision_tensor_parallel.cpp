#include "sim/inference/vllm_vision_tensor_parallel.h"

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {
namespace {

bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

}  // namespace

VllmTpSplit vllm_vision_tp_split(const std::string& name) {
  // "self_attn." keeps SigLIP's pooling head (head.attention.*, nn.MultiheadAttention) replicated; its
  // head.mlp.fc1 / fc2 are a SiglipMLP and split like the layers' MLP.
  static const char* const kColumn[] = {
      "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
      "attn.qkv.",         "mlp.fc1.",          "mlp.gate_proj.",
      "mlp.up_proj.",      "merger.mlp.0.",     "multi_modal_projector.linear_1."};
  static const char* const kRow[] = {
      "self_attn.out_proj.", "attn.proj.",    "mlp.fc2.",
      "mlp.down_proj.",      "merger.mlp.2.", "multi_modal_projector.linear_2."};
  for (const char* part : kColumn) {
    if (has(name, part)) {
      return VllmTpSplit::kColumn;
    }
  }
  for (const char* part : kRow) {
    if (has(name, part)) {
      return VllmTpSplit::kRow;
    }
  }
  return VllmTpSplit::kReplicated;
}

std::int64_t vllm_vision_rank_numel(const ParameterShape& s, int tp) {
  const std::int64_t n = s.numel();
  const VllmTpSplit split = vllm_vision_tp_split(s.name);
  if (tp <= 1 || split == VllmTpSplit::kReplicated || s.shape.empty()) {
    return n;
  }
  const bool bias = s.shape.size() == 1;
  if (split == VllmTpSplit::kRow && bias) {
    return n;  // RowParallelLinear's bias is whole on every rank
  }
  // column-parallel: the output features (dim 0, a weight's rows or the bias); row-parallel: the input
  // features (a weight's last dimension)
  const std::int64_t dim = split == VllmTpSplit::kColumn ? s.shape.front() : s.shape.back();
  if (dim % tp != 0) {
    throw InputError(
        fmt::format("--tp: {} of the vision part has {} {} features: {} is not divisible by {} (vLLM's "
                    "{}ParallelLinear splits them across the tensor-parallel ranks)",
                    s.name, dim, split == VllmTpSplit::kColumn ? "output" : "input", dim, tp,
                    split == VllmTpSplit::kColumn ? "Column" : "Row"));
  }
  return n / tp;
}

}  // namespace vramsim
