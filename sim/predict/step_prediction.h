// `vramsim predict` / `vramsim fit` as a library, a short pipeline: the op graph of the training steps
// (sim/graph), the allocation schedule the engine dispatches on simulated streams (sim/engine), and the
// caching-allocator model taking it on a device of the GPU's capacity, explained by explain_run()
// (run_report.h): the bill at the peak, phases, per-step peaks, verdict.
//
// Which number is which (every one observed on the allocator model, after each event):
//   * "allocated" = the allocator's allocated_bytes (blocks rounded to 512 B / power-of-two divisions, and
//     unsplit remainders), as torch.cuda.memory_allocated() reports it;
//   * "requested" = the bytes the tensors hold; the bill's categories are in these;
//   * "reserved" = cudaMalloc'ed segments, as torch.cuda.memory_reserved().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/torch_version.h"
#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/inference/vllm_lora.h"
#include "sim/models/model_config.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/nccl_groups.h"
#include "sim/predict/step_timeline.h"
#include "sim/serving/non_torch_memory.h"
#include "sim/training/training_options.h"
#include "traces/snapshot.h"

namespace vramsim {

// vLLM engine arguments that size its paged KV cache (--kv-cache paged; sim/inference/vllm_paged_cache.h).
struct VllmServing {
  // --vllm-version: "v1" (the V1 engine's start-up, sim/inference/vllm_v1_startup.h; the default) or "v0"
  // (the older engine's profile run through the allocator model, Worker.determine_num_available_blocks).
  std::string version = "v1";
  double gpu_memory_utilization = 0.9;  // CacheConfig's default
  std::int64_t max_model_len = 0;       // 0: the model's trained context (max_position_embeddings)
  // 0: the engine's default: v1 EngineArgs._set_default_args by GPU (vllm_v1_scheduler_defaults); v0
  // max(max_model_len, 2048) (no chunked prefill)
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;        // 0: the engine's default (v1 by GPU; v0 256)
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype auto|fp8|fp8_e4m3|fp8_e5m2 (v1)
  std::string quantization;  // --quantization "" | fp8 | gptq | awq (v1: Fp8LinearMethod, Marlin W4A16)
  // --vllm-non-torch-increase: a measured "non-torch forward increase memory" (v1), replacing the bill's
  std::optional<std::int64_t> non_torch_increase_bytes;
  // --vllm-cudagraph-memory: vLLM 0.21+'s "Estimated CUDA graph memory" (measured there by capturing a few
  // sizes, gpu_model_runner.py), subtracted from the KV cache's memory as 0.21 does by default
  // (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); absent: up to 0.20, graphs are captured after the KV cache
  std::optional<std::int64_t> cudagraph_memory_bytes;
  std::int64_t vocab_size = 0;  // the model's vocabulary before tensor-parallel padding
  bool profile_run = false;     // this prediction is the profile run itself
  // --pp N with --kv-cache paged (v1): vLLM's --pipeline-parallel-size, stages sized by
  // sim/inference/vllm_pipeline_stages.h; --world-size / (tp x pp) engine replicas (--data-parallel-size).
  int pipeline_parallel = 1;
  int data_parallel = 1;
  // --enable-expert-parallel: the MoE layers' ep_size (tp x dp; 1: experts sliced by TP) and the experts of
  // the reported rank (EP rank 0, the most any rank holds) out of the model's (vllm_expert_parallel.h)
  int expert_parallel = 1;
  std::int64_t local_experts = 0;
  std::int64_t global_experts = 0;
  std::string pp_layer_partition;  // --vllm-pp-layer-partition: VLLM_PP_LAYER_PARTITION ("" : unset)
  // --mm-encoder-tp-mode: MultiModalConfig.mm_encoder_tp_mode, how a vision tower uses the TP ranks:
  // "weights" (its default: each layer split like the language model's) or "data" (the tower whole on every
  // rank, the images split among the ranks: run_dp_sharded_mrope_vision_model)
  std::string mm_encoder_tp_mode = "weights";
  // vLLM's --dtype when it is not --precision's name: "float16" for --precision fp16 (sized as bf16: the same
  // two-byte weights, activations and cache; ModelConfig's dtype torch.float16)
  std::string dtype;
  // --serving-engine sglang: SGLang's KV pool (sim/inference/sglang_memory_pool.h) in place of vLLM's
  // start-up;
  // --mem-fraction-static (0: SGLang's default); --sglang-version "0.5" (0.5.3+: the default from the GPU's
  // memory) or "0.4" (by TP size), sglang_memory_pool.h.
  std::string engine = "vllm";
  double mem_fraction_static = 0.0;
  std::string sglang_version = "0.5";
  // --enable-lora, --max-loras, --max-lora-rank, --fully-sharded-loras, --lora-dtype (v1): the adapter
  // slots vLLM's LoRA layers allocate at load (sim/inference/vllm_lora.h)
  VllmLoraOptions lora;
};

struct PredictRequest {
  ModelConfig model;
  TrainingOptions options;
  std::string gpu;           // GPU name for find_gpu(); empty = use capacity_bytes
  Bytes capacity_bytes = 0;  // --capacity: memory for the allocator when no GPU is named (context 0)
  std::optional<std::string> alloc_conf;
  TorchVersion torch_version = kNewestModelledTorch;  // --torch-version: whose allocator rules apply
  ContextOptions context;                             // --module-loading, --cuda-context
  NcclChannels nccl_channels;                         // --nccl-channels, --nccl-p2p-channels
  int tensor_parallel = 1;  // --tp: `model` is already one tensor-parallel rank's (tensor_parallel.h)
  // --pp without --pp-stage: simulate every stage and report the one with the highest peak reserved.
  bool every_pipeline_stage = false;
  TimelineOptions host;     // --host-op-us: the host's time per kernel-launching op
  RooflineConfig roofline;  // --compute-efficiency, --memory-efficiency (Note [Default efficiencies])
  VllmServing vllm;         // with --kv-cache paged
  bool keep_timeline =
      false;  // --perfetto: keep the ops' times and the memory over time (Prediction::timeline)
};

struct LiveTensor {
  std::string name;
  TensorCategory category = TensorCategory::kTemporary;
  int layer = -1;
  Bytes size_bytes = 0;
};

// Requested bytes per category live at the event where allocated memory peaks, plus what lies beyond them.
struct MemoryBill {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_states = 0;
  std::int64_t activations = 0;         // saved for backward
  std::int64_t temporaries = 0;         // transient tensors and library workspaces
  std::int64_t workspace = 0;           // the part of `temporaries` that is workspace (cuBLAS)
  std::int64_t inputs = 0;              // the token batch
  std::int64_t communication = 0;       // data-parallel buffers (buckets, gathered parameters)
  std::int64_t kv_cache = 0;            // model.generate()'s KV cache
  std::int64_t allocator_rounding = 0;  // allocated - requested at that event (block rounding)
  std::int64_t allocator_overhead = 0;  // peak reserved - peak allocated (cached, split, rounded-up segments)
  std::int64_t cuda_context = 0;        // outside the allocator
  std::int64_t nccl = 0;                // NCCL communicators' buffers, outside the allocator (nccl_groups.h)
};

struct PhaseBytes {  // allocated bytes at the phase boundaries of the last simulated step
  std::optional<std::int64_t> before_forward;
  std::optional<std::int64_t> after_forward;
  std::optional<std::int64_t> after_backward;
  std::optional<std::int64_t> after_optimizer_step;
};

struct StepPeak {
  int step = 0;
  std::int64_t peak_allocated_bytes = 0;  // within the step (allocator model)
  std::int64_t peak_requested_bytes = 0;  // within the step (tensor bytes)
  std::int64_t peak_reserved_bytes = 0;   // within the step (allocator model)
};

// The time axis (step_timeline.h): roofline estimates on the named GPU, not measurements.
struct StepTiming {
  int step = 0;
  std::int64_t time_ns = 0;     // first kernel start to last kernel end
  std::int64_t compute_ns = 0;  // in ops limited by arithmetic
  std::int64_t memory_ns = 0;   // in ops limited by DRAM bandwidth
  std::size_t kernels = 0;
};
struct TimingEstimate {
  std::vector<StepTiming> steps;
  std::int64_t tokens_per_step = 0;  // batch * seq * micro-batches
  double tokens_per_s = 0.0;         // of the last simulated step (steady state)
};

struct PredictedTimeline;  // perfetto_trace.h

struct Prediction {
  std::string model_name;
  std::string data_parallel = "none";      // the scheme's registry name (data_parallel.h)
  int world_size = 1;                      // of the data-parallel group
  bool zero_redundancy_optimizer = false;  // DDP with ZeroRedundancyOptimizer (rank 0's partition stepped)
  std::vector<std::string> offload;        // what lives on the host: "optimizer", "params", "activations"
  std::string activation_offload;          // with "activations": "save-on-cpu" or "torchtune"
  int tensor_parallel = 1;
  int pipeline_stage_simulated = 0;  // options.pipeline.stage of this simulation
  bool sequence_parallel = false;
  // PEFT LoRA (rank 0: none): the adapted modules and the trainable and total parameter counts.
  int lora_rank = 0;
  std::vector<std::string> lora_targets;  // {"all-linear"} for all-linear
  std::string peft_method;                // PEFT's peft_type as --peft-method spells it ("" without PEFT)
  std::int64_t trainable_parameters = 0;
  // bitsandbytes' paged optimizer states in CUDA unified memory: outside the caching allocator (not in the
  // peaks, the bill or the verdict); the driver evicts them to the host when the GPU needs the room.
  std::int64_t paged_optimizer_state_bytes = 0;
  // Offloading's CPU memory on one rank (not in any GPU figure) and the ranks sharing a node's RAM.
  HostMemory host_memory;
  int gpus_per_node = 1;  // min(--gpus-per-node, world size)
  // bitsandbytes base weights ("" when not quantized: nf4, fp4, int8) and their BitsAndBytesConfig.
  std::string base_weights;
  bool bnb_double_quant = false;
  std::string bnb_compute_dtype;  // torch's dtype name
  bool bnb_prepare_kbit_training = false;
  bool bnb_saves_input = false;  // MatMul4Bit keeps A (older bitsandbytes)
  std::int64_t total_parameters = 0;
  // A multimodal checkpoint's vision part (model_config.h): simulated for llava (vision_tower.h), with the
  // request's images per sample and whether the tower was frozen; counted only otherwise.
  ModelConfig::VisionPart vision;
  std::int64_t images_per_sample = 0;
  std::int64_t tokens_per_image = 0;  // the image tokens each image becomes (vision_tokens_per_image)
  bool vision_tower_frozen = true;
  std::string attention_asked;   // attention_name() of the requested implementation (default resolved)
  std::string attention_kernel;  // attention_name() of the kernel the run uses (SDPA's backend resolved)
  std::string precision_regime;  // precision_regime(): what is kept in which dtype, master weights or not
  bool compiled_loss = false;    // TrainingOptions::compile_loss as resolved (--compile-loss auto)
  std::string gpu_name;          // "" with --capacity
  std::int64_t total_bytes = 0;  // GPU total (cudaMemGetInfo) or --capacity
  std::int64_t cuda_context_bytes = 0;
  std::string cuda_context_source;  // GpuMemory::context_source
  // The process groups' NCCL communicators (nccl_groups.h), allocated outside the allocator at their first
  // collective or send/recv, before the step's peak; nccl_bytes is the sum of the sized lines.
  std::vector<NcclBillLine> nccl_lines;
  std::int64_t nccl_bytes = 0;
  // total - context: what the allocator may cudaMalloc; less when per_process_memory_fraction is set
  std::int64_t allocator_capacity_bytes = 0;
  double memory_fraction = 0.0;  // --alloc-conf per_process_memory_fraction (0: not set)
  std::size_t ops = 0;
  std::size_t tensors = 0;
  std::size_t requests = 0;  // the allocator requests of the run: allocations and frees

