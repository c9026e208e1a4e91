#include "sim/predict/step_prediction.h"

#include "sim/predict/perfetto_trace.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <exception>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/size_classes.h"
#include "sim/core/boundary_search.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/core/thread_pool.h"
#include "sim/engine/gpu_table.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/inference/vllm_paged_cache.h"
#include "sim/models/layer_code.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/run_report.h"
#include "sim/predict/step_timeline.h"
#include "sim/replay/trace_replay.h"
#include "sim/serving/sglang_sizing.h"
#include "sim/serving/vllm_v1_sizing.h"
#include "sim/vision/vision_tower.h"

namespace vramsim {
namespace {

// Prefill (step 1) and decode (steps 2..) of a generate() run, from the per-step peaks and times.
Prediction::Generation summarize_generation(const TrainingOptions& o, const OpGraph& graph,
                                            const Prediction& p) {
  Prediction::Generation g;
  g.new_tokens = o.generate_tokens;
  g.prompt_tokens = o.seq;
  g.kv_cache = o.kv_cache;
  g.kv_cache_bytes = static_cast<std::int64_t>(graph.kv_cache_bytes);
  // the last new token is returned without a forward: prompt + new - 1 positions are cached (a static
  // cache holds prompt + new)
  const std::int64_t positions = o.seq + o.generate_tokens - (o.kv_cache == "static" ? 0 : 1);
  g.kv_bytes_per_token = g.kv_cache_bytes / std::max<std::int64_t>(1, o.batch * positions);
  g.prompt_lens = o.prompt_lens;
  for (const StepPeak& s : p.steps) {
    if (s.step == 1) {
      g.prefill = s;
    } else if (s.peak_allocated_bytes > g.decode.peak_allocated_bytes) {
      g.decode = s;
    }
  }
  if (p.timing) {
    for (const StepTiming& t : p.timing->steps) {
      (t.step == 1 ? g.prefill_time_ns : g.decode_time_ns) += t.time_ns;
    }
    if (g.decode_time_ns > 0) {
      g.decode_tokens_per_s = static_cast<double>(o.batch) * (o.generate_tokens - 1) * 1e9 /
                              static_cast<double>(g.decode_time_ns);
    }
  }
  return g;
}

std::vector<bool> live_tensors(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t count) {
  std::vector<bool> live(graph.tensors().size(), false);
  for (std::size_t i = 0; i < std::min(count, schedule.events.size()); ++i) {
    const TraceEvent& e = schedule.events[i];
    if (e.action == TraceAction::kAlloc) {
      live[schedule.event_tensor[i]] = true;
    } else if (e.action == TraceAction::kFreeRequested) {
      live[schedule.event_tensor[i]] = false;
    }
  }
  return live;
}

}  // namespace

void add_to_bill(MemoryBill& bill, TensorCategory c, std::int64_t bytes) {
  switch (c) {
    case TensorCategory::kParameter:
      bill.parameters += bytes;
      break;
    case TensorCategory::kGradient:
      bill.gradients += bytes;
      break;
    case TensorCategory::kOptimizerState:
      bill.optimizer_states += bytes;
      break;
    case TensorCategory::kActivation:
      bill.activations += bytes;
      break;
    case TensorCategory::kTemporary:
      bill.temporaries += bytes;
      break;
    case TensorCategory::kWorkspace:
      bill.temporaries += bytes;
      bill.workspace += bytes;
      break;
    case TensorCategory::kInput:
      bill.inputs += bytes;
      break;
    case TensorCategory::kCommunication:
      bill.communication += bytes;
      break;
    case TensorCategory::kKvCache:
      bill.kv_cache += bytes;
      break;
  }
}

MemoryBill live_bill(const OpGraph& graph, const AllocationSchedule& schedule, std::size_t event_count) {
  const std::vector<bool> live = live_tensors(graph, schedule, event_count);
  MemoryBill bill;
  for (const Tensor& t : graph.tensors()) {
    if (live[t.id]) {
      add_to_bill(bill, t.category, static_cast<std::int64_t>(t.size_bytes));
    }
  }
  return bill;
}

namespace {

Prediction predict_rank(const PredictRequest& request, Snapshot* trace_out);

struct StageRun {
  Prediction prediction;
  Snapshot trace;
};

// Pipeline stages [first, last], each predicted on its own thread (at most one per hardware thread). Each
// simulation owns its graph, schedule and allocator; the request is only read. The first exception (in
// stage order) is rethrown.
std::vector<StageRun> simulate_stages(const PredictRequest& request, int first, int last, bool keep_trace) {
  const auto count = static_cast<std::size_t>(last - first + 1);
  std::vector<StageRun> runs(count);
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        PredictRequest r = request;
        r.options.pipeline.stage = first + static_cast<int>(i);
        runs[i].prediction = predict_rank(r, keep_trace ? &runs[i].trace : nullptr);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(count, std::max(1U, std::thread::hardware_concurrency()));
  run_on_threads(threads, work);
  for (const std::exception_ptr& e : errors) {
    if (e) {
      std::rethrow_exception(e);
    }
  }
  return runs;
}

}  // namespace

Prediction predict(const PredictRequest& request, Snapshot* trace_out) {
  const PipelineOptions& pp = request.options.pipeline;
  if (pp.stages == 1) {
    return predict_rank(request, trace_out);
  }
  Prediction::Pipeline summary;
  summary.stages = pp.stages;
  summary.schedule = std::string(pipeline_schedule_name(pp.schedule));
  summary.virtual_stages = pp.schedule == PipelineSchedule::kInterleaved ? pp.virtual_stages : 1;
  summary.split = std::string(pipeline_split_name(pp.split));
  summary.layers_per_virtual_stage = layers_per_virtual_stage(request.model.n_layers, pp);
  summary.micro_batches = request.options.grad_accumulation;
  std::optional<Prediction> reported;
  std::optional<Snapshot> reported_trace;
  const int first = request.every_pipeline_stage ? 0 : pp.stage;
  const int last = request.every_pipeline_stage ? pp.stages - 1 : pp.stage;
  // Ranks are independent: one simulation per stage, run concurrently, reduced in stage order below.
  std::vector<StageRun> runs = simulate_stages(request, first, last, trace_out != nullptr);
  for (int stage = first; stage <= last; ++stage) {
    Prediction& p = runs[static_cast<std::size_t>(stage - first)].prediction;
    Snapshot& trace = runs[static_cast<std::size_t>(stage - first)].trace;
    summary.simulated.push_back({stage, p.peak_allocated_bytes, p.peak_reserved_bytes, p.fits});
    // The stage with the highest peak reserved (after an OOM, the most allocated bytes needed).
    const auto demand = [](const Prediction& q) {
      return std::max(q.peak_reserved_bytes, q.peak_allocated_needed_bytes);
    };
    if (!reported || demand(p) > demand(*reported)) {
      reported = std::move(p);
      reported_trace = std::move(trace);
    }
  }
  summary.stage = reported->pipeline_stage_simulated;
  reported->pipeline = std::move(summary);
  if (reported->timing) {
    // The stages wait for each other: a step lasts the reported stage's kernels plus the pipeline bubble,
    // (p - 1) / (v * M) of them (Narayanan et al. 2021, Sections 2.2 and 2.2.1), if every stage is as busy.
    const double bubble =
        1.0 + static_cast<double>(pp.stages - 1) /
                  static_cast<double>(reported->pipeline->virtual_stages * request.options.grad_accumulation);
    TimingEstimate& t = *reported->timing;
    for (StepTiming& st : t.steps) {
      st.time_ns = static_cast<std::int64_t>(static_cast<double>(st.time_ns) * bubble);
    }
    t.tokens_per_s /= bubble;
  }
  if (trace_out != nullptr) {
    *trace_out = std::move(*reported_trace);
  }
  return std::move(*reported);
}

namespace {

// vLLM's engine settings with its defaults filled in, checked as vLLM's configs check them.
Prediction::Generation::Paged vllm_settings(const PredictRequest& request) {
  const VllmServing& v = request.vllm;
  const TrainingOptions& o = request.options;
  Prediction::Generation::Paged g;
  g.block_size = o.block_size;
  g.block_bytes = static_cast<std::int64_t>(
      vllm_cache_block_bytes(request.model.n_layers, request.model.n_kv_heads, request.model.head_dim,
                             o.block_size, parameter_dtype(o.precision)));
  g.gpu_memory_utilization = v.gpu_memory_utilization;
  const std::int64_t longest = o.seq + o.generate_tokens;
  g.max_model_len = v.max_model_len > 0               ? v.max_model_len
                    : request.model.max_positions > 0 ? request.model.max_positions
                                                      : longest;
  if (longest > g.max_model_len) {
    throw InputError(fmt::format("--max-model-len: prompt + new tokens ({}) exceed max_model_len {}", longest,
                                 g.max_model_len));
  }
  g.max_num_batched_tokens = v.max_num_batched_tokens > 0 ? v.max_num_batched_tokens
                                                          : std::max(g.max_model_len, kVllmMinBatchedTokens);
  g.max_num_seqs = v.max_num_seqs > 0 ? v.max_num_seqs : kVllmDefaultMaxNumSeqs;
  if (g.max_num_batched_tokens < g.max_model_len) {  // SchedulerConfig._verify_args without chunked prefill
    throw InputError(fmt::format("--max-num-batched-tokens: {} is smaller than max_model_len {}",
                                 g.max_num_batched_tokens, g.max_model_len));
  }
  if (g.max_num_batched_tokens < g.max_num_seqs) {
    throw InputError(fmt::format("--max-num-batched-tokens: {} is smaller than --max-num-seqs {}",
                                 g.max_num_batched_tokens, g.max_num_seqs));
  }
  return g;
}

Prediction predict_rank(const PredictRequest& request, Snapshot* trace_out);

// Worker.determine_num_available_blocks: the profile run (profile_run: max_num_seqs dummy prompts sharing
// max_num_batched_tokens tokens, here each ceil(tokens / seqs) long, through the empty cache) on the loaded
// weights, then what is left of total x gpu_memory_utilization for the blocks.
Prediction::Generation::Paged size_vllm_cache(const PredictRequest& request) {
  Prediction::Generation::Paged g = vllm_settings(request);
  PredictRequest profile = request;
  profile.vllm.profile_run = true;
  TrainingOptions& po = profile.options;
  po.batch = g.max_num_seqs;
  po.seq = (g.max_num_batched_tokens + g.max_num_seqs - 1) / g.max_num_seqs;
  po.prompt_lens.clear();
  po.generate_tokens = 1;  // one forward: the last token is sampled without another
  po.steps = 1;
  po.num_gpu_blocks = 0;
  const Prediction p = predict_rank(profile, nullptr);
  // allocated_bytes.all.peak (weights included), plus what the process holds outside torch
  g.profile_peak_allocated_bytes = p.peak_allocated_needed_bytes;
  g.non_torch_bytes = p.cuda_context_bytes;
  const double available = static_cast<double>(p.total_bytes) * g.gpu_memory_utilization -
                           static_cast<double>(g.profile_peak_allocated_bytes + g.non_torch_bytes);
  g.available_bytes = static_cast<std::int64_t>(std::floor(available));
  g.num_gpu_blocks =
      vllm_num_gpu_blocks(static_cast<Bytes>(p.total_bytes), g.gpu_memory_utilization,
                          static_cast<Bytes>(g.profile_peak_allocated_bytes + g.non_torch_bytes),
                          static_cast<Bytes>(g.block_bytes));
  return g;
}

// What the blocks serve: each sequence holds ceil(cached positions / block_size) blocks, its prompt plus the
// new tokens but the last (sampled after the last forward, never cached).
void serve_from_blocks(const TrainingOptions& o, Prediction::Generation::Paged& g) {
  const auto blocks = [&](std::int64_t prompt) {
    return vllm_blocks_for_tokens(prompt + o.generate_tokens - 1, g.block_size);
  };
  g.blocks_per_sequence = blocks(o.seq);
  g.batch_blocks = 0;
  for (std::int64_t i = 0; i < o.batch; ++i) {
    g.batch_blocks += blocks(o.prompt_lens.empty() ? o.seq : o.prompt_lens[static_cast<std::size_t>(i)]);
  }
  g.concurrent_sequences = g.blocks_per_sequence > 0 ? g.num_gpu_blocks / g.blocks_per_sequence : 0;
  if (g.v1 || g.sglang) {
    return;  // the V1 engine's (size_vllm_v1_cache) or SGLang's (size_sglang_pool) own checks decided
  }
  // vLLM's worker raises before serving anything (raise_if_cache_size_invalid).
  if (g.num_gpu_blocks <= 0) {
    g.refusal = "no available memory for the cache blocks";
  } else if (g.max_model_len > g.num_gpu_blocks * g.block_size) {
    g.refusal = fmt::format("max_model_len {} is above the {} tokens the cache holds", g.max_model_len,
                            g.num_gpu_blocks * g.block_size);
  }
}

// What the request asked for, as the report names it (the layout, adapters, quantization, attention).
void describe_request(const PredictRequest& request, Prediction& p) {
  p.model_name = request.model.name;
  p.data_parallel = request.options.data_parallel.scheme;
  p.world_size = request.options.data_parallel.world_size;
  p.zero_redundancy_optimizer = request.options.data_parallel.zero_redundancy_optimizer;
  if (request.options.data_parallel.offload_optimizer) {
    p.offload.emplace_back("optimizer");
  }
  if (request.options.data_parallel.offload_params) {
    p.offload.emplace_back("params");
  }
  if (request.options.offload_activations) {
    p.offload.emplace_back("activations");
    p.activation_offload = request.options.activation_offload_torchtune ? "torchtune" : "save-on-cpu";
  }
  p.tensor_parallel = request.tensor_parallel;
  p.pipeline_stage_simulated = request.options.pipeline.stage;
  p.sequence_parallel = request.options.sequence_parallel;
  ParameterCount count = count_parameters(request.model, request.options.lora);
  if (request.model.vision.wrapper_model_type == "mllama") {
    // in memory; with images the projector and the cross-attention layers train (the tower unless frozen)
    // unless a PEFT method or quantized base freezes them; a text-only batch reaches none (mllama_vision.h)
    const ModelConfig::VisionPart& v = request.model.vision;
    count.total += v.total();
    if (request.options.vision.images_per_sample > 0 && !request.options.lora.enabled() &&
        request.options.bnb.format == BnbFormat::kNone) {
      count.trainable += v.projector_parameters + v.cross_attention_parameters +
                         (request.options.vision.freeze_tower ? 0 : v.tower_parameters);
    }
    p.images_per_sample = request.options.vision.images_per_sample;
    p.vision_tower_frozen = request.options.vision.freeze_tower;
  }
  if (request.model.vision.simulated()) {
    // LlavaForConditionalGeneration's vision tower and projector (vision_tower.h): trained unless frozen; a
    // PEFT method or quantized base freezes both
    const ModelConfig::VisionPart& v = request.model.vision;
    count.total += v.total();
    if (!request.options.lora.enabled() && request.options.bnb.format == BnbFormat::kNone) {
      count.trainable +=
          v.projector_parameters + (request.options.vision.freeze_tower ? 0 : v.tower_parameters);
    }
  }
  p.lora_rank = request.options.lora.rank_based() ? request.options.lora.rank : 0;
  if (request.options.lora.enabled()) {
    p.peft_method = peft_method_info(request.options.lora.method).name;
    if (request.options.lora.use_dora) {
      p.peft_method = "dora";
    } else if (request.options.lora.lora_fa) {
      p.peft_method = "lora-fa";
    }
  }
  if (p.lora_rank > 0 || request.options.lora.method == PeftMethod::kIa3) {
    p.lora_targets = request.options.lora.all_linear
                         ? std::vector<std::string>{"all-linear"}
                         : lora_target_modules(request.options.lora, request.model);
  }
  p.trainable_parameters = count.trainable;
  p.base_weights = std::string(base_weights_name(request.options.bnb.format));
  if (!p.base_weights.empty()) {
    p.bnb_double_quant = request.options.bnb.double_quant;
    p.bnb_compute_dtype = std::string(dtype_name(request.options.bnb.compute_dtype));
    p.bnb_prepare_kbit_training = request.options.bnb.prepare_kbit_training;
    p.bnb_saves_input = request.options.bnb.matmul4bit_saves_input;
  }
  p.total_parameters = count.total;
  p.vision = request.model.vision;
  if (p.vision.simulated()) {
    p.images_per_sample = request.options.vision.images_per_sample;
    p.tokens_per_image = vision_tokens_per_image(request.model, request.options.vision);
    p.vision_tower_frozen = request.options.vision.freeze_tower || request.options.lora.enabled();
  }
  p.attention_asked = std::string(attention_name(request.options.attention));
  p.attention_kernel = std::string(attention_name(attention_kernel(request.model, request.options)));
  p.precision_regime = precision_regime(request.options);
  p.compiled_loss = request.options.compile_loss;
}

// Stage 0: a vLLM engine sizes its paged KV cache before it serves (Worker.determine_num_available_blocks);
// the run then serves from those blocks. Other requests are returned as they are.
PredictRequest size_serving(const PredictRequest& original,
                            std::optional<Prediction::Generation::Paged>& paged) {
  PredictRequest sized = original;
  if (original.options.generate_tokens > 0 && original.options.kv_cache == "paged" &&
      !original.vllm.profile_run) {
    validate(original.options);
    if (original.vllm.engine == "sglang") {
      paged = size_sglang_pool(original);
      sized.options.kv_cache_fp8 = original.vllm.kv_cache_dtype != "auto";
      sized.options.vllm_quantization = original.vllm.quantization;  // SGLang's linears are vLLM's
      sized.options.block_size = 1;  // SGLang's token pool: page_size 1
    } else if (original.vllm.version == "v1") {
      paged = size_vllm_v1_cache(original);
      sized.options.kv_cache_fp8 = original.vllm.kv_cache_dtype != "auto";
      sized.options.vllm_quantization = original.vllm.quantization;  // the served batch's weights as loaded
      if (paged->v1->encoder) {
        // The start-up above sized the vision tower (its weights, its profile pass); the served batch is
        // the requested text prompts through the language model.
        sized.model.vision = ModelConfig::VisionPart{};
      }
      if (paged->v1->pipeline_parallel > 1) {
        // The served batch runs on one GPU of the stage reported: its decoder layers and its blocks (the
        // model's embedding and head stay in the graph: an upper bound by at most two vocabulary tables).
        sized.model.n_layers = paged->v1->stage_layers;
      }
    } else {
      paged = size_vllm_cache(original);
    }
    sized.options.num_gpu_blocks = paged->num_gpu_blocks;
    if (paged->v1) {
      // The served batch's cache is one tensor a layer of blocks of 2 x KV heads x head_dim a token; it is
      // given the bytes of vLLM's pool, layers_per_group tensors of num_gpu_blocks pages (KV-cache groups,
      // MLA's latent pages), so the memory after start-up is the engine's.
      const Bytes served_block = vllm_cache_block_bytes(
          static_cast<int>(sized.model.n_layers), sized.model.n_kv_heads, sized.model.head_dim,
          sized.options.block_size,
          sized.options.kv_cache_fp8 ? DType::kUInt8 : parameter_dtype(sized.options.precision));
      const Bytes pool = static_cast<Bytes>(std::max<std::int64_t>(0, paged->num_gpu_blocks)) *
                         static_cast<Bytes>(paged->block_bytes);
      sized.options.num_gpu_blocks = served_block > 0 ? static_cast<std::int64_t>(pool / served_block) : 0;
    }
    serve_from_blocks(sized.options, *paged);
  }
  validate(sized.options);
  if (sized.alloc_conf) {
    CachingConfig base;
    base.torch_version = sized.torch_version;
    (void)parse_alloc_conf(*sized.alloc_conf, "--alloc-conf", base);
  }
  return sized;
}

// Stage 2: the engine runs the ops on their streams (timed by the roofline when there is a GPU) and
// dispatches their allocations: the timeline and the allocation schedule in the engine's order.
struct EngineRun {
  Timeline timeline;
  AllocationSchedule schedule;
};

EngineRun run_engine(const OpGraph& graph, const PredictRequest& request, const Roofline* roofline) {
  AllocationSchedule untimed = build_allocation_schedule(graph);
  Timeline timeline = simulate_timeline(graph, untimed, roofline, request.host);
  AllocationSchedule schedule = timed_schedule(graph, std::move(untimed), timeline);
  return EngineRun{std::move(timeline), std::move(schedule)};
}

// Stage 4: the time axis, the engine's roofline estimate per step.
TimingEstimate estimate_time(const Timeline& timeline, const TrainingOptions& options) {
  TimingEstimate t;
  for (const StepTime& st : timeline.steps) {
    t.steps.push_back(StepTiming{st.step, st.duration_ns(), st.compute_ns, st.memory_ns, st.kernels});
  }
  t.tokens_per_step = options.batch * options.seq * options.grad_accumulation;
  if (!t.steps.empty() && t.steps.back().time_ns > 0) {
    t.tokens_per_s =
        static_cast<double>(t.tokens_per_step) * 1e9 / static_cast<double>(t.steps.back().time_ns);
  }
  return t;
}

// What the graph itself says beside the allocator's figures.
void describe_graph(const OpGraph& graph, const PredictRequest& request, Prediction& p) {
  p.paged_optimizer_state_bytes = static_cast<std::int64_t>(graph.unified_memory_bytes);
  p.host_memory = graph.host_memory;
  p.gpus_per_node =
      std::min(request.options.data_parallel.gpus_per_node, request.options.data_parallel.world_size);
  p.ops = graph.op_count();
  p.tensors = graph.tensors().size();
}

// One rank's run: a short pipeline of named stages, data flowing one way.
Prediction predict_rank(const PredictRequest& original, Snapshot* trace_out) {
  std::optional<Prediction::Generation::Paged> paged;
  const PredictRequest request = size_serving(original, paged);
  // 1. The op graph of the steps, as PyTorch eager (or the compiled model) would run them.
  const OpGraph graph = build_training_steps(request.model, request.options);
  // 2. The engine: ops on simulated streams, the allocation schedule in their order.
  std::optional<Roofline> roofline;
  if (!request.gpu.empty()) {
    roofline.emplace(Roofline::for_gpu(request.gpu, request.roofline));
  }
  EngineRun engine = run_engine(graph, request, roofline ? &*roofline : nullptr);
  // 3. The workload drives the allocator model on the device; the report is what it observed. The
  // schedule's string table moves into the workload unless --trace-out still needs it below.
  std::vector<TensorId> request_tensor;
  std::string source = "vramsim predict " + request.model.name;
  const Workload workload =
      trace_out != nullptr
          ? workload_from_schedule(engine.schedule, std::move(source), &request_tensor)
          : workload_from_schedule(std::move(engine.schedule), std::move(source), &request_tensor);
  const TensorNamer name_of = [&](std::size_t request_index) {
    const Tensor& t = graph.tensor(request_tensor[request_index]);
    return LiveTensor{t.name, t.category, t.layer, t.size_bytes};
  };
  // The process groups' NCCL buffers lie outside the allocator, as the CUDA context does (vLLM's own
  // communicators are its non-torch lines, sized with its cache).
  std::vector<NcclBillLine> nccl_lines;
  if (!paged) {
    nccl_lines =
        training_nccl_lines(request.options, request.tensor_parallel, request.gpu, request.nccl_channels);
  }
  RunDevice device{request.gpu, request.capacity_bytes, request.alloc_conf, request.context,
                   request.torch_version};
  device.nccl_bytes = static_cast<std::int64_t>(nccl_bytes(nccl_lines));
  Prediction p = explain_run(workload, device, name_of);
  p.nccl_lines = std::move(nccl_lines);
  // 4. The report: what was asked, what the graph says, the time axis, generation.
  describe_request(request, p);
  describe_graph(graph, request, p);
  if (roofline) {
    p.timing = estimate_time(engine.timeline, request.options);
  }
  if (request.options.generate_tokens > 0) {
    p.generation = summarize_generation(request.options, graph, p);
    if (paged) {
      p.generation->kv_bytes_per_token = paged->block_bytes / paged->block_size;
      p.generation->paged = paged;
      p.fits = p.fits && paged->refusal.empty();
    }
  }
  if (request.keep_timeline) {
    p.timeline = std::make_shared<const PredictedTimeline>(
        PredictedTimeline{op_slices(graph, engine.timeline),
                          observe_run(workload, p, request.alloc_conf, std::nullopt, request.torch_version)});
  }
  if (trace_out != nullptr) {  // the edge: the run in the recording format (--trace-out)
    *trace_out = schedule_to_snapshot(engine.schedule, workload.source);
  }
  return p;
}

}  // namespace

FitResult fit(const PredictRequest& request, FitVary vary, double margin, std::int64_t max_value) {
  if (!(margin >= 0.0 && margin < 1.0)) {
    throw InputError(fmt::format("--margin: must be in [0, 100%), got {}", margin));
  }
  if (!request.options.prompt_lens.empty()) {
    throw InputError("--prompt-len: uniform:LO..HI is drawn for one batch; fit takes a plain length");
  }
  if (request.options.generate_tokens > 0 && request.options.kv_cache == "paged") {
    throw InputError(
        "--kv-cache paged: vLLM's cache fills --gpu-memory-utilization by design; predict reports how many "
        "sequences fit at once");
  }
  FitResult out;
  out.vary = vary;
  out.margin = margin;
  {
    const GpuMemory d = device_memory(request.gpu, request.capacity_bytes, request.context);
    out.total_bytes = d.total_bytes;
    out.cuda_context_bytes = d.context_bytes;
    out.limit_bytes =
        static_cast<std::int64_t>(std::floor((1.0 - margin) * static_cast<double>(d.total_bytes)));
    if (request.alloc_conf) {
      CachingConfig base;
      base.torch_version = request.torch_version;
      out.memory_fraction = predicted_memory_fraction(
          parse_alloc_conf(*request.alloc_conf, "--alloc-conf", base).per_process_memory_fraction, d);
      out.limit_bytes =
          std::min(out.limit_bytes, d.context_bytes + allocator_limit_bytes(d, out.memory_fraction));
    }
  }
  // The search runs over multiples of `unit`: with context parallelism a sequence is cut into 2 x cp
  // load-balanced chunks, so only multiples of 2 x cp are lengths context_parallel accepts.
  const int cp = request.options.context_parallel.degree;
  const std::int64_t unit = vary == FitVary::kSeq && cp > 1 ? 2 * std::int64_t{cp} : 1;
  if (vary == FitVary::kSeq) {  // a learned position table (GPT-2) ends the search where it ends
    if (const std::int64_t positions = learned_positions_seq_limit(request.model, request.options);
        positions > 0 && positions <= max_value) {
      max_value = positions;
      out.cap_reason =
          fmt::format("the {} learned positions of {}", request.model.max_positions, request.model.name);
    }
  }
  max_value = std::max<std::int64_t>(1, max_value / unit);
  auto trial = [&](std::int64_t multiple) {
    const std::int64_t value = multiple * unit;
    PredictRequest r = request;
    (vary == FitVary::kBatch ? r.options.batch : r.options.seq) = value;
    const Prediction p = predict(r);
    FitTrial t;
    t.value = value;
    t.peak_reserved_bytes = p.peak_reserved_bytes;
    t.num_ooms = p.num_ooms;
    const std::int64_t cost = p.peak_reserved_bytes + p.cuda_context_bytes + p.nccl_bytes;
    out.nccl_bytes = p.nccl_bytes;
    t.fits = p.num_ooms == 0 && cost <= out.limit_bytes;
    out.trials.push_back(t);
    return BoundaryProbe{t.fits, cost, p.num_ooms == 0};  // an OOM's peak is capped by the device
  };
  const std::int64_t start = (vary == FitVary::kBatch ? request.options.batch : request.options.seq) / unit;
  const BoundaryResult found = search_boundary(start, max_value, out.limit_bytes, trial);
  out.best = found.best * unit;
  out.best_is_cap = found.best_is_cap;
  if (!out.best_is_cap) {
    out.cap_reason.clear();
  }
  return out;
}

}  // namespace vramsim
