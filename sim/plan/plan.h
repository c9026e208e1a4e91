// `vramsim plan`: given a model, GPUs and a global batch, the configuration to run. It tries the memory
// levers in the order of their cost in speed (mixed precision, micro-batch with gradient accumulation,
// activation checkpointing, the ZeRO stage or FSDP2, the parallel layout (tensor parallel within a node,
// then pipeline stages), an 8-bit optimizer, LoRA/QLoRA, offload; torch.compile where allowed), predicts
// every combination the flags allow with the step simulator (memory through the allocator model, step time
// from the engine's roofline), and reports the fastest that fits with the margin, the decision path in the
// levers' order, and the Pareto front of memory against estimated tokens/s.
//
// Pruning needs no simulation of what it prunes, and a family (the groups that differ only in checkpointing
// and offload, plan_grid.h) is searched on one thread and in one shard, so shards stay independent. Memory
// rules skip only what cannot fit: a layout whose model states alone (a lower bound: parameters, gradients
// and optimizer states per rank under its sharding and layout, model_states_lower_bound()) are over the
// limit is not predicted; memory is monotone in the micro-batch, so a bisection finds each layout's largest
// micro-batch that fits and the larger ones are skipped. Speed rules skip only what cannot be the fastest
// (Note [Bounds on speed], plan_search.cpp): the smaller micro-batches of a layout whose larger one fits, and
// every configuration whose bound on tokens/s is below the fastest fitting one found so far. The layout rule
// is a choice of the search, not a bound: once a layout fits, the larger layouts of the group are not tried,
// though they may fit (the simulator gives their communication no time, so their speed would be an
// artefact; Narayanan et al. 2021, Takeaway #2). --exhaustive predicts every configuration but the layout
// rule's (the reference the bounds are checked against, test_plan_search.cpp). Configurations are predicted
// on `threads` threads; the result depends neither on their number nor on --shard. A configuration the
// simulator refuses (an InputError: LoRA on code that has no nn.Linear, ...) is reported and the search
// goes on.
//
// Note [Parallel layouts]: a layout is (tp, pp), with data-parallel degree gpus / (tp x pp) and the global
// batch divided over that. Tensor parallelism goes up to the node (--gpus-per-node) before any pipeline
// stage is added, as Narayanan et al. 2021 (Megatron-LM at scale, Takeaway #1) recommend, so the layouts
// are tp = 1, 2, 4, ... up to the largest degree that divides the GPUs, the attention heads, the key/value
// heads (Megatron's divide(num_query_groups, tp) in megatron/core/transformer/attention.py: predict's
// replication of fewer key/value heads than ranks is not offered), the MLP and the sequence, then that tp
// with pp = each divisor of the layers and of gpus / tp; tp > 1 always runs Megatron's sequence parallelism
// (torchtitan and Megatron's recipes do). Pipeline layouts use ZeRO-0/1 or FSDP2 only (DeepSpeed's
// PipelineEngine asserts ZeRO stage < 2); LoRA/QLoRA are not combined with tp/pp (predict refuses them), a
// compiled configuration with tp/pp compiles each decoder layer (--compile-scope layer, as torchtitan does),
// and a model with mixture-of-experts layers or code that is not transformers' gets no tp/pp layout
// (predict's sequence parallelism and pipeline split need transformers' code without experts). A model with
// experts gets expert-parallel layouts instead: ep = 2, 4, ... dividing the GPUs and the experts, in the
// FSDP2 groups in bf16 (torchtitan's expert parallelism, which predict models over FSDP2 with fp32 shards:
// sim/parallel/fsdp2.cpp); the data-parallel degree stays gpus (the expert-parallel ranks are data-parallel
// ranks). With --allow cp a dense model of transformers' code also gets context-parallel layouts, cp = 2, 4,
// ... dividing the GPUs with 2 x cp dividing the sequence, in the FSDP2 groups in bf16 without QLoRA or
// offload (torchtitan's context_parallel, which predict's --cp models; with LoRA as torchtune's
// lora_finetune_distributed runs it with context_parallel_dim): a context-parallel group shares its
// sequences, so the batch is divided over gpus / cp replicas, while FSDP2 shards the model states over all
// the GPUs (sharding_degree()). They come after (1, 1) and before tensor parallelism, because per decoder
// layer they move less: the key/value all-gather carries 2 x kv_heads x head_dim values a token (2,048 for
// Llama-3-8B), once in the forward and once more in the backward, which torch's ring attention can overlap
// with the local chunk's attention, where Megatron's sequence parallelism moves the hidden size (4,096) four
// times in the forward (all-gather and reduce-scatter around attention and MLP) and again in the backward, on
// the critical path. Last come context parallelism inside each tensor-parallel degree (tp, cp), torchtitan's
// layout for the longest sequences (its Table 6 runs CP inside TP 8 x PP 8): tp x cp dividing the GPUs, 2 x
// cp the sequence and tp the rank's seq / cp tokens; then inside each pipeline layout (tp, pp, cp) with the
// pipeline layouts' tp (the largest, 1 when the heads do not split), tp x pp x cp dividing the GPUs; they are
// tried only where no layout before them fits.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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
  // Levers beyond the default ones: "lora", "qlora", "offload", "compile", "cp", "float8".
  std::vector<std::string> allow;
  int gpus_per_node = 8;  // the largest tensor-parallel degree (tensor parallelism stays within a node)
  int threads = 0;        // 0: the machine's cores
  // --shard K/N: this run predicts the grid's groups g with g % shards == shard (K - 1) and, in shard 0, the
  // decision path; merge_plan_shards() puts the shards' parts together into the result of one run.
  int shard = 0;
  int shards = 1;
  // Predict every configuration of the grid (only the layout rule skips any): no bound, slow; the reference
  // the bounded search is checked against.
  bool exhaustive = false;
  // true: PlanResult::grid is every configuration of the grid (--csv, --shard, the tests). false: only those
  // the report prints (the best, the ties, the Pareto front), and the search keeps one family's
  // configurations at a time per thread, so the plan's memory does not grow with the grid (Note [Streaming
  // the grid], plan_search.cpp). The report is the same either way. With shards > 1 the grid is kept
  // regardless.
  bool keep_grid = true;
};

