// make_request: the options as a user types them (RequestArgs, CLI strings) -> a PredictRequest, each parsed
// by the parse_* helpers of the rooms that own them, with the framework's defaults and the layout checks; and
// the option parsers of fit (--vary, --margin) and --prompt-len. Every bad value is an InputError naming its
// option.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/alloc/caching_config.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/engine/gpu_table.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/models/checkpoint_quantization.h"
#include "sim/models/layer_code.h"
#include "sim/models/transformer_builder.h"
#include "sim/models/vision_tower.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/cuda_context.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_prediction.h"

namespace vramsim {
namespace {

// --offload optimizer|params (comma-separated), in DeepSpeed's and FSDP's terms (training_options.h).
void parse_offload(const std::string& text, DataParallelOptions& d) {
  if (text.empty()) {
    return;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item == "optimizer") {
      d.offload_optimizer = true;
    } else if (item == "params") {
      d.offload_params = true;
    } else if (item == "activations") {
      d.offload_activations = true;
    } else {
      throw InputError(
          fmt::format("--offload: unknown item '{}' (known: optimizer, params, activations)", item));
    }
    start = comma + 1;
  }
  if (!d.offload_optimizer && !d.offload_params) {
    return;  // activations alone: any layout
  }
  const bool zero = d.scheme.starts_with("zero");
  const bool fsdp = d.scheme.starts_with("fsdp-") || d.scheme.starts_with("fsdp2-");
  if (zero) {
    if (d.offload_optimizer && (d.scheme == "zero1")) {
      throw InputError("--offload optimizer: modelled with --zero 2 or 3 (ZeRO-Offload)");
    }
    if (d.offload_params && d.scheme != "zero3") {
      throw InputError("--offload params: DeepSpeed offloads parameters only with --zero 3 (offload_param)");
    }
  } else if (fsdp) {
    if (!d.offload_params) {
      throw InputError(
          "--offload optimizer: FSDP moves the optimizer to the host only with its parameters "
          "(FSDP1's CPUOffload(offload_params=True), FSDP2's CPUOffloadPolicy): use --offload params");
    }
    d.offload_optimizer = true;  // the optimizer steps on the host-resident shards
  } else {
    throw InputError("--offload: needs a sharding scheme that offloads (--zero 2|3 or --fsdp)");
  }
}

DataParallelOptions parse_data_parallel(const RequestArgs& a) {
  DataParallelOptions d;
  if (a.world_size < 1 || a.world_size > (1 << 20)) {
    throw InputError(fmt::format("--world-size: {} is not in 1..1048576", a.world_size));
  }
  if (a.tp < 1 || a.tp > 1024) {
    throw InputError(fmt::format("--tp: {} is not in 1..1024", a.tp));
  }
  if (a.pp < 1 || a.pp > 1024) {
    throw InputError(fmt::format("--pp: {} is not in 1..1024", a.pp));
  }
  const int replica = a.tp * a.pp;                         // GPUs per model replica
  int world = a.world_size == 1 ? replica : a.world_size;  // --tp / --pp alone: one replica
  if (a.dp) {  // Megatron's world = dp x cp x tp x pp (torchtitan's ParallelDims: dp_shard x cp x tp x pp)
    if (*a.dp < 1 || *a.dp > (1 << 20) || a.cp < 1 || a.cp > 4096) {
      throw InputError(fmt::format("--dp: {} is not in 1..1048576 (or --cp {} not in 1..4096)", *a.dp, a.cp));
    }
    const std::int64_t implied = std::int64_t{*a.dp} * a.cp * replica;
    if (implied > (1 << 20)) {
      throw InputError(fmt::format("--dp {} x --cp {} x --tp {} x --pp {}: {} GPUs, more than 1048576", *a.dp,
                                   a.cp, a.tp, a.pp, implied));
    }
    if (a.world_size != 1 && a.world_size != implied) {
      throw InputError(fmt::format("--dp {} x --cp {} x --tp {} x --pp {} is {} GPUs, but --gpus is {}",
                                   *a.dp, a.cp, a.tp, a.pp, implied, a.world_size));
    }
    world = static_cast<int>(implied);
  }
  if (world % replica != 0) {
    throw InputError(
        a.pp == 1 ? fmt::format("--tp: {} does not divide --world-size {}", a.tp, world)
                  : fmt::format("--tp x --pp: {} x {} does not divide --world-size {}", a.tp, a.pp, world));
  }
  d.world_size = world / replica;  // the data-parallel group: ranks holding the same part of the model
  if (a.zero && !a.fsdp.empty()) {
    throw InputError("--zero / --fsdp: give only one of them");
  }
  if (a.zero) {
    if (*a.zero < 0 || *a.zero > 3) {
      throw InputError(fmt::format("--zero: {} is not a ZeRO stage (0..3)", *a.zero));
    }
    d.scheme = *a.zero == 0 ? "ddp" : fmt::format("zero{}", *a.zero);
  } else if (!a.fsdp.empty() || a.fsdp2) {
    if (a.fsdp2 && a.fsdp == "no-shard") {
      throw InputError("--fsdp2: fully_shard has no no-shard strategy (use DDP: leave out --fsdp2)");
    }
    d.scheme = (a.fsdp2 ? "fsdp2-" : "fsdp-") + (a.fsdp.empty() ? std::string("full-shard") : a.fsdp);
    (void)make_data_parallel(d, "--fsdp");  // an unknown strategy fails here, naming the option
  } else if (d.world_size > 1) {
    d.scheme = "ddp";
  }
  if (a.gradient_as_bucket_view && d.scheme != "ddp") {
    throw InputError("--gradient-as-bucket-view: DDP's option (--gpus N without --zero or --fsdp)");
  }
  d.ddp_gradient_as_bucket_view = a.gradient_as_bucket_view;
  // DDP's find_unused_parameters and static_graph change what the Reducer does on the host, not what it
  // allocates (torch/csrc/distributed/c10d/reducer.cpp): find_unused_parameters walks the autograd graph from
  // the outputs after each forward (prepare_for_backward / search_unused_parameters) and marks unused
  // parameters ready, zero-filling their part of the same bucket (its only allocation, the per-tensor int32
  // local_used_map on the host and its device copy, is 4 B per parameter tensor: not modelled); static_graph
  // delays the first iteration's all-reduce to the end of backward (delay_all_reduce), over the same buckets
  // and .grad tensors. Both also decide whether the buckets are rebuilt after the first iteration
  // (should_rebuild_buckets), which vramsim does not model either way: it keeps the construction's buckets.
  for (const auto& [set, flag] : {std::pair{a.find_unused_parameters, "--find-unused-parameters"},
                                  std::pair{a.static_graph, "--static-graph"}}) {
    if (set && d.scheme != "ddp") {
      throw InputError(fmt::format("{}: DDP's option (--gpus N without --zero or --fsdp)", flag));
    }
  }
  if (a.bucket_cap_mb) {
    if (!(*a.bucket_cap_mb > 0 && *a.bucket_cap_mb <= 1e6)) {
      throw InputError("--bucket-cap-mb: must be in (0, 1e6]");
    }
    d.ddp_bucket_cap_bytes = static_cast<Bytes>(*a.bucket_cap_mb * static_cast<double>(kMiB));
  }
  if (a.reduce_bucket_size) {
    if (!(*a.reduce_bucket_size >= 1 && *a.reduce_bucket_size <= 1e12)) {
      throw InputError("--reduce-bucket-size: must be in [1, 1e12] elements");
    }
    d.reduce_bucket_elements = static_cast<std::int64_t>(*a.reduce_bucket_size);
  }
  const auto stage3_option = [&d](const std::optional<double>& value, const char* option, std::int64_t& out) {
    if (!value) {
      return;
    }
    if (d.scheme != "zero3") {
      throw InputError(fmt::format("{}: DeepSpeed ZeRO-3's option (use it with --zero 3)", option));
    }
    if (!(*value >= 0 && *value <= 1e12)) {
      throw InputError(fmt::format("{}: must be in [0, 1e12] elements", option));
    }
    out = static_cast<std::int64_t>(*value);
  };
  stage3_option(a.stage3_max_reuse_distance, "--stage3-max-reuse-distance", d.stage3_max_reuse_distance);
  stage3_option(a.stage3_prefetch_bucket_size, "--stage3-prefetch-bucket-size",
                d.stage3_prefetch_bucket_size);
  stage3_option(a.stage3_max_live_parameters, "--stage3-max-live-parameters", d.stage3_max_live_parameters);
  d.overlap_comm = a.overlap_comm;
  if (a.no_limit_all_gathers && !d.scheme.starts_with("fsdp-")) {
    throw InputError("--no-limit-all-gathers: FSDP1's option (--fsdp without --fsdp2)");
  }
  d.fsdp_limit_all_gathers = !a.no_limit_all_gathers;
  if (a.fsdp_sync_module_states && !d.scheme.starts_with("fsdp-")) {
    throw InputError("--fsdp-sync-module-states: FSDP1's option (--fsdp without --fsdp2)");
  }
  d.fsdp_sync_module_states = a.fsdp_sync_module_states;
  if (a.fsdp2_copy_in != "compute" && a.fsdp2_copy_in != "reduce-scatter") {
    throw InputError(
        fmt::format("--fsdp2-copy-in: unknown value '{}' (known: compute, reduce-scatter)", a.fsdp2_copy_in));
  }
  if (a.fsdp2_copy_in != "compute" && !d.scheme.starts_with("fsdp2-")) {
    throw InputError("--fsdp2-copy-in: FSDP2's option (use it with --fsdp2)");
  }
  d.fsdp2_copy_in_on_reduce_scatter_stream = a.fsdp2_copy_in == "reduce-scatter";
  if (a.fsdp2_last_layer != "reshard" && a.fsdp2_last_layer != "keep") {
    throw InputError(
        fmt::format("--fsdp2-last-layer: unknown value '{}' (known: reshard, keep)", a.fsdp2_last_layer));
  }
  if (a.fsdp2_last_layer != "reshard" && !d.scheme.starts_with("fsdp2-")) {
    throw InputError("--fsdp2-last-layer: FSDP2's option (use it with --fsdp2)");
  }
  if (a.fsdp2_last_layer == "keep" && a.pp > 1) {
    // torchtitan's apply_fsdp: "For PP, do not reshard after forward" for every block (--fsdp shard-grad-op)
    throw InputError(
        "--fsdp2-last-layer keep: torchtitan's rule without pipeline parallelism (under --pp it "
        "keeps every block: --fsdp shard-grad-op)");
  }
  d.fsdp2_keep_last_layer_unsharded = a.fsdp2_last_layer == "keep";
  if (!a.reduce_dtype.empty()) {
    if (!d.scheme.starts_with("fsdp")) {
      throw InputError("--reduce-dtype: FSDP's MixedPrecision reduce_dtype (use it with --fsdp)");
    }
    static const std::pair<std::string_view, DType> kReduceDtypes[] = {
        {"fp32", DType::kFloat32}, {"bf16", DType::kBFloat16}, {"fp16", DType::kFloat16}};
    for (const auto& [name, dtype] : kReduceDtypes) {
      if (a.reduce_dtype == name) {
        d.fsdp_reduce_dtype = dtype;
      }
    }
    if (!d.fsdp_reduce_dtype) {
      throw InputError(
          fmt::format("--reduce-dtype: unknown value '{}' (known: fp32, bf16, fp16)", a.reduce_dtype));
    }
  }
  d.zero_redundancy_optimizer = a.zero_redundancy_optimizer;  // validate() checks it is over DDP
  if (a.gpus_per_node < 1 || a.gpus_per_node > 1024) {
    throw InputError(fmt::format("--gpus-per-node: {} is not in 1..1024", a.gpus_per_node));
  }
  d.gpus_per_node = a.gpus_per_node;
  parse_offload(a.offload, d);
  return d;
}

// --checkpoint-impl: torch.utils.checkpoint's use_reentrant, for the checkpoints torch.utils.checkpoint makes
// (--checkpointing full and selective-op; Megatron's selective recompute is its own reentrant
// tensor_parallel.checkpoint). Selective-op needs the non-reentrant one: checkpoint() raises "Passing
// `context_fn` or `debug` is only supported when use_reentrant=False." (torch/utils/checkpoint.py).
void parse_checkpoint_impl(const RequestArgs& a, TrainingOptions& o) {
  if (a.checkpoint_impl.empty()) {
    return;  // CheckpointOptions' default: non-reentrant
  }
  if (a.checkpoint_impl != "reentrant" && a.checkpoint_impl != "non-reentrant") {
    throw InputError(fmt::format(
        "--checkpoint-impl: unknown value '{}' (expected reentrant or non-reentrant)", a.checkpoint_impl));
  }
  if (o.checkpointing != Checkpointing::kFull && o.checkpointing != Checkpointing::kSelectiveOp) {
    throw InputError(
        "--checkpoint-impl: torch.utils.checkpoint's use_reentrant; needs --checkpointing full or "
        "selective-op");
  }
  const bool reentrant = a.checkpoint_impl == "reentrant";
  if (reentrant && o.checkpointing == Checkpointing::kSelectiveOp) {
    throw InputError(
        "--checkpoint-impl reentrant with --checkpointing selective-op: torch.utils.checkpoint refuses it "
        "(\"Passing `context_fn` or `debug` is only supported when use_reentrant=False.\")");
  }
  if (reentrant && a.checkpoint_early_stop == "off") {
    throw InputError(
        "--checkpoint-early-stop off: set_checkpoint_early_stop applies to the non-reentrant checkpoint; the "
        "reentrant one always reruns the whole layer");
  }
  o.checkpoint.impl = reentrant ? CheckpointImpl::kReentrant : CheckpointImpl::kNonReentrant;
  o.checkpoint.impl_explicit = true;
}

// vLLM's engine arguments: only with --kv-cache paged (a changed one without it is an error).
void parse_vllm_serving(const RequestArgs& a, TrainingOptions& o, VllmServing& v) {
  const RequestArgs defaults;
  const bool changed = a.gpu_memory_utilization != defaults.gpu_memory_utilization ||
                       a.block_size != defaults.block_size || a.max_model_len != defaults.max_model_len ||
                       a.max_num_batched_tokens != defaults.max_num_batched_tokens ||
                       a.max_num_seqs != defaults.max_num_seqs ||
                       a.kv_cache_dtype != defaults.kv_cache_dtype ||
                       a.quantization != defaults.quantization ||
                       a.vllm_non_torch_increase != defaults.vllm_non_torch_increase ||
                       a.vllm_cudagraph_memory != defaults.vllm_cudagraph_memory;
  if (changed && a.kv_cache != "paged") {
    throw InputError(
        "--gpu-memory-utilization / --block-size / --max-model-len / --max-num-batched-tokens / "
        "--max-num-seqs / --kv-cache-dtype / --quantization / --vllm-non-torch-increase / "
        "--vllm-cudagraph-memory: vLLM's settings, for --kv-cache paged");
  }
  if (a.vllm_version != "v1" && a.vllm_version != "v0") {
    throw InputError(fmt::format("--vllm-version: '{}' is not v1 or v0", a.vllm_version));
  }
  if (!a.vllm_pp_layer_partition.empty() && (a.kv_cache != "paged" || a.pp == 1)) {
    throw InputError(
        "--vllm-pp-layer-partition: vLLM's VLLM_PP_LAYER_PARTITION, for --pp N --kv-cache paged");
  }
  if (a.kv_cache == "paged" && a.pp > 1 && a.vllm_version != "v1") {
    throw InputError("--pp: vLLM's pipeline stages are modelled for --vllm-version v1 only");
  }
  v.pp_layer_partition = a.vllm_pp_layer_partition;
  if (a.serving_engine != "vllm" && a.serving_engine != "sglang") {
    throw InputError(fmt::format("--serving-engine: '{}' is not vllm or sglang", a.serving_engine));
  }
  const bool sglang = a.serving_engine == "sglang";
  if ((sglang || a.mem_fraction_static != defaults.mem_fraction_static) && a.kv_cache != "paged") {
    throw InputError(
        "--serving-engine / --mem-fraction-static: a serving engine's KV pool, for --kv-cache paged");
  }
  if (a.mem_fraction_static != defaults.mem_fraction_static &&
      (!sglang || !(a.mem_fraction_static > 0.0 && a.mem_fraction_static < 1.0))) {
    throw InputError(fmt::format(
        "--mem-fraction-static: SGLang's fraction, in (0, 1) with --serving-engine sglang, got {}",
        a.mem_fraction_static));
  }
  if (sglang && (a.gpu_memory_utilization != defaults.gpu_memory_utilization || a.pp > 1 ||
                 a.vllm_version != "v1" || !a.vllm_non_torch_increase.empty() ||
                 !a.vllm_cudagraph_memory.empty() || a.block_size != defaults.block_size)) {
    throw InputError(
        "--serving-engine sglang: --gpu-memory-utilization, --block-size, --pp, --vllm-version and the "
        "--vllm-* options are vLLM's (SGLang takes --mem-fraction-static; its pipeline stages are not "
        "modelled)");
  }
  if (a.sglang_version != "0.5" && a.sglang_version != "0.4") {
    throw InputError(fmt::format("--sglang-version: '{}' is not 0.5 or 0.4", a.sglang_version));
  }
  if (a.sglang_version != defaults.sglang_version && !sglang) {
    throw InputError("--sglang-version: SGLang's default mem_fraction_static, for --serving-engine sglang");
  }
  v.engine = a.serving_engine;
  v.mem_fraction_static = a.mem_fraction_static;
  v.sglang_version = a.sglang_version;
  const bool v1_only = a.kv_cache_dtype != defaults.kv_cache_dtype ||
                       a.quantization != defaults.quantization ||
                       a.vllm_non_torch_increase != defaults.vllm_non_torch_increase ||
                       a.vllm_cudagraph_memory != defaults.vllm_cudagraph_memory;
  if (a.vllm_version != "v1" && v1_only) {
    throw InputError(
        "--kv-cache-dtype / --quantization / --vllm-non-torch-increase / --vllm-cudagraph-memory: "
        "modelled for --vllm-version v1 only");
  }
  if (a.kv_cache_dtype != "auto" && a.kv_cache_dtype != "fp8" && a.kv_cache_dtype != "fp8_e4m3" &&
      a.kv_cache_dtype != "fp8_e5m2") {
    throw InputError(
        fmt::format("--kv-cache-dtype: '{}' is not auto, fp8, fp8_e4m3 or fp8_e5m2", a.kv_cache_dtype));
  }
  static constexpr std::string_view kQuantizations[] = {"fp8",   "fp8-block", "w8a8-int8", "w8a8-fp8",
                                                        "w4a16", "gptq",      "awq"};
  if (!a.quantization.empty() && std::find(std::begin(kQuantizations), std::end(kQuantizations),
                                           a.quantization) == std::end(kQuantizations)) {
    throw InputError(fmt::format(
        "--quantization: '{}' is not modelled (fp8, fp8-block, w8a8-int8, w8a8-fp8, w4a16, gptq and awq are)",
        a.quantization));
  }
  if (!a.vllm_non_torch_increase.empty()) {
    v.non_torch_increase_bytes =
        static_cast<std::int64_t>(parse_size(a.vllm_non_torch_increase, "--vllm-non-torch-increase"));
  }
  if (!a.vllm_cudagraph_memory.empty()) {
    v.cudagraph_memory_bytes =
        static_cast<std::int64_t>(parse_size(a.vllm_cudagraph_memory, "--vllm-cudagraph-memory"));
  }
  v.version = a.vllm_version;
  v.kv_cache_dtype = a.kv_cache_dtype;
  v.quantization = a.quantization;
  if (!(a.gpu_memory_utilization > 0.0 && a.gpu_memory_utilization <= 1.0)) {
    throw InputError(
        fmt::format("--gpu-memory-utilization: must be in (0, 1], got {}", a.gpu_memory_utilization));
  }
  if (a.max_model_len < 0 || a.max_model_len > kMaxSeq) {
    throw InputError(
        fmt::format("--max-model-len: must be in 1..{} tokens, got {}", kMaxSeq, a.max_model_len));
  }
  if (a.max_num_batched_tokens < 0 || a.max_num_batched_tokens > kMaxSeq) {
    throw InputError(fmt::format("--max-num-batched-tokens: must be in 1..{} tokens, got {}", kMaxSeq,
                                 a.max_num_batched_tokens));
  }
  if (a.max_num_seqs < 0 || a.max_num_seqs > kMaxBatch) {
    throw InputError(fmt::format("--max-num-seqs: must be in 1..{}, got {}", kMaxBatch, a.max_num_seqs));
  }
  o.block_size = a.block_size;  // validate() checks the range
  v.gpu_memory_utilization = a.gpu_memory_utilization;
  v.max_model_len = a.max_model_len;
  v.max_num_batched_tokens = a.max_num_batched_tokens;
  v.max_num_seqs = a.max_num_seqs;
}

// A pre-quantized checkpoint (config.json's quantization_config, checkpoint_quantization.h): bitsandbytes'
// is the --base-weights path, its values taken from the config (from_pretrained uses the checkpoint's own
// quantization_config); the other formats are read and refused, naming what was read, rather than predicted
// in torch_dtype as if the block were not there.
void apply_checkpoint_quantization(const RequestArgs& a, BnbOptions& bnb) {
  const std::optional<CheckpointQuantization> q = checkpoint_quantization_of(a.model);
  if (!q) {
    return;
  }
  refuse_unmodelled_quantization(*q, a.model);
  if (!q->modules_to_not_convert.empty()) {
    throw InputError(
        fmt::format("{}: quantization_config: llm_int8_skip_modules is not modelled (--base-weights converts "
                    "every linear "
                    "layer but lm_head)",
                    a.model));
  }
  const auto conflict = [&](bool differs, std::string_view option, std::string_view value) {
    if (differs) {
      throw InputError(fmt::format("{} {}: contradicts the quantization_config of {} ({})", option, value,
                                   a.model, describe(*q)));
    }
  };
  conflict(!a.base_weights.empty() && parse_base_weights(a.base_weights) != q->bnb_format, "--base-weights",
           a.base_weights);
  conflict(a.bnb_double_quant && !q->bnb_double_quant, "--bnb-double-quant", "");
  conflict(a.bnb_compute_dtype != "fp32" && bnb.compute_dtype != q->bnb_compute_dtype, "--bnb-compute-dtype",
           a.bnb_compute_dtype);
  conflict(a.bnb_quant_storage != "uint8" && bnb.quant_storage != q->bnb_quant_storage, "--bnb-quant-storage",
           a.bnb_quant_storage);
  bnb.format = q->bnb_format;
  bnb.double_quant = q->bnb_double_quant;
  bnb.compute_dtype = q->bnb_compute_dtype;
  bnb.quant_storage = q->bnb_quant_storage;
}

}  // namespace

