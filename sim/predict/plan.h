// `vramsim plan`: given a model, GPUs and a global batch, the configuration to run. It tries the memory
// levers in the order of their cost in speed (mixed precision, micro-batch with gradient accumulation,
// activation checkpointing, the ZeRO stage, an 8-bit optimizer, LoRA/QLoRA, offload; torch.compile where
// allowed), predicts every combination the flags allow with the step simulator (memory through the
// allocator model, step time from the engine's roofline), and reports the fastest that fits with the margin,
// the decision path in the levers' order, and the Pareto front of memory against estimated tokens/s.
//
// Pruning: within one setting of every other lever, memory is monotone in the micro-batch, so the
// micro-batches are predicted smallest first and the larger ones skipped once one does not fit.
// Configurations are predicted on `threads` threads; the result does not depend on their number. A
// configuration the simulator refuses (an InputError: LoRA on code that has no nn.Linear, ...) is reported
// and the search goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/predict/step_prediction.h"

namespace vramsim {

struct PlanRequest {
  std::string model;
  std::string model_code;  // "" = the preset's
  std::string gpu;         // required: the step time needs the GPU
  std::string attention;   // "" = the code's default
  int gpus = 1;            // data-parallel ranks
  std::int64_t global_batch = 0;
  std::int64_t seq = 0;
  double margin = 0.10;
  // Levers beyond the default ones: "lora", "qlora", "offload", "compile".
  std::vector<std::string> allow;
  int threads = 0;  // 0: the machine's cores
  // --shard K/N: this run predicts the grid's groups g with g % shards == shard (K - 1) and, in shard 0, the
  // decision path; merge_plan_shards() puts the shards' parts together into the result of one run.
  int shard = 0;
  int shards = 1;
};

// One configuration: the settings the levers choose.
struct PlanConfig {
  std::string precision = "amp-bf16";
  std::int64_t micro_batch = 1;
  int grad_accumulation = 1;
  std::string checkpointing = "none";
  int zero = 0;  // ZeRO stage with gpus > 1 (0: DDP)
  std::string optimizer = "adamw";
  std::string adapters;  // "", "lora", "qlora"
  std::string offload;   // "", "optimizer", "activations"
  bool compile = false;
};

struct PlanEvaluation {
  PlanConfig config;
  bool in_shard = true;    // false: another shard predicts it
  bool evaluated = false;  // false: pruned (a smaller micro-batch of the same settings did not fit)
  std::string error;       // the simulator refused the configuration
  bool fits = false;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t needed_bytes = 0;    // peak reserved + CUDA context
  std::int64_t headroom_bytes = 0;  // limit - needed
  double tokens_per_s = 0.0;
};

struct PlanStep {
  std::string lever;    // "baseline", "mixed precision", "micro-batch", ...
  std::string setting;  // what the step set
  PlanEvaluation result;
};

struct PlanResult {
  std::int64_t total_bytes = 0;      // the GPU's memory
  std::int64_t limit_bytes = 0;      // (1 - margin) x total
  std::vector<PlanEvaluation> grid;  // every configuration of the grid, in enumeration order
  std::optional<std::size_t> best;   // index into grid
  std::vector<PlanStep> decision_path;
  std::vector<std::size_t> pareto;   // indices into grid, by peak reserved
  int configurations_evaluated = 0;  // predictions run (grid and decision path)
  int configurations_pruned = 0;
  int errors = 0;
};

using PlanProgress = std::function<void(int done, int total)>;

// Throws InputError for bad requests (no GPU, a global batch the GPUs do not divide, an unknown lever).
PlanResult plan(const PlanRequest& request, const PlanProgress& progress = nullptr);

// The counts, the best configuration and the Pareto front of a result whose grid and decision path are
// complete.
void finish_plan(PlanResult& result);

// One shard's part (its grid entries, and the decision path in shard 0) as JSON, for merge_plan_shards().
std::string plan_shard_json(const PlanRequest& request, const PlanResult& result);
// Every shard's part of one plan (`texts`, read from the files `names`, in any order) merged into the result
// a single run gives, byte for byte. Throws InputError naming the file when the shards do not belong
// together.
PlanResult merge_plan_shards(const std::vector<std::string>& texts, const std::vector<std::string>& names,
                             PlanRequest& request);

// The `vramsim predict` command line of `config`.
std::string predict_command(const PlanRequest& request, const PlanConfig& config);
// The same settings for Hugging Face's Trainer (TrainingArguments, PEFT, bitsandbytes, DeepSpeed JSON).
std::string trainer_settings(const PlanRequest& request, const PlanConfig& config);
// One line: "amp-bf16, micro-batch 2 x 4 accumulation, checkpointing full, adamw-8bit".
std::string describe(const PlanConfig& config);

}  // namespace vramsim
