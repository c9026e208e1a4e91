// torch.compile's settings: mode and scope. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// torch.compile (torch_compile.h): mode, and what is compiled.
enum class CompileMode : std::uint8_t {
  kNone,
  kDefault,
  kReduceOverhead,
  kMaxAutotune,
  kMaxAutotuneNoCudagraphs
};
// torch.compile's modes (torch/_inductor/__init__.py list_mode_options): reduce-overhead and max-autotune run
// the graphs as CUDA graphs (triton.cudagraphs); the max-autotune ones benchmark matmul kernels
// (max_autotune).
inline bool uses_cudagraphs(CompileMode m) {
  return m == CompileMode::kReduceOverhead || m == CompileMode::kMaxAutotune;
}
inline bool autotunes_matmuls(CompileMode m) {
  return m == CompileMode::kMaxAutotune || m == CompileMode::kMaxAutotuneNoCudagraphs;
}
// kModel: torch.compile(model), one graph for the whole forward, the loss computed by the training loop;
// kModelAndLoss: the same model computing its own loss from labels, inside the graph (a Hugging Face model
// given `labels`: the Trainer's torch_compile); kLayer: each decoder layer compiled on its own (torchtitan's
// per-TransformerBlock compile), the embeddings, final norm and head eager.
enum class CompileScope : std::uint8_t { kModel, kModelAndLoss, kLayer };

}  // namespace vramsim
