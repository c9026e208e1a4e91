// What one tensor-parallel rank of vLLM holds of a vision-language model's vision part, under
// mm_encoder_tp_mode "weights" (MultiModalConfig's default, vllm/config/multimodal.py, 0.10 to 0.19): each
// layer's weights are split across the TP ranks as in the language model, and every rank runs the whole
// batch of images through its slice.
//
// The vision model files build the tower's linears from vllm/model_executor/layers/linear.py (vLLM main at
// fb33ec8c for qwen2_5_vl.py; clip.py, siglip.py, llava.py, gemma3_mm.py alike):
//   column-parallel  output features / tp, bias / tp:  QKVParallelLinear (CLIP's and SigLIP's qkv_proj, the
//                    checkpoint's q/k/v_proj; Qwen2-VL's and Qwen2.5-VL's attn.qkv), ColumnParallelLinear
//                    (CLIPMLP / SiglipMLP / Qwen2VisionMLP fc1, Qwen2.5-VL's MergedColumnParallelLinear
//                    gate_up_proj = gate_proj + up_proj, the PatchMerger's mlp.0, LlavaMultiModalProjector's
//                    linear_1)
//   row-parallel     input features / tp, the bias whole on every rank (added after the all-reduce):
//                    out_proj, attn.proj, fc2, down_proj, the PatchMerger's mlp.2, linear_2
//   replicated       everything else: the patch embedding (Conv2dLayer, Qwen's ReplicatedLinear / Conv3d),
//                    class and position embeddings, the LayerNorms / RMSNorms, Gemma3MultiModalProjector
//                    (an nn.Parameter and GemmaRMSNorm), SigLIP's pooling head's nn.MultiheadAttention (its
//                    SiglipMLP is split like the layers')
// Heads per rank: divide(num_heads, tp) (vllm/distributed/utils.py ensure_divisibility), as the linears'
// divide(output_size, tp) / divide(input_size, tp): vLLM refuses a degree that does not divide them.
#pragma once

#include <cstdint>
#include <string>

#include "sim/models/model_config.h"

namespace vramsim {

enum class VllmTpSplit { kReplicated, kColumn, kRow };

// How vLLM splits the vision parameter named `name` (the Hugging Face checkpoint's name) across the ranks.
VllmTpSplit vllm_vision_tp_split(const std::string& name);

// Elements one of `tp` ranks holds of the vision parameter `s`. Throws InputError naming the parameter
// when tp does not divide the dimension vLLM splits (ensure_divisibility: "{} is not divisible by {}").
std::int64_t vllm_vision_rank_numel(const ParameterShape& s, int tp);

}  // namespace vramsim
