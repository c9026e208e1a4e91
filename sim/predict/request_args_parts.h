// The rooms of make_request (request_args.cpp): each parses the options of one concept from RequestArgs into
// the PredictRequest, with the named framework's defaults, and throws an InputError naming the option for a
// bad value or a combination the real library refuses. make_request calls them in this order, which is the
// order their errors are found in:
//   parse_data_parallel (the layout) -> apply_step_args -> apply_compile_args -> apply_generation_args ->
//   apply_peft_args -> apply_quantization_args -> apply_parallel_args -> apply_vision_args ->
//   apply_pipeline_args.
// Private to sim/predict: callers use make_request (step_prediction.h).
#pragma once

#include "sim/predict/step_prediction.h"

namespace vramsim {

struct GpuSpec;

namespace request_args {

// request_args_parallel.cpp: --world-size / --dp / --tp / --pp / --cp, and the data-parallel scheme with its
// options (DDP, ZeRO, FSDP1 / FSDP2, --offload).
DataParallelOptions parse_data_parallel(const RequestArgs& a);
// The parallel layout's step options: FSDP's wrapping, master weights, activation offload, tensor and
// sequence parallelism, float8, mixture-of-experts, context parallelism.
void apply_parallel_args(const RequestArgs& a, const DataParallelOptions& data_parallel, PredictRequest& r);
// The MoE layers' library: --moe-impl, else --ep alone picks torchtitan's over FSDP2 and Megatron-Core's
// otherwise (transformers' without --ep).
MoeImpl chosen_moe_impl(const RequestArgs& a, const DataParallelOptions& data_parallel);
// The pipeline's stages and schedule (vLLM's pipeline is sized by its start-up instead).
void apply_pipeline_args(const RequestArgs& a, const DataParallelOptions& data_parallel, PredictRequest& r);

// request_args_step.cpp: batch and sequence, precision and optimizer, checkpointing, the loss, attention,
// dropout, micro-batches and steps. `spec` is the GPU's table entry (nullptr with --capacity).
void apply_step_args(const RequestArgs& a, const GpuSpec* spec, PredictRequest& r);
// torch.compile, the warm-up, and zero_grad.
void apply_compile_args(const RequestArgs& a, PredictRequest& r);
// A vision-language model's image inputs.
void apply_vision_args(const RequestArgs& a, PredictRequest& r);

// request_args_finetune.cpp: PEFT's adapters, and quantized base weights (with a checkpoint's own
// quantization_config).
void apply_peft_args(const RequestArgs& a, PredictRequest& r);
void apply_quantization_args(const RequestArgs& a, const DataParallelOptions& data_parallel,
                             PredictRequest& r);

// request_args_serving.cpp: --generate, the KV cache, --prompt-len, and the serving engine's arguments.
void apply_generation_args(const RequestArgs& a, PredictRequest& r);
// Expert parallelism with --kv-cache paged: vLLM's --enable-expert-parallel where vLLM (and vramsim) take it,
// and --ep (Megatron's and torchtitan's, for training) refused there. Called before the rank's model is made.
void check_serving_expert_parallel(const RequestArgs& a, const DataParallelOptions& data_parallel);

}  // namespace request_args
}  // namespace vramsim
