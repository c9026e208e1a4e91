// Pipeline parallelism as Megatron-LM runs it (megatron/core/pipeline_parallel/schedules.py), and as
// torchtitan runs it on torch.distributed.pipelining: the decoder layers are split over `stages` GPUs
// (Megatron: evenly; torchtitan: generate_llm_fqn_per_model_part, which counts the embeddings and the output
// as layers and gives the first stages of the remainder one layer more), the first stage also runs the
// embeddings and the last the final norm, the output layer and the loss. A step's micro-batches flow through
// the stages; what one stage's GPU holds depends on how many micro-batches have run their forward there but
// not yet their backward.
//
//   1F1B (forward_backward_pipelining_without_interleaving; Narayanan et al. 2021, PipeDream-Flush): stage
//     r runs min(stages - r - 1, M) warm-up forwards, then alternates one forward and one backward, then the
//     remaining backwards. At most stages - r micro-batches are in flight on stage r, so the first stage
//     holds the activations of `stages` micro-batches of its layers: as much as one micro-batch through the
//     whole model (Korthikanti et al. 2022, Section 4.2.3).
//   interleaved (forward_backward_pipelining_with_interleaving; Narayanan et al. 2021, Section 2.2): each GPU
//     holds `virtual_stages` model chunks of layers / (stages * virtual_stages) layers (chunk c of rank r is
//     virtual stage c * stages + r), runs (stages - r - 1) * 2 + (virtual_stages - 1) * stages warm-up
//     forwards, and the first stage holds L * (1 + (p - 1) / (p * v)) layers' activations.
//     torch.distributed.pipelining's Schedule1F1B and ScheduleInterleaved1F1B (torchtitan) keep the same
//     number of micro-batches in flight per stage.
//   gpipe (torch.distributed.pipelining ScheduleGPipe; Huang et al. 2019): every micro-batch's forward, then
//     every backward: each stage holds the activations of all M micro-batches.
//
// Between stages, a forward sends the hidden states (b, s, h) to the next stage, which receives them into a
// fresh tensor that requires grad; the backward sends that tensor's gradient back. Megatron frees the sent
// output's data right after the send (deallocate_output_tensor), keeping only its autograd node.
#pragma once

#include <string_view>
#include <vector>

#include "sim/training/training_options.h"

namespace vramsim {

// A contiguous run of decoder layers one GPU executes as one model chunk.
struct PipelineChunk {
  int first_layer = 0;
  int layers = 0;
  bool embeddings = false;  // virtual stage 0: the embeddings run before the layers
  bool head = false;        // the last virtual stage: final norm, output layer and loss after them
};

// The decoder layers of each virtual stage (stage order), as options.split deals them. Throws InputError
// naming the option where the framework refuses the split (Megatron: num_layers % (pipeline size * virtual
// size) != 0; torchtitan: its ValueErrors, quoted).
std::vector<int> layers_per_virtual_stage(int n_layers, const PipelineOptions& options);

// The chunks of `options.stage`'s GPU, in chunk order (throws as layers_per_virtual_stage).
std::vector<PipelineChunk> pipeline_chunks(int n_layers, const PipelineOptions& options);

struct PipelineAction {
  bool forward = true;
  int chunk = 0;        // index into pipeline_chunks()
  int micro_batch = 0;  // 0-based, within the step
};

// The order in which `options.stage` runs the forwards and backwards of one step of `micro_batches`.
std::vector<PipelineAction> pipeline_schedule(const PipelineOptions& options, int micro_batches);

// Whether the stages run on torch.distributed.pipelining as torchtitan uses it (--pp-split torchtitan), whose
// PipelineStage, as of PyTorch 2024-12 (torchtitan's 2024-12 benchmarks), keeps per micro-batch: a receive
// buffer of the input and one of the output's gradient, made once at the first step; every forward's output
// (fwd_cache and output_chunks) and the input's gradient (the receive buffer's .grad) until the next step's
// clear_runtime_states; and, on the last stage, concatenates every micro-batch's output at the end of the
// step (_merge_outputs). Megatron's runtime (--pp-split megatron) frees the sent outputs' data at once
// (deallocate_output_tensor) and makes each received tensor fresh.
inline bool runs_torch_pipelining(const PipelineOptions& options) {
  return options.split == PipelineSplit::kTorchtitan;
}

// Throws InputError("--pp...: ...") for layouts Megatron refuses (see the .cpp).
void validate(const PipelineOptions& options, int micro_batches);

PipelineSchedule parse_pipeline_schedule(std::string_view text, std::string_view option = "--pp-schedule");
std::string_view pipeline_schedule_name(PipelineSchedule s);
PipelineSplit parse_pipeline_split(std::string_view text, std::string_view option = "--pp-split");
std::string_view pipeline_split_name(PipelineSplit s);

}  // namespace vramsim
