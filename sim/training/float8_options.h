// FP8 training's settings: torchao float8 and Transformer Engine. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// torchao's float8 training (torchao/float8: convert_to_float8_training with a Float8LinearConfig), as
// torchtitan's Float8 converter applies it (float8_linear.h):
//   tensorwise : Float8LinearConfig() (the "tensorwise" recipe): one fp32 scale per tensor, input and weight
//                cast to float8_e4m3fn, grad_output to float8_e5m2;
//   rowwise    : Float8LinearConfig.from_recipe_name("rowwise"): one fp32 scale per row (axiswise), every
//                operand in e4m3, scales rounded to powers of 2.
// Transformer Engine's fp8_autocast (te_fp8_linear.h):
//   te         : every nn.Linear a te.Linear (Accelerate's convert_model), run under
//                fp8_autocast(fp8_recipe=DelayedScaling()): per-tensor scales from an amax history of
//                amax_history_len steps, Format.HYBRID (e4m3 forward, e5m2 gradients).
enum class Float8Recipe : std::uint8_t { kNone, kTensorwise, kRowwise, kTeDelayed };
struct Float8Options {
  Float8Recipe recipe = Float8Recipe::kNone;
  // DelayedScaling.amax_history_len (TE's default 1024): the rows of each te.Linear's amax history.
  int amax_history_len = 1024;
  // te.Linear.forward(is_first_microbatch=...) given (Megatron's gradient accumulation): the fp8 weight and
  // its transpose are kept in the module's _fp8_workspaces between forwards; None (TE's default): made anew.
  bool te_weight_cache = false;
  // Set by the step builder under FSDP2 (te.Linear's is_fsdp2): the forward quantizes the gathered weight
  // rowwise only and saves no fp8 weight; the backward quantizes it again (linear.py, issue #2681).
  bool te_fsdp2 = false;
  // Float8LinearConfig.enable_fsdp_float8_all_gather (tensorwise only): FSDP2 all-gathers each converted
  // weight as float8 (torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather),
  // one byte per element in the all-gather buffer and the unsharded weight.
  bool fsdp_float8_all_gather = false;
};

}  // namespace vramsim
