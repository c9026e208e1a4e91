#include "sim/parallel/expert_parallel.h"

#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_method.h"

namespace vramsim {

std::vector<std::int64_t> routed_rows_per_expert(std::int64_t tokens, std::int64_t top_k,
                                                 std::int64_t n_experts, double imbalance) {
  // tokens <= kMaxBatch x kMaxSeq and top_k <= n_experts <= kMaxExperts (validated): no overflow here.
  const std::int64_t assignments = tokens * top_k;
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n_experts), 0);
  if (n_experts == 1) {
    rows[0] = assignments;
    return rows;
  }
  const double hot_exact = imbalance * static_cast<double>(assignments) / static_cast<double>(n_experts);
  // 1e-9: F x mean that is an integer in exact arithmetic stays that integer (1.5 x 64 / 8 = 12).
  auto hot = static_cast<std::int64_t>(std::ceil(hot_exact - 1e-9));
  hot = std::min({hot, tokens, assignments});
  // The rest spread evenly over the others, none above `hot` (F >= 1 makes hot >= ceil(mean), and
  // assignments <= n_experts x tokens keeps their share <= tokens).
  const std::int64_t rest = assignments - hot, others = n_experts - 1;
  rows[0] = hot;
  for (std::int64_t e = 1; e < n_experts; ++e) {
    rows[static_cast<std::size_t>(e)] = rest / others + (e - 1 < rest % others ? 1 : 0);
  }
  return rows;
}

std::int64_t expert_capacity(std::int64_t tokens, std::int64_t top_k, std::int64_t n_experts, double factor) {
  // math.ceil((num_tokens / num_experts) * capacity_factor)
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(tokens * top_k) / static_cast<double>(n_experts) * factor - 1e-9));
}

std::int64_t ExpertLoad::received_rows() const {
  return std::accumulate(rows_per_local_expert.begin(), rows_per_local_expert.end(), std::int64_t{0});
}

ExpertLoad busiest_rank_load(std::int64_t tokens, const MoeConfig& moe, const MoeOptions& options) {
  std::vector<std::int64_t> rows =
      routed_rows_per_expert(tokens, moe.top_k, moe.n_experts, options.imbalance);
  if (options.capacity_factor > 0) {
    const std::int64_t cap = expert_capacity(tokens, moe.top_k, moe.n_experts, options.capacity_factor);
    for (std::int64_t& r : rows) {
      r = options.pad_to_capacity ? cap : std::min(r, cap);
    }
  }
  ExpertLoad load;
  load.sent_rows = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
  // EP rank 0's experts, from each of the ep ranks, and under expert tensor parallelism from each rank of
  // its expert-tensor-parallel group too (Megatron's dispatcher's all-gather after the all-to-all;
  // torchtitan's expert-tensor ranks hold the same tokens already)
  const std::int64_t ep = options.expert_parallel;
  const std::int64_t senders = ep * (options.impl == MoeImpl::kMegatron ? moe.expert_tensor_parallel : 1);
  load.rows_per_etp_rank = 0;
  for (std::int64_t e = 0; e < moe.n_experts / ep; ++e) {
    load.rows_per_local_expert.push_back(rows[static_cast<std::size_t>(e)] * senders);
    load.rows_per_etp_rank += rows[static_cast<std::size_t>(e)] * ep;
  }
  return load;
}

ModelConfig expert_tensor_parallel_rank(const ModelConfig& full, const ModelConfig& rank, int etp) {
  if (etp < 1 || etp > 1024) {
    throw InputError(fmt::format("--expert-tensor-parallel: {} is not in 1..1024", etp));
  }
  ModelConfig m = rank;
  if (full.moe.n_experts == 0) {
    return m;
  }
  // TEGroupedMLP: linear_fc1 of moe_ffn_hidden_size x 2 (gated) columns and linear_fc2 of
  // moe_ffn_hidden_size rows, each divide()d by the expert-tensor-parallel size, which asserts it divides
  if (full.moe.expert_d_ff % etp != 0) {
    throw InputError(
        fmt::format("--expert-tensor-parallel {}: does not divide the experts' {} hidden units of {} "
                    "(Megatron's divide(): \"{} is not divisible by {}\"; the default is --tp)",
                    etp, full.moe.expert_d_ff, full.name, full.moe.expert_d_ff, etp));
  }
  m.moe.expert_d_ff = full.moe.expert_d_ff / etp;
  m.moe.expert_tensor_parallel = etp;
  return m;
}