PromptLengths parse_prompt_len(std::string_view text, std::int64_t batch, std::string_view option) {
  const auto parse = [](std::string_view digits, std::int64_t& value) {
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return !digits.empty() && ec == std::errc{} && ptr == digits.data() + digits.size();
  };
  PromptLengths out;
  constexpr std::string_view kUniform = "uniform:";
  if (!text.starts_with(kUniform)) {  // a plain length: validate() checks its range, naming --seq
    if (!parse(text, out.longest)) {
      throw InputError(
          fmt::format("--seq / {}: expected a length or uniform:LO..HI, got '{}'", option, text));
    }
    return out;
  }
  const std::string_view range = text.substr(kUniform.size());
  const std::size_t dots = range.find("..");
  std::int64_t lo = 0, hi = 0;
  if (dots == std::string_view::npos || !parse(range.substr(0, dots), lo) ||
      !parse(range.substr(dots + 2), hi)) {
    throw InputError(fmt::format("{}: expected uniform:LO..HI, got '{}'", option, text));
  }
  if (lo < 1 || hi > kMaxSeq) {
    throw InputError(fmt::format("{}: lengths must be in 1..{}, got '{}'", option, kMaxSeq, text));
  }
  if (lo > hi) {
    throw InputError(fmt::format("{}: LO {} is above HI {} in '{}'", option, lo, hi, text));
  }
  if (batch < 1 || batch > kMaxBatch) {
    throw InputError(fmt::format("--batch: {} is not in 1..{}", batch, kMaxBatch));
  }
  std::mt19937_64 rng(0);  // the fixed seed: the same lengths on every run and platform
  const auto span = static_cast<std::uint64_t>(hi - lo + 1);
  for (std::int64_t i = 0; i < batch; ++i) {
    out.per_sequence.push_back(lo + static_cast<std::int64_t>(rng() % span));
  }
  out.longest = *std::max_element(out.per_sequence.begin(), out.per_sequence.end());
  return out;
}