  std::int64_t peak_allocated_bytes = 0;  // on the device (an OOM stops what follows from allocating)
  std::int64_t peak_reserved_bytes = 0;
  // Allocated plus freed blocks still waiting for another stream's event (record_stream): PyTorch's
  // memory_stats()["active_bytes.all.peak"], what torchtitan logs as "peak active".
  std::int64_t peak_active_bytes = 0;
  std::int64_t peak_requested_bytes = 0;
  // Allocated bytes the run needs: the allocator model's peak without the device limit; ==
  // peak_allocated_bytes unless an allocation OOMed.
  std::int64_t peak_allocated_needed_bytes = 0;
  double fragmentation = 0.0;  // 1 - peak active / peak reserved
  std::int64_t num_ooms = 0;

  // Where allocated memory first peaks (without the device limit when the run does not fit).
  std::size_t peak_request_index = 0;
  int peak_step = 0;
  std::string peak_phase = "setup";  // phase_name() of the op's phase (predict) or the traced phase
  std::string peak_op;
  int peak_layer = -1;
  std::vector<LiveTensor> top_tensors;  // the 5 largest live at that event

  MemoryBill bill;
  PhaseBytes phases;
  PhaseBytes phases_requested;  // the same points in requested (tensor) bytes
  int phases_step = 0;
  std::vector<StepPeak> steps;

