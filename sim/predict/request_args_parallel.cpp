// make_request's room for parallelism: the layout (--world-size, --dp, --tp, --pp, --cp), data parallelism
// (DDP, DeepSpeed ZeRO, FSDP1 / FSDP2 and their options, --offload), tensor and sequence parallelism,
// float8, mixture-of-experts, context parallelism and the pipeline's schedule.
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/predict/request_args_parts.h"

namespace vramsim::request_args {
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

// The layout: --world-size, or --dp x --cp x --tp x --pp (Megatron's world = dp x cp x tp x pp, torchtitan's
// ParallelDims dp_shard x cp x tp x pp). Returns the data-parallel group's size: the ranks holding the same
// part of the model.
int data_parallel_ranks(const RequestArgs& a) {
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
  return world / replica;
}

// The scheme: --zero N, --fsdp STRATEGY [--fsdp2], else DDP over more than one rank.
void parse_data_parallel_scheme(const RequestArgs& a, DataParallelOptions& d) {
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
}

// DDP's and DeepSpeed's options, each refused outside its scheme.
void parse_ddp_and_zero_options(const RequestArgs& a, DataParallelOptions& d) {
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
}

// FSDP1's and FSDP2's options, each refused outside its scheme.
void parse_fsdp_options(const RequestArgs& a, DataParallelOptions& d) {
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
}

}  // namespace

DataParallelOptions parse_data_parallel(const RequestArgs& a) {
  DataParallelOptions d;
  d.world_size = data_parallel_ranks(a);
  parse_data_parallel_scheme(a, d);
  parse_ddp_and_zero_options(a, d);
  parse_fsdp_options(a, d);
  d.zero_redundancy_optimizer = a.zero_redundancy_optimizer;  // validate() checks it is over DDP
  if (a.gpus_per_node < 1 || a.gpus_per_node > 1024) {
    throw InputError(fmt::format("--gpus-per-node: {} is not in 1..1024", a.gpus_per_node));
  }
  d.gpus_per_node = a.gpus_per_node;
  parse_offload(a.offload, d);
  return d;
}

MoeImpl chosen_moe_impl(const RequestArgs& a, const DataParallelOptions& data_parallel) {
  if (!a.moe_impl.empty()) {
    return parse_moe_impl(a.moe_impl);
  }
  // --ep alone picks the library that runs expert parallelism with the data parallelism asked for:
  // torchtitan's MoE over FSDP2, Megatron-Core's over DDP
  if (a.ep > 1) {
    return data_parallel.scheme.starts_with("fsdp2-") ? MoeImpl::kTorchtitan : MoeImpl::kMegatron;
  }
  return MoeImpl::kTransformers;
}

void apply_parallel_args(const RequestArgs& a, const DataParallelOptions& data_parallel, PredictRequest& r) {
  TrainingOptions& o = r.options;
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
  o.moe.impl = chosen_moe_impl(a, data_parallel);
  if (a.etp && o.moe.impl == MoeImpl::kTransformers) {  // make_request applied it to the model's experts
    throw InputError(
        "--expert-tensor-parallel: Megatron-Core's --expert-tensor-parallel-size or torchtitan's "
        "expert_tensor_parallel_degree; it applies to their MoE layers (--moe-impl megatron or torchtitan, "
        "or --ep)");
  }
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
}

void apply_pipeline_args(const RequestArgs& a, const DataParallelOptions& data_parallel, PredictRequest& r) {
  TrainingOptions& o = r.options;
  // vLLM's pipeline stages are sized by its start-up (vllm_v1_sizing.cpp), not by the training pipeline.
  const bool vllm_pipeline = a.kv_cache == "paged" && a.generate > 0;
  r.vllm.pipeline_parallel = vllm_pipeline ? a.pp : 1;
  r.vllm.data_parallel = vllm_pipeline ? data_parallel.world_size : 1;
  o.pipeline.stages = vllm_pipeline ? 1 : a.pp;
  o.pipeline.schedule = parse_pipeline_schedule(a.pp_schedule);
  o.pipeline.virtual_stages = o.pipeline.schedule == PipelineSchedule::kInterleaved ? a.virtual_stages : 1;
  o.pipeline.split = parse_pipeline_split(a.pp_split);
  o.pipeline.first_stage_less_layers = a.pp_first_stage_less_layers;
  o.pipeline.last_stage_less_layers = a.pp_last_stage_less_layers;
  if (a.pp_stage) {
    o.pipeline.stage = *a.pp_stage;
  }
  r.every_pipeline_stage = !a.pp_stage.has_value();
}

}  // namespace vramsim::request_args