// One configuration: the settings the levers choose.
struct PlanConfig {
  std::string precision = "amp-bf16";
  std::int64_t micro_batch = 1;
  int grad_accumulation = 1;
  std::string checkpointing = "none";
  int zero = 0;      // ZeRO stage with gpus > 1 (0: DDP, or FSDP when `fsdp` is set)
  std::string fsdp;  // "": none; "fsdp2": FSDP2 full shard (fully_shard per decoder layer and the root)
  int tp = 1;        // tensor-parallel degree (Megatron, with sequence parallelism when > 1)
  int pp = 1;        // pipeline stages (Megatron's 1F1B schedule)
  int ep = 1;        // expert parallelism (torchtitan's MoE over FSDP2) for a model with experts
  int cp = 1;        // context parallelism (torchtitan's context_parallel over FSDP2), with --allow cp
  std::string optimizer = "adamw";
  std::string adapters;  // "", "lora", "qlora"
  // "", "optimizer" (ZeRO-Offload), "params" (FSDP's CPUOffload: parameters, gradients and optimizer),
  // "activations"
  std::string offload;
  bool compile = false;
  // torchao float8 training (predict's --float8) with --allow float8 (Note [The float8 lever],
  // plan_grid.cpp): "" (none), "tensorwise" or "rowwise"; float8_all_gather: torchao's
  // enable_fsdp_float8_all_gather (tensorwise under FSDP2, predict's --float8-all-gather)
  std::string float8;
  bool float8_all_gather = false;
};