  std::optional<TimingEstimate> timing;  // absent with --capacity (no GPU to time on)
  // model.generate() (--generate): step 1 is the prefill, steps 2.. decode one token each.
  struct Generation {
    int new_tokens = 0;
    std::int64_t prompt_tokens = 0;
    std::string kv_cache;                   // "dynamic" | "static"
    std::int64_t kv_cache_bytes = 0;        // when the last token was generated
    std::int64_t kv_bytes_per_token = 0;    // one position of one sequence, every layer's keys and values
    StepPeak prefill;                       // step 1
    StepPeak decode;                        // the decode step with the highest allocated peak (step 0: none)
    std::int64_t prefill_time_ns = 0;       // roofline estimates; 0 without a GPU
    std::int64_t decode_time_ns = 0;        // all decode steps
    double decode_tokens_per_s = 0.0;       // batch x decode steps / decode time
    std::vector<std::int64_t> prompt_lens;  // per sequence when they differ (--prompt-len uniform:LO..HI)
    // vLLM's paged cache: how determine_num_available_blocks sized it and what it serves.
    struct Paged {
      std::int64_t block_size = 16;
      std::int64_t block_bytes = 0;  // one block of every layer's keys and values
      std::int64_t num_gpu_blocks = 0;
      double gpu_memory_utilization = 0.9;
      std::int64_t max_model_len = 0;
      std::int64_t max_num_batched_tokens = 0;
      std::int64_t max_num_seqs = 0;
      std::int64_t profile_peak_allocated_bytes = 0;  // allocated_bytes.all.peak of the profile run
      std::int64_t non_torch_bytes = 0;               // the CUDA context
      std::int64_t available_bytes = 0;      // total x utilization - profile peak - non-torch (may be < 0)
      std::int64_t blocks_per_sequence = 0;  // of the longest sequence: ceil((prompt + new - 1) / block_size)
      std::int64_t batch_blocks = 0;         // every sequence of the batch, each its own length
      std::int64_t concurrent_sequences = 0;  // floor(num_gpu_blocks / blocks_per_sequence)
      // Why vLLM's engine would raise at start-up (no blocks; max_model_len above what the blocks hold), or
      // "" when it starts. A refusal makes the prediction not fit.
      std::string refusal;
      // The V1 engine's start-up lines (--vllm-version v1; absent for v0).
      struct V1 {
        int tensor_parallel = 1;
        // --enable-expert-parallel: ep_size (1 without) and this rank's whole experts of the model's
        int expert_parallel = 1;
        std::int64_t local_experts = 0;
        std::int64_t global_experts = 0;
        std::string kv_cache_dtype = "auto";
        std::string quantization;        // "", "fp8", "gptq" or "awq"
        std::int64_t weights_bytes = 0;  // "Model loading took": this rank's weights and buffers
        // --enable-lora: the LoRA layers' adapter slots, part of weights_bytes (vllm_lora.h); 0 without
        std::int64_t lora_slot_bytes = 0;
        std::int64_t lora_layers = 0;  // LoRA layers made on this rank
        std::int64_t lora_max_loras = 0;
        std::int64_t lora_max_rank = 0;
        std::int64_t forward_peak_bytes = 0;      // the dummy forward's widest point over the weights
        std::int64_t sampler_peak_bytes = 0;      // hidden states, logits and the sampler's tensors
        std::int64_t cublas_workspace_bytes = 0;  // the first matmul's workspace (through the allocator)
        // MoE models: the fused-MoE kernel's workspace the WorkspaceManager keeps from the first MoE layer on
        // (vllm_fused_moe_workspace.h); 0 for dense models
        std::int64_t fused_moe_workspace_bytes = 0;
        // A vision-language model's multimodal profile run (vllm_multimodal_budget.h): the encoder budget,
        // the dummy image items, and what the encoder pass and the kept encoder outputs hold.
        struct Encoder {
          std::string modality = "image";
          std::int64_t max_tokens_per_item = 0;    // get_mm_max_tokens_per_item
          std::int64_t encoder_budget = 0;         // "a budget of B tokens"
          std::int64_t items = 0;                  // "profiled with N image items"
          std::int64_t tower_tokens_per_item = 0;  // rows one item is in the vision tower
          std::string tp_mode = "weights";         // mm_encoder_tp_mode (weights | data)
          std::int64_t items_on_rank = 0;          // items this rank runs through the tower (data: its share)
          std::int64_t tower_weights_bytes = 0;    // the tower and projector, in "Model loading took"
          std::int64_t pixel_values_bytes = 0;     // the dummy batch
          std::int64_t tower_layer_bytes = 0;      // the tower's widest layer over every item
          std::int64_t encoder_outputs_bytes = 0;  // kept in encoder_cache under the language model's run
          std::int64_t encoder_pass_bytes = 0;     // pixel_values (+ data's copy) + tower layer
          std::int64_t language_pass_bytes = 0;    // pixel_values + encoder outputs + max(forward, sampler)
          // mm_encoder_tp_mode data: the rank's items' pixel_values, copied (torch.cat), in the encoder pass
          std::int64_t local_pixel_values_bytes = 0;
        };
        std::optional<Encoder> encoder;
        // max(forward, sampler) + cuBLAS workspace + fused-MoE workspace; with an encoder,
        // max(encoder pass, language pass) + the workspaces
        std::int64_t torch_peak_increase_bytes = 0;
        std::int64_t non_torch_increase_bytes = 0;  // communication buffers set up during the profile run
        bool non_torch_measured = false;            // --vllm-non-torch-increase given
        std::vector<NonTorchLine> non_torch_lines;  // the bill (non_torch_memory.h)
        std::int64_t non_kv_cache_bytes = 0;        // weights + torch peak increase + non-torch increase
        std::int64_t requested_bytes = 0;           // total x gpu_memory_utilization
        std::int64_t page_size_bytes = 0;           // one layer's block (AttentionSpec.page_size_bytes)
        // The KV-cache manager's groups (vllm_kv_cache_groups.h): one of every layer for full attention;
        // sliding-window layers beside full ones make several, of layers_per_group layers each.
        bool mla = false;                  // MLAAttentionSpec: one latent a token, not split by TP
        std::int64_t kv_cache_groups = 1;  // len(kv_cache_config.kv_cache_groups)
        std::int64_t full_attention_groups = 1;
        std::int64_t layers_per_group = 0;  // group_size: the pool's tensors
        std::int64_t padding_layers = 0;    // group slots no layer fills
        std::int64_t sliding_window = 0;    // the sliding layers' window (0: none)
        std::int64_t sliding_window_layers = 0;
        std::int64_t attention_chunk_size = 0;  // llama4's chunked local layers' chunk (0: none)
        std::int64_t chunked_attention_layers = 0;
        // One max_model_len request's cache (_max_memory_usage_bytes_from_groups): the "X GiB KV cache is
        // needed" of vLLM's refusal.
        std::int64_t kv_cache_needed_bytes = 0;
        std::int64_t blocks_per_request = 0;       // the same in blocks of the pool (all groups' pages)
        std::int64_t kv_cache_tokens = 0;          // "GPU KV cache size: N tokens"
        double max_concurrency = 0.0;              // "Maximum concurrency for max_model_len tokens"
        std::int64_t estimated_max_model_len = 0;  // vLLM's suggestion when it refuses (0: none)
        // The serving questions: the longest max_model_len whose one request fits this cache (at most the
        // model's max_position_embeddings), and the gpu_memory_utilization one max_model_len request needs.
        std::int64_t largest_max_model_len = 0;
        double min_gpu_memory_utilization = 0.0;
        std::int64_t process_total_bytes = 0;     // context + non-torch + weights + KV cache, before graphs
        std::int64_t cudagraph_memory_bytes = 0;  // --vllm-cudagraph-memory (0: not in the budget)
        std::int64_t before_snapshot_bytes = 0;   // outside torch, before vLLM's snapshot (custom AR)
        std::int64_t context_bytes = 0;           // the CUDA context (cuda_context.h)
        std::int64_t total_bytes = 0;             // the GPU's total memory (torch.cuda.mem_get_info)
        // vLLM 0.21's equivalences (gpu_worker.py): util - graphs / total, util + graphs / total
        double utilization_without_graphs = 0.0;
        double utilization_to_keep_cache = 0.0;
        // Pipeline parallelism: every stage's start-up (one rank of it), and the stage these lines are of:
        // the one with the fewest blocks, whose count get_kv_cache_configs gives every stage.
        std::string dtype;  // vLLM's --dtype when set apart from --precision ("float16")
        int pipeline_parallel = 1;
        int data_parallel = 1;
        int stage = 0;
        std::int64_t stage_layers = 0;        // decoder layers of the stage reported
        std::int64_t intermediate_bytes = 0;  // a later stage's received hidden_states + residual
        struct Stage {
          int stage = 0;
          std::int64_t start_layer = 0;
          std::int64_t end_layer = 0;
          std::int64_t weights_bytes = 0;
          std::int64_t torch_peak_increase_bytes = 0;
          std::int64_t non_torch_increase_bytes = 0;
          std::int64_t available_bytes = 0;
          std::int64_t num_blocks = 0;  // this stage's own count, before the minimum
        };
        std::vector<Stage> stages;  // empty without --pp
      };
      std::optional<V1> v1;
      // SGLang's start-up (--serving-engine sglang), as ModelRunner logs it (sglang_memory_pool.h).
      struct Sglang {
        double mem_fraction_static = 0.0;
        bool default_fraction = false;  // SGLang's default (by TP size in 0.4, from the GPU's memory in 0.5)
        std::string version;            // "0.5" | "0.4" (--sglang-version)
        double reserved_mem_mib = 0.0;  // 0.5's reserved_mem behind its default (0: not used)
        std::int64_t total_gpu_memory_bytes = 0;  // free at init (total - CUDA context)
        std::int64_t weights_bytes = 0;
        std::int64_t available_after_load_bytes = 0;
        std::int64_t rest_bytes = 0;  // available - total x (1 - mem_fraction_static)
        std::int64_t cell_size_bytes = 0;
        std::int64_t max_total_num_tokens = 0;
        std::int64_t k_size_bytes = 0;  // "K size" (= "V size")
        std::int64_t context_len = 0;
        std::int64_t max_running_requests = 0;
      };
      std::optional<Sglang> sglang;
    };
    std::optional<Paged> paged;
  };
  std::optional<Generation> generation;