ModelConfig torchtitan_expert_tensor_parallel_rank(const ModelConfig& full, const ModelConfig& rank, int tp,
                                                   int ep, int etp) {
  if (etp < 1 || etp > 1024) {
    throw InputError(fmt::format("--expert-tensor-parallel: {} is not in 1..1024", etp));
  }
  if (ep > 1 && etp != 1 && etp != tp) {  // ParallelDims._validate (torchtitan/distributed/parallel_dims.py)
    throw InputError(fmt::format(
        "--expert-tensor-parallel {}: torchtitan asserts \"Currently we only support ETP=TP or ETP=1\" "
        "(--tp {})",
        etp, tp));
  }
  ModelConfig m = rank;
  if (full.moe.n_experts == 0 || tp <= 1) {
    return m;
  }
  if (ep > 1 && etp == 1) {  // ExpertParallel: Shard(0) over ep only, each expert whole
    m.moe.expert_d_ff = full.moe.expert_d_ff;
    m.moe.expert_tensor_parallel = 1;
  } else {  // TensorParallel / ExpertTensorParallel: tensor_parallel_rank's ceil(ff / tp), DTensor's rank 0
    m.moe.expert_tensor_parallel = tp;
  }
  return m;
}

ModelConfig expert_parallel_rank(const ModelConfig& model, int ep) {
  if (ep < 1 || ep > 1024) {
    throw InputError(fmt::format("--ep: {} is not in 1..1024", ep));
  }
  if (ep == 1) {
    return model;
  }
  if (model.moe.n_experts == 0) {
    throw InputError(
        fmt::format("--ep: does not apply to {}: it has no mixture-of-experts layers", model.name));
  }
  if (model.moe.n_experts % ep != 0) {  // Megatron's arguments.py: num_experts % expert_model_parallel_size
    throw InputError(
        fmt::format("--ep: {} does not divide the {} experts of {} (Megatron: \"Number of "
                    "experts should be a multiple of expert model parallel_size.\"; torchtitan's "
                    "ExpertParallel._token_dispatch views the counts as [ep, experts / ep])",
                    ep, model.moe.n_experts, model.name));
  }
  ModelConfig m = model;
  m.moe.expert_parallel = ep;
  m.name = fmt::format("{} (expert-parallel rank of {})", model.name, ep);
  return m;
}