struct PlanEvaluation {
  PlanConfig config;
  bool in_shard = true;    // false: another shard predicts it
  bool evaluated = false;  // false: not predicted, for the reason `skipped` gives
  // Why an entry of this shard was not predicted: "model states" (alone over the limit), "micro-batch" (a
  // smaller micro-batch of the same settings and layout did not fit), "layout" (a smaller parallel layout of
  // the same settings fits), "throughput" (it cannot be the fastest that fits: a larger micro-batch of the
  // same settings fits, or a bound on its tokens/s is below a configuration found to fit)
  std::string skipped;
  std::string error;  // the simulator refused the configuration
  // > 0: predicted with this many micro-batches per step instead of grad_accumulation, which did not fit
  // (Note [Probing with fewer micro-batches], plan.cpp); the figures are a lower bound of the configuration's
  int probe_micro_batches = 0;
  bool fits = false;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t needed_bytes = 0;    // peak reserved + CUDA context
  std::int64_t headroom_bytes = 0;  // limit - needed
  double tokens_per_s = 0.0;
  // model_states_lower_bound() of the configuration; the group was not predicted when it is over the limit
  std::int64_t model_states_bytes = 0;
  // Set by finish_plan(): it fits, is not the best, and its estimated step time is within the time model's
  // error of the best one's (time_model_error.h): the model cannot tell which of the two is faster.
  bool tied_with_best = false;
};

struct PlanStep {
  std::string lever;    // "baseline", "mixed precision", "micro-batch", ...
  std::string setting;  // what the step set
  PlanEvaluation result;
};

struct PlanResult {
  std::int64_t total_bytes = 0;  // the GPU's memory
  std::int64_t limit_bytes = 0;  // (1 - margin) x total
  // every configuration of the grid, in enumeration order; with PlanRequest::keep_grid false only those that
  // best, tied and pareto name, in grid order
  std::vector<PlanEvaluation> grid;
  std::optional<std::size_t> best;  // index into grid
  std::vector<PlanStep> decision_path;
  std::vector<std::size_t> pareto;  // indices into grid, by peak reserved
  // The time model's relative error the ties are judged by (kTimeModelRelativeError), and the configurations
  // tied with the best (indices into grid, in grid order; PlanEvaluation::tied_with_best).
  double time_model_error = 0.0;
  std::vector<std::size_t> tied;
  int configurations_evaluated = 0;  // predictions run (grid and decision path)
  int configurations_pruned = 0;     // not predicted, for the reasons below
  int pruned_model_states = 0;       // of those: their model states alone are over the limit
  int pruned_micro_batch = 0;        // a smaller micro-batch of the same settings did not fit
  int pruned_layout = 0;             // a smaller parallel layout of the same settings fits
  int pruned_throughput = 0;         // cannot be the fastest (Note [Bounds on speed], plan_search.cpp)
  int errors = 0;
};

// Called as grid entries are finished (predicted or skipped), one call at a time (under a lock); `done`
// counts the entries finished so far and reaches `total` once.
using PlanProgress = std::function<void(int done, int total)>;

// The progress line `vramsim plan` redraws on a terminal (stderr): a bar of `width` cells filled in
// proportion to done / total, the counts, the seconds since the start and, once something is done, the
// estimated seconds left at the rate so far. E.g. "plan [#######.............] 128 / 550 configurations,
// 12.3 s, about 40 s left". No carriage return or newline: the caller positions it.
std::string plan_progress_line(int done, int total, double elapsed_s, int width = 20);

// Throws InputError for bad requests (no GPU, a global batch the GPUs do not divide, an unknown lever).
PlanResult plan(const PlanRequest& request, const PlanProgress& progress = nullptr);

// The counts, the best configuration, the configurations tied with it within the time model's error and the
// Pareto front of a result whose grid and decision path are complete.
void finish_plan(PlanResult& result);

// One shard's part (its grid entries, and the decision path in shard 0) as JSON, for merge_plan_shards().
std::string plan_shard_json(const PlanRequest& request, const PlanResult& result);
// Every shard's part of one plan (`parts`, parsed from the files `names`, in any order) merged into the
// result a single run gives, byte for byte. Throws InputError naming the file when the shards do not belong
// together or a figure is not one a plan writes (a negative, fractional or oversized size or count).
PlanResult merge_plan_shards(const std::vector<nlohmann::json>& parts, const std::vector<std::string>& names,
                             PlanRequest& request);

// The data-parallel degree of `config`, the replicas the global batch is divided over: gpus / (tp x pp x cp)
// (the ranks of a context-parallel group share their sequences).
int data_parallel_degree(const PlanRequest& request, const PlanConfig& config);
// The ranks the data-parallel scheme shards the model states over: gpus / (tp x pp). Under context
// parallelism FSDP2 shards over the data-parallel and context-parallel ranks together (torchtitan's
// `dp_shard_cp` mesh: parallelize_llama.py applies fully_shard over world_mesh["dp_shard_cp"]).
int sharding_degree(const PlanRequest& request, const PlanConfig& config);