  // Pipeline parallelism (--pp): the stage reported, and every simulated stage's peaks.
  struct PipelineStagePeak {
    int stage = 0;
    std::int64_t peak_allocated_bytes = 0;
    std::int64_t peak_reserved_bytes = 0;
    bool fits = false;
  };
  struct Pipeline {
    int stages = 1;
    std::string schedule;                       // pipeline_schedule_name()
    std::string split;                          // pipeline_split_name()
    std::vector<int> layers_per_virtual_stage;  // decoder layers of each virtual stage, in stage order
    int virtual_stages = 1;
    int micro_batches = 1;
    int stage = 0;  // the one this prediction describes
    std::vector<PipelineStagePeak> simulated;
  };
  std::optional<Pipeline> pipeline;

  bool fits = false;
  // total - context - peak reserved; after an OOM, total - context - the larger of peak reserved and the
  // allocated bytes needed (negative: at least that much is missing).
  std::int64_t headroom_bytes = 0;
  double headroom_percent = 0.0;  // of total
  // With PredictRequest::keep_timeline (one simulated rank; absent for a pipeline's several stages).
  std::shared_ptr<const PredictedTimeline> timeline;
};

// The options as a user types them (CLI strings); make_request() parses them with the parse_* helpers and
// throws InputError naming the option on a bad value.
struct RequestArgs {
  std::string model;
  std::string model_code;  // "" = the preset's / config's own (layer_code_names(): torch-modules, ...)
  std::string gpu;
  std::string capacity;
  double host_op_us = 10.0;  // --host-op-us: CPU time per eager op that launches kernels
  // --compute-efficiency, --memory-efficiency: the roofline's fractions of peak (roofline.h)
  double compute_efficiency = RooflineConfig{}.compute_efficiency;
  double memory_efficiency = RooflineConfig{}.memory_efficiency;
  std::int64_t batch = 1;
  std::int64_t seq = 128;
  std::string precision = "fp32";
  std::string master_weights;  // --master-weights fp32|none ("": default_master_weights of the layout)
  std::string optimizer = "adamw";
  std::string checkpointing = "none";
  std::string loss = "ce";             // --loss ce|chunked-ce
  int loss_chunks = 8;                 // --loss-chunks: chunked-ce's num_output_chunks
  bool free_logits = false;            // --free-logits-before-backward (torchtitan's `del pred`)
  std::string logits_dtype = "model";  // --logits-dtype model|fp32 (LogitsDtype)
  // --loss-item none|after-backward|after-step (LossItemSync)
  std::string loss_item = "none";
  // "" : the code's own default -- sdpa for torch-modules (transformers' default attn_implementation with
  // PyTorch >= 2.1.1), eager (the code's own attention) for the CS336 codes
  std::string attention;
  std::optional<double> dropout;  // unset: the model's own rates (config.json); set: every site of the model
  int grad_accumulation = 1;
  int steps = 2;
  bool forward_only = false;
  bool inference = false;
  std::string cublas_workspace_config;  // CUBLAS_WORKSPACE_CONFIG as the run would set it ("" = unset)
  std::string module_loading = "lazy";  // --module-loading lazy|eager
  std::string cuda_context;             // --cuda-context SIZE ("" = the GPU table's figure)
  int nccl_channels = 0;                // --nccl-channels N (0: NCCL's public logs for the GPU)
  int nccl_p2p_channels = 0;            // --nccl-p2p-channels M (0: likewise)
  std::string warm = "none";            // --warm none|forward|step
  // --compile / --compile-mode default|reduce-overhead|max-autotune ("" = eager); --compile-scope model|layer
  std::string compile_mode;
  std::string compile_scope = "model";
  // --compile-loss auto|on|off: torchtune's compile_loss of chunked-ce's compute_cross_entropy, torchtitan's
  // compiled loss_fn with ce (auto: on with --compile and --loss chunked-ce, as torchtune's recipes do, and
  // with --compile-scope layer and ce, as torchtitan's build_cross_entropy_loss does)
  std::string compile_loss = "auto";
  std::string zero_grad = "set-to-none";        // --zero-grad set-to-none|zeros
  std::string adam_foreach_denom = "in-place";  // --adam-foreach-denom in-place|out-of-place
  std::string checkpoint_early_stop = "on";     // --checkpoint-early-stop on|off
  std::string checkpoint_impl;                  // --checkpoint-impl reentrant|non-reentrant ("": default)
  // PEFT LoRA: --lora-rank (0: off), --lora-alpha, --lora-dropout, --lora-targets ("": PEFT's default)
  int generate = 0;                  // --generate N: model.generate() of N new tokens (0: no generation)
  std::string kv_cache = "dynamic";  // --kv-cache dynamic|static|paged
  // --prompt-len as typed when it is not a plain number (uniform:LO..HI); "" : every prompt is `seq` tokens
  std::string prompt_len;
  // vLLM's engine arguments with --kv-cache paged: --gpu-memory-utilization, --block-size, --max-model-len,
  // --max-num-batched-tokens, --max-num-seqs (0: vLLM's defaults)
  double gpu_memory_utilization = 0.9;
  std::int64_t block_size = 16;
  std::int64_t max_model_len = 0;
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;
  std::string vllm_version = "v1";      // --vllm-version v1|v0
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype auto|fp8|fp8_e4m3|fp8_e5m2
  std::string quantization;             // --quantization fp8|gptq|awq
  std::string vllm_non_torch_increase;  // --vllm-non-torch-increase SIZE ("" : the bill's)
  std::string vllm_cudagraph_memory;    // --vllm-cudagraph-memory SIZE ("" : captured after the KV cache)
  std::string vllm_pp_layer_partition;  // --vllm-pp-layer-partition "16,16" (VLLM_PP_LAYER_PARTITION)
  std::string serving_engine = "vllm";  // --serving-engine vllm|sglang (with --kv-cache paged)
  double mem_fraction_static = 0.0;     // --mem-fraction-static (SGLang; 0: its default)
  std::string sglang_version = "0.5";   // --sglang-version 0.5|0.4: whose default mem_fraction_static
  // --mm-encoder-tp-mode weights|data: how a vision tower uses the TP ranks (v1, --kv-cache paged)
  std::string mm_encoder_tp_mode = "weights";
  // vLLM's LoRA serving (v1, --kv-cache paged): --enable-lora, --max-loras, --max-lora-rank,
  // --fully-sharded-loras, --lora-dtype
  bool enable_lora = false;
  std::int64_t max_loras = 1;
  // vLLM's --enable-expert-parallel (v1, --kv-cache paged): whole experts over the TP ranks
  // (sim/inference/vllm_expert_parallel.h)
  bool enable_expert_parallel = false;
  std::int64_t max_lora_rank = 16;
  bool fully_sharded_loras = false;
  std::string lora_dtype = "auto";
  int lora_rank = 0;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  std::string lora_targets;
  // The PEFT catalogue (sim/finetune/peft_method.h), in PEFT's option names: --peft-method (lora, ia3,
  // prompt-tuning, p-tuning, loha, lokr, vera, ...), --use-dora, --lora-fa, --num-virtual-tokens,
  // --feedforward-modules (IA3), --encoder-hidden-size, --decompose-factor (LoKr), --autocast-adapter-dtype.
  std::string peft_method = "lora";
  bool use_dora = false;
  bool lora_fa = false;
  int num_virtual_tokens = 0;
  std::string feedforward_modules;
  int encoder_hidden_size = 0;
  int decompose_factor = -1;
  bool autocast_adapter_dtype = true;
  // --init-r (AdaLoRA), --oft-block-size, --use-cayley-neumann, --num-cayley-neumann-terms (OFT),
  // --boft-block-size, --boft-block-num, --boft-n-butterfly-factor (BOFT)
  int init_r = 12;
  int oft_block_size = 0;
  bool use_cayley_neumann = true;
  int num_cayley_neumann_terms = 5;
  int boft_block_size = 0;
  int boft_block_num = 0;
  int boft_n_butterfly_factor = 1;
  std::string token_indices;       // --token-indices 128000,128001 (TrainableTokensConfig.token_indices)
  bool prefix_projection = false;  // --prefix-projection (PrefixTuningConfig.prefix_projection)
  // bitsandbytes: --base-weights ("": the --precision dtype), --bnb-double-quant, --bnb-compute-dtype,
  // --no-prepare-kbit (skip PEFT's prepare_model_for_kbit_training fp32 cast)
  std::string base_weights;
  bool bnb_double_quant = false;
  std::string bnb_compute_dtype = "fp32";
  bool no_prepare_kbit = false;
  bool bnb_saves_input = false;             // --bnb-saves-input: MatMul4Bit keeps A (older bitsandbytes)
  std::string bnb_quant_storage = "uint8";  // --bnb-quant-storage uint8|bf16|fp16|fp32
  // FSDP1 with LoRA: --fsdp-auto-wrap peft|transformer, --fsdp-use-orig-params true|false
  std::string fsdp_auto_wrap = "peft";
  std::string fsdp_use_orig_params = "true";
  bool fsdp_sync_module_states = false;  // --fsdp-sync-module-states
  // Data parallelism: --world-size (--gpus) ranks; --zero 0..3 (0: DDP) or --fsdp STRATEGY; DDP when
  // neither is given and world_size > 1.
  int world_size = 1;
  // --dp: the data-parallel degree (Megatron's data-parallel size, torchtitan's data_parallel_shard_degree):
  // the GPUs are dp x cp x tp x pp; with --gpus too, the two must agree.
  std::optional<int> dp;
  int tp = 1;  // --tp: Megatron tensor parallelism; the data-parallel group is world_size / (tp * pp)
  // --pp: pipeline stages; --pp-schedule 1f1b|interleaved|gpipe with --virtual-stages chunks per GPU;
  // --pp-split megatron|torchtitan with torchtitan's --pp-first/last-stage-less-layers;
  // --pp-stage: the stage to report (unset: every stage is simulated and the highest peak reported).
  bool sequence_parallel = false;  // --sequence-parallel: Megatron's, with --tp
  bool loss_parallel = false;      // --loss-parallel: torch.distributed.tensor.parallel.loss_parallel()
  // torchao float8 (--float8 none|tensorwise|rowwise, --float8-all-gather) and context parallelism (--cp N
  // of the data-parallel ranks, --cp-rotate-method allgather|alltoall)
  std::string float8 = "none";
  bool float8_all_gather = false;
  int fp8_amax_history_len = 1024;  // --fp8-amax-history-len (Transformer Engine's DelayedScaling)
  bool fp8_weight_cache = false;    // --fp8-weight-cache (te.Linear's is_first_microbatch workspaces)
  int cp = 1;
  std::string cp_rotate = "allgather";
  // A vision-language model's images (vision_tower.h): --images-per-sample, --image-size N or HxW (0: the
  // vision_config's), --image-min-pixels / --image-max-pixels (qwen2_vl's smart_resize bounds; 0: the
  // image processor's defaults), --freeze-vision-tower true|false
  std::int64_t images_per_sample = 1;
  std::string image_size = "0";  // N or HxW
  std::int64_t image_min_pixels = 0;
  std::int64_t image_max_pixels = 0;
  std::string freeze_vision_tower = "true";
  // Mixture-of-experts (expert_parallel.h): --moe-impl transformers|megatron (empty: megatron with --ep > 1),
  // --ep N (Megatron's --expert-model-parallel-size), the routing model --moe-imbalance F, and Megatron's
  // --moe-capacity-factor / --moe-pad-to-capacity.
  std::string moe_impl;
  int ep = 1;
  // --expert-tensor-parallel: Megatron's --expert-tensor-parallel-size (unset: --tp, as arguments.py sets it)
  std::optional<int> etp;
  double moe_imbalance = 1.0;
  double moe_capacity_factor = 0.0;
  bool moe_pad_to_capacity = false;
  int pp = 1;
  std::string pp_schedule = "1f1b";
  int virtual_stages = 2;
  std::string pp_split = "megatron";
  int pp_first_stage_less_layers = 1;
  int pp_last_stage_less_layers = 1;
  std::optional<int> pp_stage;
  std::optional<int> zero;
  std::string fsdp;
  bool fsdp2 = false;        // --fsdp2: fully_shard (FSDP2) with --fsdp's strategy (default full-shard)
  std::string reduce_dtype;  // --reduce-dtype: fp32|bf16|fp16, FSDP's reduce_dtype ("": the gradients')
  std::string fsdp2_copy_in = "compute";            // --fsdp2-copy-in compute|reduce-scatter
  std::string fsdp2_last_layer = "reshard";         // --fsdp2-last-layer reshard|keep
  bool no_limit_all_gathers = false;                // --no-limit-all-gathers: FSDP1's limit_all_gathers=False
  std::optional<double> bucket_cap_mb;              // DDP's bucket_cap_mb
  bool gradient_as_bucket_view = false;             // DDP's gradient_as_bucket_view
  std::optional<double> reduce_bucket_size;         // DeepSpeed's reduce_bucket_size (elements)
  std::optional<double> stage3_max_reuse_distance;  // DeepSpeed ZeRO-3's (elements)
  std::optional<double> stage3_prefetch_bucket_size;  // DeepSpeed ZeRO-3's (elements)
  std::optional<double> stage3_max_live_parameters;   // DeepSpeed ZeRO-3's (elements)
  bool overlap_comm = false;                          // DeepSpeed's overlap_comm
  int gpus_per_node = 8;                              // FSDP hybrid-shard's shard group
  std::string offload;                                // --offload optimizer|params|activations (any subset)
  std::string activation_offload = "save-on-cpu";     // --activation-offload save-on-cpu|torchtune
  bool optimizer_in_backward = false;      // --optimizer-in-backward (torchtune's optimizer_in_bwd)
  bool zero_redundancy_optimizer = false;  // --zero-redundancy-optimizer (with DDP)
  // DDP's find_unused_parameters / static_graph: accepted; they change no allocation vramsim models
  // (request_args.cpp)
  bool find_unused_parameters = false;
  bool static_graph = false;
  std::optional<std::string> alloc_conf;
  std::string torch_version;  // --torch-version X.Y; "" = the newest modelled release
};
// `require_device` false: neither --gpu nor --capacity is fine (for commands with their own device default).
PredictRequest make_request(const RequestArgs& args, bool require_device = true);

// --prompt-len: a plain number (every prompt that long) or uniform:LO..HI, one length per sequence of the
// batch drawn uniformly from LO..HI (inclusive) by mt19937_64 seeded with 0, so a run repeats bit for bit.
struct PromptLengths {
  std::int64_t longest = 0;
  std::vector<std::int64_t> per_sequence;  // empty for a plain number
};
PromptLengths parse_prompt_len(std::string_view text, std::int64_t batch,
                               std::string_view option = "--prompt-len");

// Adds `bytes` of category `c` to the bill (workspaces count as temporaries and as workspace).
void add_to_bill(MemoryBill& bill, TensorCategory c, std::int64_t bytes);

// Requested bytes per category of the tensors live after the first `event_count` events of the schedule
// (only the tensor categories of the bill are filled).
MemoryBill live_bill(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t event_count);

// Throws InputError on bad options / unknown GPU. `trace_out`, when given, receives the generated trace.
Prediction predict(const PredictRequest& request, Snapshot* trace_out = nullptr);

enum class FitVary : std::uint8_t { kBatch, kSeq };
FitVary parse_fit_vary(std::string_view text, std::string_view option = "--vary");
// "10%" or "0.1" -> 0.1; must be in [0, 1). Throws InputError naming `option`.
double parse_margin(std::string_view text, std::string_view option = "--margin");

struct FitTrial {
  std::int64_t value = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t num_ooms = 0;
  bool fits = false;
};

// The most work one prediction simulates, in layer passes: the model's layers x (2 per training step and
// micro-batch, 1 per generated token). The simulation keeps every request of the run, ~45 KB per layer pass
// measured (gpt2, TinyLlama), so this holds a run to ~6 GB of host memory: gpt2 trains up to 5,461 steps,
// llama-2-7b generates up to 4,096 tokens. make_request() throws InputError naming --steps / --generate above
// it.
inline constexpr std::int64_t kMaxLayerPasses = std::int64_t{1} << 17;

struct FitResult {
  FitVary vary = FitVary::kBatch;
  double margin = 0.0;
  std::int64_t total_bytes = 0;
  std::int64_t cuda_context_bytes = 0;
  std::int64_t nccl_bytes = 0;  // the NCCL lines' sum (nccl_groups.h), outside the allocator like the context
  // (1 - margin) * total, and no more than context + what per_process_memory_fraction allows: peak reserved +
  // context + NCCL must stay at or below it
  std::int64_t limit_bytes = 0;
  double memory_fraction = 0.0;  // --alloc-conf per_process_memory_fraction (0: not set)
  std::int64_t best = 0;         // 0 = even 1 does not fit
  bool best_is_cap = false;      // `best` is the search's cap, which fits: the real answer may be larger
  std::string cap_reason;        // non-empty: the cap is the model's own limit (no larger value can run)
  std::vector<FitTrial> trials;  // in the order tried
};

// Fits with the margin: no OOM and peak reserved + context + NCCL <= (1 - margin) * total. The largest
// fitting value of a search from `start` (the request's batch or seq) that guesses the boundary from the
// trials' peaks and brackets it as bisection does (sim/core/boundary_search.h); values are capped at
// `max_value`.
FitResult fit(const PredictRequest& request, FitVary vary, double margin, std::int64_t max_value = 1 << 20);

}  // namespace vramsim