PredictRequest make_request(const RequestArgs& a, bool require_device) {
  if (!a.gpu.empty() && !a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give only one of them");
  }
  if (require_device && a.gpu.empty() && a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give exactly one of them");
  }
  PredictRequest r;
  r.model = load_model(a.model);
  if (!a.model_code.empty()) {
    r.model.code = std::string(layer_code(a.model_code, "--model-code").name());
  }
  // The layout before any work: --tp must divide --world-size.
  const DataParallelOptions data_parallel = parse_data_parallel(a);
  r.tensor_parallel = a.tp;
  r.vllm.vocab_size = r.model.vocab_size;  // vLLM pads it its own way (vllm_vocab_rows_per_rank)
  r.model = tensor_parallel_rank(r.model, a.tp);
  r.model = expert_parallel_rank(r.model, a.ep);
  r.gpu = a.gpu;
  // The cuBLAS workspaces PyTorch makes on this GPU (with --capacity there is no GPU to ask: Hopper's 32
  // MiB).
  // Unknown names fail here, before any work.
  const GpuSpec* spec = a.gpu.empty() ? nullptr : &find_gpu(a.gpu);
  const int compute_capability = spec == nullptr ? 90 : spec->compute_capability;
  r.options.cublas_workspace_bytes =
      static_cast<Bytes>(cublas_workspace_bytes(compute_capability, a.cublas_workspace_config));
  if (spec == nullptr && !a.capacity.empty()) {
    r.capacity_bytes = parse_size(a.capacity, "--capacity");
    if (r.capacity_bytes == 0) {
      throw InputError("--capacity: must be positive");
    }
  }
  TrainingOptions& o = r.options;
  o.batch = a.batch;
  o.seq = a.seq;
  // vLLM serves a model in float16 (--dtype float16, the dtype of GPUs without bf16) with the bytes of
  // bfloat16: both are two-byte elements in its weights, activations and KV cache. Outside vLLM serving a
  // pure fp16 model is not modelled (amp-fp16 is PyTorch's autocast).
  const bool vllm_fp16 = a.precision == "fp16" && a.kv_cache == "paged" && a.generate > 0;
  if (a.precision == "fp16" && !vllm_fp16) {
    throw InputError(
        "--precision: fp16 (a model held in float16) is modelled for vLLM serving (--generate N --kv-cache "
        "paged) only; training and transformers generation take fp32, amp-fp16, amp-bf16 or bf16");
  }
  o.precision = parse_precision(vllm_fp16 ? "bf16" : a.precision);
  r.vllm.dtype = vllm_fp16 ? "float16" : "";
  o.optimizer = parse_optimizer(a.optimizer);
  o.optimizer_impl = parse_optimizer_impl(a.optimizer, OptimizerImpl::kForeach);
  if (a.adam_foreach_denom != "in-place" && a.adam_foreach_denom != "out-of-place") {
    throw InputError(
        fmt::format("--adam-foreach-denom: unknown value '{}' (expected in-place or out-of-place)",
                    a.adam_foreach_denom));
  }
  if (a.adam_foreach_denom == "out-of-place" &&
      ((o.optimizer != OptimizerKind::kAdam && o.optimizer != OptimizerKind::kAdamW) ||
       o.optimizer_impl != OptimizerImpl::kForeach)) {
    throw InputError(
        "--adam-foreach-denom out-of-place: describes torch.optim's foreach Adam / AdamW "
        "(_multi_tensor_adam); "
        "needs --optimizer adam or adamw with the foreach implementation");
  }
  o.adam_foreach_denom =
      a.adam_foreach_denom == "out-of-place" ? AdamForeachDenom::kOutOfPlace : AdamForeachDenom::kInPlace;
  o.checkpointing = parse_checkpointing(a.checkpointing);
  if (a.checkpoint_early_stop != "on" && a.checkpoint_early_stop != "off") {
    throw InputError(fmt::format("--checkpoint-early-stop: unknown value '{}' (expected on or off)",
                                 a.checkpoint_early_stop));
  }
  if (a.checkpoint_early_stop == "off" && o.checkpointing != Checkpointing::kFull &&
      o.checkpointing != Checkpointing::kSelectiveOp) {
    throw InputError(
        "--checkpoint-early-stop off: torch.utils.checkpoint's setting; needs --checkpointing full or "
        "selective-op");
  }
  o.checkpoint.early_stop = a.checkpoint_early_stop == "on";
  parse_checkpoint_impl(a, o);
  o.loss = parse_loss(a.loss);
  if (a.loss_chunks < 1 || a.loss_chunks > 4096) {
    throw InputError(fmt::format("--loss-chunks: {} is not in 1..4096", a.loss_chunks));
  }
  if (a.loss_chunks != 8 && o.loss != LossKind::kChunkedCrossEntropy &&
      o.loss != LossKind::kTorchtitanChunkedCrossEntropy) {
    throw InputError(
        "--loss-chunks: the chunked losses' option (use it with --loss chunked-ce or torchtitan-chunked-ce)");
  }
  o.loss_chunks = a.loss_chunks;
  o.free_logits_before_backward = a.free_logits;
  if (a.logits_dtype != "model" && a.logits_dtype != "fp32") {
    throw InputError(
        fmt::format("--logits-dtype: unknown value '{}' (expected model or fp32)", a.logits_dtype));
  }
  o.logits_dtype = a.logits_dtype == "fp32" ? LogitsDtype::kFp32 : LogitsDtype::kModel;
  if (o.logits_dtype == LogitsDtype::kFp32 &&
      (o.loss == LossKind::kChunkedCrossEntropy || !layer_code(r.model.code).follows_transformers())) {
    throw InputError(
        "--logits-dtype fp32: modelled for --loss ce or torchtitan-chunked-ce over transformers-style models "
        "(vramsim: not with --loss chunked-ce or --model-code cs336-basics)");
  }
  o.loss_item_sync = parse_loss_item_sync(a.loss_item);
  o.attention =
      a.attention.empty()
          ? (layer_code(r.model.code).follows_transformers() ? AttentionKind::kSdpa : AttentionKind::kEager)
          : parse_attention(a.attention);
  o.compute_capability = a.gpu.empty() ? 0 : compute_capability;
  if (spec != nullptr) {  // with --capacity: Hopper's, like the cuBLAS workspace
    o.device = CudaDevice{spec->sm_count, spec->max_threads_per_sm, spec->compute_capability};
  }
  if (a.dropout) {  // --dropout P replaces the config's rates, also with 0 (no dropout at all)
    o.dropout = *a.dropout;
    r.model.dropout = {*a.dropout, *a.dropout, *a.dropout};
  }
  o.grad_accumulation = a.grad_accumulation;
  o.steps = a.steps;
  o.forward_only = a.forward_only;
  o.inference = a.inference;
  if (o.loss != LossKind::kCrossEntropy) {
    const std::string_view name =
        o.loss == LossKind::kChunkedCrossEntropy ? "chunked-ce" : "torchtitan-chunked-ce";
    if (!layer_code(r.model.code).follows_transformers()) {
      throw InputError(fmt::format(
          "--loss {}: {}'s loss over transformers-style models (not with --model-code cs336-basics)", name,
          o.loss == LossKind::kChunkedCrossEntropy ? "torchtune" : "torchtitan"));
    }
    if (a.inference || a.forward_only || a.generate > 0) {
      throw InputError(fmt::format(
          "--loss {}: a training loss does not apply to --inference, --forward-only or --generate", name));
    }
  }
  validate(o);
  if (!a.torch_version.empty()) {
    r.torch_version = parse_torch_version(a.torch_version, "--torch-version");
  }
  if (a.alloc_conf) {
    CachingConfig base;
    base.torch_version = r.torch_version;
    (void)parse_alloc_conf(*a.alloc_conf, "--alloc-conf", base);
    r.alloc_conf = a.alloc_conf;
  }
  r.context.module_loading = parse_module_loading(a.module_loading);
  if (!a.cuda_context.empty()) {
    if (a.gpu.empty()) {
      throw InputError("--cuda-context: needs --gpu (--capacity counts no context)");
    }
    r.context.context_bytes = static_cast<std::int64_t>(parse_size(a.cuda_context, "--cuda-context"));
  }
  if (!a.gpu.empty()) {
    (void)device_memory(a.gpu, 0, r.context);  // a --cuda-context larger than the GPU fails here
  }
  o.warm = parse_warm(a.warm);
  o.compile = a.compile_mode.empty() ? CompileMode::kNone : parse_compile_mode(a.compile_mode);
  o.compile_scope = parse_compile_scope(a.compile_scope);
  if (o.compile == CompileMode::kNone && a.compile_scope != "model") {
    throw InputError("--compile-scope: needs --compile");
  }
  if (a.compile_loss != "auto" && a.compile_loss != "on" && a.compile_loss != "off") {
    throw InputError(
        fmt::format("--compile-loss: unknown value '{}' (expected auto, on or off)", a.compile_loss));
  }
  // torchtune's recipes: `if self._compile: training.compile_loss(self._loss_fn)`
  const bool compiled_chunked_loss =
      o.loss == LossKind::kChunkedCrossEntropy && o.compile != CompileMode::kNone;
  // torchtitan's build_cross_entropy_loss (torchtitan/components/loss.py since pytorch/torchtitan#1033):
  // `if job_config.training.compile: loss_fn = torch.compile(loss_fn)`, with its per-block compile. Not
  // modelled: under loss_parallel (a DTensor loss) or in a pipeline's last stage.
  const bool compiled_torchtitan_loss = o.loss == LossKind::kCrossEntropy &&
                                        o.compile != CompileMode::kNone &&
                                        o.compile_scope == CompileScope::kLayer && !a.loss_parallel &&
                                        a.pp <= 1 && !a.inference && !a.forward_only && a.generate == 0;
  if (a.compile_loss == "on" && !compiled_chunked_loss && !compiled_torchtitan_loss) {
    throw InputError(
        "--compile-loss on: needs --compile with --loss chunked-ce (torchtune's compile_loss compiles "
        "CEWithChunkedOutputLoss.compute_cross_entropy) or with --compile-scope layer and --loss ce "
        "(torchtitan's compiled loss_fn; not modelled with --loss-parallel or --pp; torchtitan-chunked-ce "
        "ran eager: torchtitan removed it when it compiled the loss, pytorch/torchtitan#1033)");
  }
  o.compile_loss = (compiled_chunked_loss || compiled_torchtitan_loss) && a.compile_loss != "off";
  if (a.zero_grad != "set-to-none" && a.zero_grad != "zeros") {
    throw InputError(
        fmt::format("--zero-grad: unknown value '{}' (expected set-to-none or zeros)", a.zero_grad));
  }
  o.zero_grad_set_to_none = a.zero_grad == "set-to-none";
  o.generate_tokens = a.generate;
  o.kv_cache = a.kv_cache;
  if (!a.prompt_len.empty()) {
    PromptLengths lengths = parse_prompt_len(a.prompt_len, a.batch);
    o.seq = lengths.longest;
    o.prompt_lens = std::move(lengths.per_sequence);
  }
  parse_vllm_serving(a, o, r.vllm);
  if (a.generate > 0) {
    o.inference = true;
    o.steps = a.generate;
  }
  o.lora.rank = a.lora_rank;
  o.lora.alpha = a.lora_alpha;
  o.lora.dropout = a.lora_dropout;
  if (!a.lora_targets.empty()) {
    parse_lora_targets(a.lora_targets, o.lora);
  }
  o.lora.method = parse_peft_method(a.peft_method);
  o.lora.use_dora = a.use_dora;
  o.lora.lora_fa = a.lora_fa;
  o.lora.num_virtual_tokens = a.num_virtual_tokens;
  o.lora.encoder_hidden_size = a.encoder_hidden_size;
  o.lora.decompose_factor = a.decompose_factor;
  o.lora.autocast_adapter_dtype = a.autocast_adapter_dtype;
  o.lora.init_r = a.init_r;
  o.lora.prefix_projection = a.prefix_projection;
  if (!a.token_indices.empty()) {
    if (o.lora.method != PeftMethod::kTrainableTokens) {
      throw InputError("--token-indices: a TrainableTokensConfig option (--peft-method trainable-tokens)");
    }
    o.lora.trainable_tokens = parse_token_indices(a.token_indices, r.model.vocab_size);
  }
  o.lora.block_size = o.lora.method == PeftMethod::kBoft ? a.boft_block_size : a.oft_block_size;
  o.lora.block_num = a.boft_block_num;
  o.lora.butterfly_factor = a.boft_n_butterfly_factor;
  o.lora.use_cayley_neumann = a.use_cayley_neumann;
  o.lora.num_cayley_neumann_terms = a.num_cayley_neumann_terms;
  if (!a.feedforward_modules.empty()) {
    if (o.lora.method != PeftMethod::kIa3) {
      throw InputError("--feedforward-modules: an IA3Config option (--peft-method ia3)");
    }
    LoraOptions ff;
    parse_lora_targets(a.feedforward_modules, ff, "--feedforward-modules");
    o.lora.feedforward_modules = ff.targets;
  }
  if (!a.base_weights.empty()) {
    o.bnb.format = parse_base_weights(a.base_weights);
  }
  o.bnb.double_quant = a.bnb_double_quant;
  o.bnb.compute_dtype = parse_bnb_compute_dtype(a.bnb_compute_dtype);
  // a training recipe's call: inference loads the model and runs it as it is
  // torchtune's QLoRA casts nothing to fp32.
  // TRL's SFTTrainer skips prepare_model_for_kbit_training for QLoRA under FSDP or ZeRO-3 ("one should never
  // call peft_module_casting_to_bf16 or prepare_model_for_kbit_training when doing QLoRA + FSDP /
  // DS-Zero3", trl/trainer/sft_trainer.py): the parameters must keep one dtype to be flattened.
  const bool shards_parameters = data_parallel.scheme.starts_with("fsdp") || data_parallel.scheme == "zero3";
  o.bnb.quant_storage = parse_bnb_quant_storage(a.bnb_quant_storage);
  o.bnb.matmul4bit_saves_input = a.bnb_saves_input;
  apply_checkpoint_quantization(a, o.bnb);
  o.bnb.prepare_kbit_training = !a.no_prepare_kbit && !o.inference && !o.forward_only &&
                                o.bnb.format != BnbFormat::kTorchaoNf4 && !shards_parameters;
  if (o.bnb.format == BnbFormat::kNone && (a.bnb_double_quant || a.no_prepare_kbit || a.bnb_saves_input ||
                                           a.bnb_compute_dtype != "fp32" || a.bnb_quant_storage != "uint8")) {
    throw InputError(
        "--bnb-double-quant / --bnb-compute-dtype / --bnb-saves-input / --bnb-quant-storage / "
        "--no-prepare-kbit: need --base-weights");
  }
  o.data_parallel = data_parallel;
  if (a.fsdp_auto_wrap != "peft" && a.fsdp_auto_wrap != "transformer") {
    throw InputError(
        fmt::format("--fsdp-auto-wrap: unknown value '{}' (known: peft, transformer)", a.fsdp_auto_wrap));
  }
  if (a.fsdp_use_orig_params != "true" && a.fsdp_use_orig_params != "false") {
    throw InputError(
        fmt::format("--fsdp-use-orig-params: expected true or false, got '{}'", a.fsdp_use_orig_params));
  }
  const RequestArgs fsdp_defaults;
  if (!data_parallel.scheme.starts_with("fsdp-") &&
      (a.fsdp_auto_wrap != fsdp_defaults.fsdp_auto_wrap ||
       a.fsdp_use_orig_params != fsdp_defaults.fsdp_use_orig_params)) {
    throw InputError("--fsdp-auto-wrap / --fsdp-use-orig-params: FSDP1's options (use them with --fsdp)");
  }
  o.data_parallel.fsdp_peft_wrap = o.lora.enabled() && a.fsdp_auto_wrap == "peft";
  o.data_parallel.fsdp_use_orig_params = a.fsdp_use_orig_params == "true";
  if (!a.master_weights.empty() && o.precision != Precision::kBf16) {
    throw InputError(
        "--master-weights: the optimizer's copy of bf16 parameters (use it with --precision bf16)");
  }
  o.master_weights = a.master_weights.empty() ? default_master_weights(data_parallel.scheme, a.tp, a.pp)
                                              : parse_master_weights(a.master_weights);
  o.offload_activations = data_parallel.offload_activations;
  if (a.activation_offload != "save-on-cpu" && a.activation_offload != "torchtune") {
    throw InputError(fmt::format("--activation-offload: unknown value '{}' (known: save-on-cpu, torchtune)",
                                 a.activation_offload));
  }
  o.activation_offload_torchtune = a.activation_offload == "torchtune";
  if (o.activation_offload_torchtune && !o.offload_activations) {
    throw InputError("--activation-offload torchtune: needs --offload activations");
  }
  if (o.activation_offload_torchtune && o.checkpointing == Checkpointing::kNone) {
    // recipes/lora_finetune_single_device.py and the other recipes, since torchtune 0.4 (commit e99b89007)
    throw InputError(
        "--activation-offload torchtune: torchtune's recipes refuse it without activation checkpointing "
        "(\"enable_activation_offloading should only be True when enable_activation_checkpointing is "
        "True\"); "
        "add --checkpointing full");
  }
  o.optimizer_in_backward = a.optimizer_in_backward;
  o.tensor_parallel = a.tp;
  o.sequence_parallel = a.sequence_parallel;
  o.loss_parallel = a.loss_parallel;
  o.float8.recipe = parse_float8_recipe(a.float8);
  o.float8.fsdp_float8_all_gather = a.float8_all_gather;
  o.float8.amax_history_len = a.fp8_amax_history_len;
  o.float8.te_weight_cache = a.fp8_weight_cache;
  // --ep alone picks the library that runs expert parallelism with the data parallelism asked for:
  // torchtitan's MoE over FSDP2, Megatron-Core's over DDP
  const MoeImpl ep_impl =
      o.data_parallel.scheme.starts_with("fsdp2-") ? MoeImpl::kTorchtitan : MoeImpl::kMegatron;
  o.moe.impl =
      a.moe_impl.empty() ? (a.ep > 1 ? ep_impl : MoeImpl::kTransformers) : parse_moe_impl(a.moe_impl);
  o.moe.expert_parallel = a.ep;
  o.moe.imbalance = a.moe_imbalance;
  o.moe.capacity_factor = a.moe_capacity_factor;
  o.moe.pad_to_capacity = a.moe_pad_to_capacity;
  o.context_parallel.degree = a.cp;
  o.context_parallel.rotate = parse_cp_rotate(a.cp_rotate);
  if (a.cp > 1 && a.cp <= 4096 && data_parallel.world_size % a.cp != 0) {
    throw InputError(fmt::format(
        "--cp {}: does not apply to {} data-parallel rank(s): the context-parallel ranks are some of "
        "them (torchtitan's dp_shard x cp), so --cp must divide their number",
        a.cp, data_parallel.world_size));
  }
  // vLLM's pipeline stages are sized by its start-up (vllm_v1_sizing.cpp), not by the training pipeline.
  const bool vllm_pipeline = a.kv_cache == "paged" && a.generate > 0;
  r.vllm.pipeline_parallel = vllm_pipeline ? a.pp : 1;
  r.vllm.data_parallel = vllm_pipeline ? data_parallel.world_size : 1;
  o.pipeline.stages = vllm_pipeline ? 1 : a.pp;
  if (a.images_per_sample < 0 || a.images_per_sample > 4096) {
    throw InputError(fmt::format("--images-per-sample: expected 0..4096, got {}", a.images_per_sample));
  }
  const auto [image_height, image_width] = parse_image_size(a.image_size);
  for (const auto& [flag, value] : {std::pair{"--image-min-pixels", a.image_min_pixels},
                                    std::pair{"--image-max-pixels", a.image_max_pixels}}) {
    if (value < 0 || value > 65536LL * 65536LL) {
      throw InputError(fmt::format("{}: expected 0..{} pixels, got {}", flag, 65536LL * 65536LL, value));
    }
  }
  if (a.image_max_pixels > 0 && a.image_min_pixels > a.image_max_pixels) {
    throw InputError(fmt::format("--image-min-pixels {} is more than --image-max-pixels {}",
                                 a.image_min_pixels, a.image_max_pixels));
  }
  if (a.freeze_vision_tower != "true" && a.freeze_vision_tower != "false") {
    throw InputError(
        fmt::format("--freeze-vision-tower: expected true or false, got '{}'", a.freeze_vision_tower));
  }
  o.vision.images_per_sample = a.images_per_sample;
  o.vision.image_size = image_height;
  o.vision.image_width = image_width;
  o.vision.min_pixels = a.image_min_pixels;
  o.vision.max_pixels = a.image_max_pixels;
  o.vision.freeze_tower = a.freeze_vision_tower == "true";
  o.pipeline.schedule = parse_pipeline_schedule(a.pp_schedule);
  o.pipeline.virtual_stages = o.pipeline.schedule == PipelineSchedule::kInterleaved ? a.virtual_stages : 1;
  o.pipeline.split = parse_pipeline_split(a.pp_split);
  o.pipeline.first_stage_less_layers = a.pp_first_stage_less_layers;
  o.pipeline.last_stage_less_layers = a.pp_last_stage_less_layers;
  if (a.pp_stage) {
    o.pipeline.stage = *a.pp_stage;
  }
  r.every_pipeline_stage = !a.pp_stage.has_value();
  if (o.loss_item_sync != LossItemSync::kNone && (o.inference || o.forward_only)) {
    throw InputError(
        "--loss-item: the loop reads a training loss; there is none with --forward-only, "
        "--inference or --generate");
  }
  if (o.loss_item_sync != LossItemSync::kNone && o.pipeline.stages > 1) {
    throw InputError("--loss-item with --pp: not modelled (vramsim): only the last stage holds the loss");
  }
  if (!(a.host_op_us >= 0 && a.host_op_us <= 1e6)) {
    throw InputError(fmt::format("--host-op-us: {} is not in 0..1000000", a.host_op_us));
  }
  r.host.host_op_ns = static_cast<TimeNs>(a.host_op_us * 1e3);
  for (const auto& [value, flag] : {std::pair{a.compute_efficiency, "--compute-efficiency"},
                                    std::pair{a.memory_efficiency, "--memory-efficiency"}}) {
    if (!(value > 0.0 && value <= 1.0)) {  // also rejects NaN
      throw InputError(fmt::format("{}: {} is not in (0, 1]", flag, value));
    }
  }
  r.roofline.compute_efficiency = a.compute_efficiency;
  r.roofline.memory_efficiency = a.memory_efficiency;
  validate(o);
  // The work the run simulates, bounded before any of it is done (kMaxLayerPasses).
  {
    const std::int64_t layers = std::max<std::int64_t>(1, r.model.n_layers);
    const std::int64_t passes =
        o.generate_tokens > 0 ? std::int64_t{o.generate_tokens}
                              : 2 * std::int64_t{o.steps} * std::max<std::int64_t>(1, o.grad_accumulation);
    if (passes > kMaxLayerPasses / layers) {
      throw InputError(
          o.generate_tokens > 0
              ? fmt::format(
                    "--generate: {} tokens through {} layers is more than vramsim simulates ({} layer "
                    "passes, about 6 GB of host memory): at most {} tokens for this model",
                    o.generate_tokens, layers, kMaxLayerPasses, kMaxLayerPasses / layers)
              : fmt::format(
                    "--steps x --grad-accumulation: {} x {} training passes through {} layers is more "
                    "than vramsim simulates ({} layer passes, 2 per training pass, about 6 GB of host "
                    "memory): at most {} for this model",
                    o.steps, o.grad_accumulation, layers, kMaxLayerPasses, kMaxLayerPasses / layers / 2));
    }
  }
  if (o.pipeline.stages > 1) {
    (void)pipeline_chunks(r.model.n_layers, o.pipeline);  // layers that do not split fail here
  }
  return r;
}

FitVary parse_fit_vary(std::string_view text, std::string_view option) {
  if (text == "batch") {
    return FitVary::kBatch;
  }
  if (text == "seq") {
    return FitVary::kSeq;
  }
  throw InputError(
      fmt::format("{}: unknown value '{}' (expected batch or seq; max-model-len, max-num-seqs, "
                  "gpu-memory-utilization or tp with --kv-cache paged; mem-fraction-static with "
                  "--serving-engine sglang)",
                  option, text));
}

double parse_margin(std::string_view text, std::string_view option) {
  std::string_view number = text;
  double scale = 1.0;
  if (!number.empty() && number.back() == '%') {
    number.remove_suffix(1);
    scale = 0.01;
  }
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc{} || ptr != number.data() + number.size() || !std::isfinite(value)) {
    throw InputError(fmt::format("{}: not a number or percentage: '{}'", option, text));
  }
  value *= scale;
  if (!(value >= 0.0 && value < 1.0)) {
    throw InputError(fmt::format("{}: must be in [0, 100%), got '{}'", option, text));
  }
  return value;
}

}  // namespace vramsim