namespace {

void validate_routing(const ModelConfig& model, const MoeOptions& o) {
  if (!(o.imbalance >= 1.0 && o.imbalance <= 1e6)) {
    throw InputError(fmt::format(
        "--moe-imbalance: {} is not in 1..1e6 (the busiest expert's tokens over the mean)", o.imbalance));
  }
  const MoeConfig& moe = model.moe;
  if (moe.n_experts == 0) {
    const char* flag = o.imbalance != 1.0                 ? "--moe-imbalance"
                       : o.capacity_factor != 0.0         ? "--moe-capacity-factor"
                       : o.impl != MoeImpl::kTransformers ? "--moe-impl"
                                                          : nullptr;
    if (flag != nullptr) {
      throw InputError(
          fmt::format("{}: does not apply to {}: it has no mixture-of-experts layers", flag, model.name));
    }
    return;
  }
  // One expert gets at most every token once (top-k picks distinct experts): F <= n_experts / top_k.
  const double most = static_cast<double>(moe.n_experts) / static_cast<double>(moe.top_k);
  if (o.imbalance > most + 1e-9) {
    throw InputError(
        fmt::format("--moe-imbalance: {} exceeds {} experts / top-{} = {} (an expert receives each "
                    "token at most once)",
                    o.imbalance, moe.n_experts, moe.top_k, most));
  }
  if (!(o.capacity_factor == 0.0 || (o.capacity_factor > 0.0 && o.capacity_factor <= 1e4))) {
    throw InputError(
        fmt::format("--moe-capacity-factor: {} is not in (0, 10000] (0: dropless)", o.capacity_factor));
  }
  if (o.capacity_factor > 0.0 && o.impl != MoeImpl::kMegatron) {
    throw InputError(
        "--moe-capacity-factor: does not apply to transformers' or torchtitan's MoE, which drop no tokens; "
        "capacity is Megatron-Core's (--moe-impl megatron)");
  }
  if (o.pad_to_capacity && o.capacity_factor == 0.0) {  // MoEAlltoAllTokenDispatcher.__init__'s assert
    throw InputError(
        "--moe-pad-to-capacity: needs --moe-capacity-factor (Megatron asserts "
        "moe_expert_capacity_factor is not None)");
  }
}

// Megatron's MoE under tensor parallelism: sequence parallelism as Megatron demands it.
template <typename Refuse>
void validate_megatron_sequence_parallel(const ModelConfig& model, const TrainingOptions& o,
                                         const Refuse& refuse) {
  const int ep = o.moe.expert_parallel, tp = o.tensor_parallel;
  const auto etp = static_cast<int>(model.moe.expert_tensor_parallel);
  if (tp > 1 && !o.sequence_parallel) {
    if (ep > 1) {  // megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__
      refuse(
          "with --tp: Megatron raises \"When using expert parallelism and tensor parallelism, sequence "
          "parallelism must be used\" (add --sequence-parallel)");
    }
    if (etp > 1) {  // megatron/core/transformer/moe/moe_layer.py MoELayer.forward, while training
      refuse(
          "with --tp: Megatron raises \"During training, performance may degrade if MoE and tensor "
          "parallelism are enabled without also enabling sequence parallelism.\" (add --sequence-parallel, "
          "or --expert-tensor-parallel 1)");
    }
  }
  if (etp > 1 && !o.sequence_parallel) {  // the same check: its group is the expert-tensor-parallel one
    refuse(fmt::format(
        "--expert-tensor-parallel {}: Megatron's MoELayer.forward refuses expert tensor parallelism without "
        "sequence parallelism, which needs --tp > 1 (arguments.py turns it off at tensor parallel size 1)",
        etp));
  }
}

// parallel_state.initialize_model_parallel's expert grid.
void validate_megatron_expert_grid(const ModelConfig& model, const TrainingOptions& o) {
  const int ep = o.moe.expert_parallel, tp = o.tensor_parallel;
  const auto etp = static_cast<int>(model.moe.expert_tensor_parallel);
  const std::string& scheme = o.data_parallel.scheme;
  const int dp = scheme == "none" ? 1 : o.data_parallel.world_size;
  // parallel_state.initialize_model_parallel's expert grid: the tp x dp ranks of a pipeline stage are
  // regrouped as expert-tensor x expert-model x expert-data parallel ranks
  if ((tp * dp) % (etp * ep) != 0) {
    throw InputError(fmt::format(
        "{}: does not apply to {} rank(s) per pipeline stage (--tp {} x {} data-parallel): Megatron's "
        "initialize_model_parallel regroups them as expert-tensor x expert-parallel x expert-data-parallel "
        "ranks and raises \"decoder world_size ({}) is not divisible by "
        "expert_tensor_model_pipeline_parallel "
        "size ({})\" (--expert-tensor-parallel {} x --ep {}; --gpus N adds DDP ranks)",
        ep > 1 ? fmt::format("--ep {}", ep) : fmt::format("--expert-tensor-parallel {}", etp), tp * dp, tp,
        dp, tp * dp * o.pipeline.stages, etp * ep * o.pipeline.stages, etp, ep));
  }
}

void validate_megatron(const ModelConfig& model, const TrainingOptions& o) {
  const MoeOptions& moe = o.moe;
  if (moe.expert_parallel > 1 && moe.impl == MoeImpl::kTransformers) {
    throw InputError(
        "--ep: expert parallelism with transformers' MoE blocks is not modelled (vramsim models "
        "Megatron-Core's, --moe-impl megatron, and torchtitan's, --moe-impl torchtitan)");
  }
  if (moe.impl != MoeImpl::kMegatron) {
    return;
  }
  // --ep N chooses Megatron's layer itself: name the flag the user typed.
  const std::string flag = moe.expert_parallel > 1
                               ? fmt::format("--ep {} (Megatron-Core's MoE layer)", moe.expert_parallel)
                               : "--moe-impl megatron";
  const auto refuse = [&flag](const std::string& what) {
    throw InputError(fmt::format("{}: {}", flag, what));
  };
  if (model.moe.fused_experts) {
    refuse(fmt::format("{}'s experts are fused three-dimensional parameters; not modelled (vramsim)",
                       model.model_type));
  }
  if (o.lora.enabled()) {
    refuse(fmt::format("PEFT's {} does not apply: it wraps transformers' modules, not Megatron-Core's layers",
                       peft_method_info(o.lora.method).name));
  }
  if (o.bnb.format != BnbFormat::kNone) {
    refuse(
        "--base-weights does not apply: bitsandbytes quantizes transformers' nn.Linear layers, not "
        "Megatron-Core's");
  }
  if (o.compile != CompileMode::kNone || o.context_parallel.degree > 1 ||
      o.float8.recipe != Float8Recipe::kNone) {
    refuse("with --compile, --cp or --float8: not modelled (vramsim)");
  }
  if (o.generate_tokens > 0 || o.inference) {
    refuse(
        "inference and generation are not modelled (vramsim models Megatron-Core's MoE layer for "
        "training; use --moe-impl transformers)");
  }
  validate_megatron_sequence_parallel(model, o, refuse);
  const std::string& scheme = o.data_parallel.scheme;
  if (scheme != "none" && scheme != "ddp") {
    refuse(fmt::format(
        "with data parallelism {}: Megatron's distributed optimizer shards expert states over the "
        "expert-data-parallel group, not modelled (vramsim; use ddp, or torchtitan's MoE over FSDP2: "
        "--moe-impl torchtitan --fsdp2)",
        scheme));
  }
  validate_megatron_expert_grid(model, o);
}

// torchtitan's MoE (torchtitan_moe.cpp) and its expert parallelism over FSDP2: what torchtitan refuses and
// what vramsim does not model.
void validate_torchtitan(const ModelConfig& model, const TrainingOptions& o) {
  if (o.moe.impl != MoeImpl::kTorchtitan) {
    return;
  }
  const int ep = o.moe.expert_parallel;
  const std::string flag = ep > 1 ? fmt::format("--ep {} (torchtitan's MoE)", ep) : "--moe-impl torchtitan";
  const auto refuse = [&flag](const std::string& what) {
    throw InputError(fmt::format("{}: {}", flag, what));
  };
  if (model.moe.fused_experts) {
    refuse(fmt::format("{}'s experts are fused three-dimensional parameters; not modelled (vramsim)",
                       model.model_type));
  }
  if (o.lora.enabled() || o.bnb.format != BnbFormat::kNone) {
    refuse("PEFT and bitsandbytes wrap transformers' modules, not torchtitan's; not modelled (vramsim)");
  }
  if (o.compile != CompileMode::kNone || o.float8.recipe != Float8Recipe::kNone) {
    // torchtitan's apply_compile compiles every TransformerBlock; an MoE one with fullgraph=False
    // (pytorch/torchtitan#1519, August 2025: graph breaks at the token dispatch), then around the experts'
    // FSDP graph break (#1895, October 2025), whole since #2741 (April 2026). What such graphs save around
    // grouped_mm and the all-to-all is not modelled. The loss compiled alone (--compile-loss on,
    // compile.components = ["loss"]) acts on the logits only and is predicted.
    refuse(
        "with --compile or --float8: torchtitan's compiled MoE blocks and float8 grouped GEMMs are not "
        "modelled (vramsim; --compile-loss on alone compiles the loss, torchtitan's compile.components "
        "[\"loss\"])");
  }
  if (o.generate_tokens > 0 || o.inference) {
    refuse("inference and generation are not modelled (vramsim models torchtitan's MoE for training)");
  }
  if (o.pipeline.stages > 1) {  // torchtitan runs its MoE with PP too; vramsim does not model it
    refuse("with pipeline stages: not modelled (vramsim)");
  }
  if (o.tensor_parallel > 1 && !o.sequence_parallel) {
    // torchtitan's TP plan always shards the sequence between the blocks: apply_non_moe_tp's
    // SequenceParallel norms, apply_moe_ep_tp's PrepareModuleInputOutput(input_layouts=(Shard(1),)); it has
    // no TP without it (torchtitan/models/deepseek_v3/infra/parallelize.py at 1e8f9acd1)
    refuse(
        "with --tp: torchtitan shards the sequence between the blocks whenever TP is on (SequenceParallel "
        "norms, the MoE's input all-gathered from Shard(1)): add --sequence-parallel");
  }
  const std::string& scheme = o.data_parallel.scheme;
  const bool fsdp2 = scheme.starts_with("fsdp2-");
  if (!fsdp2 && !(scheme == "none" && ep == 1)) {
    // torchtitan wraps the model in FSDP2 whenever EP is on (parallelize_deepseekv3: `if
    // parallel_dims.fsdp_enabled or parallel_dims.ep_enabled: apply_fsdp(...)`)
    refuse(fmt::format(
        "needs FSDP2 (--fsdp2): torchtitan applies fully_shard whenever expert parallelism is on, and its "
        "MoE with data parallelism {} is not modelled (vramsim)",
        scheme));
  }
}

}  // namespace

void validate_moe_options(const ModelConfig& model, const TrainingOptions& options) {
  validate_routing(model, options.moe);
  validate_megatron(model, options);
  validate_torchtitan(model, options);
}

MoeImpl parse_moe_impl(const std::string& text) {
  if (text == "transformers") {
    return MoeImpl::kTransformers;
  }
  if (text == "megatron") {
    return MoeImpl::kMegatron;
  }
  if (text == "torchtitan") {
    return MoeImpl::kTorchtitan;
  }
  throw InputError(
      fmt::format("--moe-impl: unknown value '{}' (known: transformers, megatron, torchtitan)", text));
}

const char* moe_impl_name(MoeImpl impl) {
  switch (impl) {
    case MoeImpl::kMegatron:
      return "megatron";
    case MoeImpl::kTorchtitan:
      return "torchtitan";
    case MoeImpl::kTransformers:
      break;
  }
  return "transformers";
}

}  // namespace vramsim