// The parallel layouts (tp, pp) the grid tries, in the lever's order (Note [Parallel layouts]): (1, 1), then
// tp = 2, 4, ... up to min(gpus_per_node, gpus) while tp divides the GPUs, the attention heads, the key/value
// heads, the MLP and the sequence, then the largest such tp with pp = each divisor > 1 of gpus / tp that
// divides the layers. Only (1, 1) for code that is not transformers' or a mixture-of-experts model.
std::vector<std::pair<int, int>> parallel_layouts(const PlanRequest& request);
// The expert-parallel degrees the grid tries for a model with mixture-of-experts layers (Note [Parallel
// layouts]): 2, 4, ... while each divides the GPUs and the experts; none for a dense model.
std::vector<int> expert_parallel_layouts(const PlanRequest& request);
// The context-parallel degrees the grid tries alone (tp = pp = 1) with --allow cp for a dense model of
// transformers' code (Note [Parallel layouts]): 2, 4, ... while each divides the GPUs and 2 x cp divides the
// sequence; none otherwise. The grid also tries cp inside each tensor-parallel degree (tp x cp dividing the
// GPUs, and tp the rank's seq / cp tokens) and inside each pipeline layout (tp x pp x cp dividing the GPUs).
std::vector<int> context_parallel_layouts(const PlanRequest& request);

// Whether float8 training runs on the request's GPU: compute capability 8.9 or later (Ada, Hopper and
// newer) and an FP8 tensor-core path in the GPU table. torchtitan's Float8Converter checks
// has_cuda_capability(8, 9) and otherwise warns "Failed to swap to Float8Linear because float8 is only
// supported on SM89 or later" and trains without float8 (torchtitan/components/quantization/float8.py), so
// --allow float8 adds nothing on an older GPU. On ROCm torch reports the gfx target's major.minor (9.0 for
// MI250X) but torch._scaled_mm refuses all but MI300+ ("torch._scaled_mm is only supported on CUDA devices
// with compute capability >= 9.0 or 8.9, or ROCm MI300+", aten/src/ATen/native/cuda/Blas.cpp), the
// GPUs whose row has FP8 FLOP/s.
bool float8_supported(const PlanRequest& request);

// The `vramsim predict` options of `config` (what predict_command() prints, as RequestArgs).
RequestArgs predict_args(const PlanRequest& request, const PlanConfig& config);

// What every rank of `config` holds at least, in bytes, once the optimizer states exist: its parameters,
// gradients and optimizer states (the worst pipeline stage holds at least 1/pp of a tensor-parallel rank's
// parameters), sharded as the scheme shards them over the data-parallel ranks: DDP p + g + o, ZeRO-1
// p + g + o/N, ZeRO-2 p + (g + o)/N, ZeRO-3 and FSDP (p + g + o)/N; bytes per parameter p = g = 4 (fp32,
// amp-bf16) or 2 (bf16), o = 8 (AdamW's two fp32 moments; + 4 fp32 master weights with bf16) or 2
// (adamw-8bit's two uint8 moments, no master weights). All of them are live together at the end of the
// second step's backward. 0 (no bound) with adapters or offload.
std::int64_t model_states_lower_bound(const PlanRequest& request, const PlanConfig& config);

// The `vramsim predict` command line of `config`.
std::string predict_command(const PlanRequest& request, const PlanConfig& config);
// The same settings for Hugging Face's Trainer (TrainingArguments, PEFT, bitsandbytes, DeepSpeed JSON, FSDP);
// a parallel layout is not a Trainer setting: torchtitan's (and Megatron-LM's) flags instead.
std::string trainer_settings(const PlanRequest& request, const PlanConfig& config);
// One line: "amp-bf16, micro-batch 2 x 4 accumulation, checkpointing full, FSDP2, TP 8 + SP, adamw-8bit".
std::string describe(const PlanConfig& config);

}  // namespace vramsim
