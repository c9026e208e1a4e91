// Pipeline parallelism's settings (Megatron-LM, torchtitan). Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// Pipeline parallelism (pipeline_parallel.h): Megatron-LM's settings, and torchtitan's on
// torch.distributed.pipelining. The micro-batches of a step are TrainingOptions::grad_accumulation
// (Megatron's num_microbatches, torchtitan's local batch / microbatch size).
enum class PipelineSchedule : std::uint8_t { k1F1B, kInterleaved, kGPipe };
// How the decoder layers are split over the (virtual) stages: Megatron evenly (it refuses layers that do not
// divide), torchtitan by generate_llm_fqn_per_model_part (the embeddings and the output count as layers).
enum class PipelineSplit : std::uint8_t { kMegatron, kTorchtitan };
struct PipelineOptions {
  int stages = 1;          // --pipeline-model-parallel-size
  int stage = 0;           // the GPU simulated: its pipeline rank
  int virtual_stages = 1;  // model chunks per GPU (--num-layers-per-virtual-pipeline-stage's result)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  PipelineSplit split = PipelineSplit::kMegatron;
  // torchtitan's pipeline_parallel_first_stage_less_layers / _last_stage_less_layers (its defaults: 1): the
  // layers the embeddings and the norm + output weigh in the split.
  int first_stage_less_layers = 1;
  int last_stage_less_layers = 1;
};

}  // namespace vramsim
