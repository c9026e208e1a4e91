#include "sim/training/training_options.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/inference/hf_kv_cache.h"
#include "sim/parallel/pipeline_parallel.h"

namespace vramsim {
namespace {

template <typename E, std::size_t N>
E parse_enum(const std::array<std::pair<std::string_view, E>, N>& table, std::string_view text,
             std::string_view option) {
  std::vector<std::string_view> known;
  for (const auto& [name, value] : table) {
    if (name == text) {
      return value;
    }
    known.push_back(name);
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: {})", option, text, fmt::join(known, ", ")));
}

template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<std::string_view, E>, N>& table, E value) {
  for (const auto& [name, v] : table) {
    if (v == value) {
      return name;
    }
  }
  return "?";
}

constexpr std::array<std::pair<std::string_view, Precision>, 4> kPrecisions{{
    {"fp32", Precision::kFp32},
    {"amp-fp16", Precision::kAmpFp16},
    {"amp-bf16", Precision::kAmpBf16},
    {"bf16", Precision::kBf16},
}};

constexpr std::array<std::pair<std::string_view, OptimizerKind>, 8> kOptimizers{{
    {"sgd", OptimizerKind::kSgd},
    {"sgd-momentum", OptimizerKind::kSgdMomentum},
    {"adam", OptimizerKind::kAdam},
    {"adamw", OptimizerKind::kAdamW},
    {"adamw-8bit", OptimizerKind::kAdamW8bit},
    {"adafactor", OptimizerKind::kAdafactor},
    {"paged-adamw", OptimizerKind::kPagedAdamW},
    {"paged-adamw-8bit", OptimizerKind::kPagedAdamW8bit},
}};

constexpr std::array<std::pair<std::string_view, OptimizerImpl>, 4> kImpls{{
    {"foreach", OptimizerImpl::kForeach},
    {"fused", OptimizerImpl::kFused},
    {"for-loop", OptimizerImpl::kForLoop},
    {"single-tensor", OptimizerImpl::kSingleTensor},
}};

constexpr std::array<std::pair<std::string_view, Checkpointing>, 4> kCheckpointing{{
    {"none", Checkpointing::kNone},
    {"full", Checkpointing::kFull},
    {"selective", Checkpointing::kSelective},
    {"selective-op", Checkpointing::kSelectiveOp},
}};

constexpr std::array<std::pair<std::string_view, LossKind>, 4> kLosses{{
    {"ce", LossKind::kCrossEntropy},
    {"ce-shift-logits", LossKind::kCrossEntropyShiftLogits},
    {"chunked-ce", LossKind::kChunkedCrossEntropy},
    {"torchtitan-chunked-ce", LossKind::kTorchtitanChunkedCrossEntropy},
}};

constexpr std::array<std::pair<std::string_view, LossItemSync>, 3> kLossItemSyncs{{
    {"none", LossItemSync::kNone},
    {"after-backward", LossItemSync::kAfterBackward},
    {"after-step", LossItemSync::kAfterStep},
}};

// Canonical names first: attention_name() returns the first match.
constexpr std::array<std::pair<std::string_view, AttentionKind>, 8> kAttention{{
    {"eager", AttentionKind::kEager},
    {"sdpa", AttentionKind::kSdpa},
    {"sdpa-flash", AttentionKind::kSdpaFlash},
    {"sdpa-efficient", AttentionKind::kSdpaEfficient},
    {"sdpa-math", AttentionKind::kSdpaMath},
    {"flash_attention_2", AttentionKind::kFlashAttention2},
    {"math", AttentionKind::kEager},
    {"flash", AttentionKind::kSdpaFlash},
}};

constexpr std::array<std::pair<std::string_view, WarmProcess>, 3> kWarm{{
    {"none", WarmProcess::kNone},
    {"forward", WarmProcess::kForward},
    {"step", WarmProcess::kStep},
}};

constexpr std::array<std::pair<std::string_view, Float8Recipe>, 4> kFloat8Recipes{{
    {"none", Float8Recipe::kNone},
    {"tensorwise", Float8Recipe::kTensorwise},
    {"rowwise", Float8Recipe::kRowwise},
    {"te", Float8Recipe::kTeDelayed},
}};

constexpr std::array<std::pair<std::string_view, CpRotate>, 2> kCpRotate{{
    {"allgather", CpRotate::kAllGather},
    {"alltoall", CpRotate::kAllToAll},
}};

constexpr std::array<std::pair<std::string_view, CompileMode>, 5> kCompileModes{{
    {"none", CompileMode::kNone},
    {"default", CompileMode::kDefault},
    {"reduce-overhead", CompileMode::kReduceOverhead},
    {"max-autotune", CompileMode::kMaxAutotune},
    {"max-autotune-no-cudagraphs", CompileMode::kMaxAutotuneNoCudagraphs},
}};
constexpr std::array<std::pair<std::string_view, CompileScope>, 3> kCompileScopes{{
    {"model", CompileScope::kModel},
    {"model-and-loss", CompileScope::kModelAndLoss},
    {"layer", CompileScope::kLayer},
}};

// "adamw-fused" -> ("adamw", "fused"); a kind alone -> (kind, "").
std::pair<std::string_view, std::string_view> split_impl(std::string_view text) {
  for (const auto& [impl, value] : kImpls) {
    (void)value;
    if (text.size() > impl.size() + 1 && text.ends_with(impl) && text[text.size() - impl.size() - 1] == '-') {
      return {text.substr(0, text.size() - impl.size() - 1), impl};
    }
  }
  return {text, {}};
}

}  // namespace

namespace {

// A PEFT method other than LoRA on a Megatron model (--tp): Megatron's ColumnParallelLinear and
// RowParallelLinear are torch.nn.Module subclasses, not torch.nn.Linear, and only LoRA has layers for them
// (peft/tuners/lora/tp_layer.py, dispatched by LoraConfig.megatron_config). The other tuners' dispatch takes
// torch.nn.Linear and the convolutions (and transformers' Conv1D), and raises for anything else: IA3, VeRA,
// AdaLoRA, OFT, BOFT in their _create_new_module ("Target module {target} is not supported. Currently, only
// the following modules are supported: ..."), LoHa and LoKr in LycorisTuner._create_new_module
// (peft/tuners/lycoris_utils.py: "Target module of type {type(target)} not supported, currently only
// adapters for Conv2d, Conv1d, Linear are supported"). Prompt learning and trainable tokens do not wrap
// linears: those are not modelled with --tp.
[[noreturn]] void refuse_peft_method_on_megatron_linears(PeftMethod method) {
  const std::string name(peft_method_info(method).name);
  switch (method) {
    case PeftMethod::kLoha:
    case PeftMethod::kLokr:
      throw InputError(fmt::format(
          "--peft-method {} with --tp: PEFT refuses Megatron's parallel linears (\"Target module of type "
          "<class 'megatron.core.tensor_parallel.layers.ColumnParallelLinear'> not supported, currently only "
          "adapters for Conv2d, Conv1d, Linear are supported\"; only LoRA has layers for them)",
          name));
    case PeftMethod::kIa3:
    case PeftMethod::kVera:
    case PeftMethod::kAdalora:
    case PeftMethod::kOft:
    case PeftMethod::kBoft:
      throw InputError(
          fmt::format("--peft-method {} with --tp: PEFT refuses Megatron's parallel linears (\"Target module "
                      "{{target}} is not supported. Currently, only the following modules are supported: "
                      "`torch.nn.Linear`, ...\"; only LoRA has layers for them)",
                      name));
    default:
      throw InputError(fmt::format("--peft-method {} with --tp is not modelled (vramsim)", name));
  }
}

// torchao float8 and context parallelism: what the libraries refuse, and what vramsim does not model.
void validate_float8_and_context_parallel(const TrainingOptions& o) {
  const bool training = !o.inference && !o.forward_only && o.generate_tokens == 0;
  if (o.float8.recipe != Float8Recipe::kNone) {
    if (o.precision != Precision::kBf16) {
      // torchtitan trains Float8 under FSDP2's bf16 param_dtype; the casts read bf16 activations.
      throw InputError("--float8: under --precision " + std::string(precision_name(o.precision)) +
                       " not modelled (vramsim models torchtitan's bf16 compute: --precision bf16)");
    }
    if (!training) {
      throw InputError(
          "--float8: inference with Float8Linear is not modelled (vramsim; torchao has float8 inference "
          "APIs)");
    }
    if (o.lora.enabled() ||
        o.bnb.format != BnbFormat::kNone) {  // a PEFT method wraps the linears float8 converts
      throw InputError(
          "--float8: not modelled together with --lora-rank, --peft-method or --base-weights (vramsim)");
    }
    // --float8 with --tp is torchtitan's TP plan with float8 (parallelize_llama.py apply_tp): tensorwise
    // runs torchao's float8 tensor parallelism, rowwise regular TP (float8_linear.h).
    if (o.tensor_parallel > 1 && o.float8.recipe == Float8Recipe::kTeDelayed) {
      throw InputError(
          "--float8 te: te.Linear's tensor parallelism (parallel_mode, tp_group) is not modelled with --tp "
          "(vramsim)");
    }
  }
  if (o.float8.amax_history_len < 1 || o.float8.amax_history_len > 1048576) {
    throw InputError(
        fmt::format("--fp8-amax-history-len: {} is not in 1..1048576", o.float8.amax_history_len));
  }
  if (o.float8.te_weight_cache && o.float8.recipe != Float8Recipe::kTeDelayed) {
    throw InputError("--fp8-weight-cache: te.Linear's weight workspaces (use it with --float8 te)");
  }
  if (o.float8.recipe == Float8Recipe::kTeDelayed && o.data_parallel.scheme.starts_with("zero")) {
    throw InputError("--float8 te: with DeepSpeed ZeRO is not modelled (vramsim)");
  }
  if (o.float8.recipe == Float8Recipe::kTeDelayed && o.compile != CompileMode::kNone) {
    throw InputError("--float8 te: te.Linear under --compile-mode is not modelled (vramsim)");
  }
  if (o.float8.recipe == Float8Recipe::kTeDelayed && o.checkpointing == Checkpointing::kSelectiveOp) {
    // torch's op-level SAC chooses among aten ops; TE's GEMMs and casts are its own extension's calls
    throw InputError("--float8 te: with --checkpointing selective-op is not modelled (vramsim)");
  }
  if (o.float8.fsdp_float8_all_gather) {
    if (o.float8.recipe != Float8Recipe::kTensorwise) {
      // torchtitan's Float8LinearConverter: "enable_fsdp_float8_all_gather is only supported for tensorwise"
      throw InputError("--float8-all-gather: torchao supports it with --float8 tensorwise only");
    }
    if (!o.data_parallel.scheme.starts_with("fsdp2-")) {
      throw InputError("--float8-all-gather: FSDP2's all-gather (use it with --fsdp2)");
    }
  }
  const int cp = o.context_parallel.degree;
  if (cp < 1 || cp > 4096) {
    throw InputError(fmt::format("--cp: {} is not in 1..4096", cp));
  }
  if (cp > 1) {
    if (!training) {
      throw InputError("--cp: context parallelism outside training steps is not modelled (vramsim)");
    }
    if (o.seq % (2 * cp) != 0) {
      // torch/distributed/tensor/experimental/_attention.py _RoundRobinLoadBalancer / context_parallel:
      // the sequence is cut into 2 x cp chunks
      throw InputError(fmt::format(
          "--cp {}: --seq {} must be a multiple of 2 x {} (the load-balanced chunks of context_parallel)", cp,
          o.seq, cp));
    }
    // PEFT adapters and quantized base weights compose by construction: context_parallel only swaps SDPA
    // for ring attention and shards the batch's buffers along the sequence, so an adapted (or NF4) linear
    // runs on the rank's seq / N tokens like any other (the step is built at that length,
    // context_parallel_rank_options). torchtune's lora_finetune_distributed.py (pytorch/torchtune
    // 10c31c0, #2879) takes context_parallel_dim for LoRA, DoRA and QLoRA and shards with FSDP2 over the
    // flattened dp_shard_cp mesh, which is what --gpus N --cp C --fsdp2 models. The PEFT methods that change
    // the sequence itself are refused with their reason in check_peft_job (peft_method.cpp).
  }
}

}  // namespace

void validate(const TrainingOptions& o) {
  validate(o.lora);
  if (o.compile != CompileMode::kNone) {
    // What the compiled path does not model yet: each of these changes what is captured or where the graph
    // breaks (module hooks that gather parameters, a pipeline's stage split). Saved-tensor hooks around a
    // compiled call (--offload activations) compose: they pack what the compiled graph saves
    // (EagerTape::function_node).
    const auto refuse = [](std::string_view what) {
      throw InputError(fmt::format("--compile: not modelled together with {}", what));
    };
    // FSDP's module hooks (unshard before, reshard after each wrapped unit) break a whole-model graph; DDP's
    // and ZeRO-1/2's hooks act on gradients only
    if (o.data_parallel.scheme.find("fsdp") != std::string::npos && o.compile_scope != CompileScope::kLayer) {
      refuse("--data-parallel " + o.data_parallel.scheme +
             " (use --compile-scope layer, as torchtitan does)");
    }
    if (o.data_parallel.scheme == "zero3") {
      refuse("ZeRO-3");
    }
    // torchtitan compiles each TransformerBlock after applying TP and splitting the pipeline stages
    // (apply_compile in torchtitan/models/llama3/infra/parallelize.py): a layer's graph then holds its
    // sharded ops and the tensor-parallel collectives, which Inductor runs as extern kernels.
    if ((o.pipeline.stages > 1 || o.tensor_parallel > 1) && o.compile_scope != CompileScope::kLayer) {
      refuse(
          std::string(o.pipeline.stages > 1 ? "pipeline" : "tensor") +
          " parallelism unless --compile-scope layer (each decoder layer compiled on its own, as torchtitan "
          "does)");
    }
    if (o.generate_tokens > 0) {
      refuse("--generate");
    }
    if (o.loss == LossKind::kChunkedCrossEntropy && o.compile_scope != CompileScope::kLayer) {
      refuse("--loss chunked-ce unless --compile-scope layer (the model's output is a list of chunks)");
    }
    // torchtitan's train step calls its loss_fn on the model's output, outside the compiled model
    if (o.loss == LossKind::kTorchtitanChunkedCrossEntropy &&
        o.compile_scope == CompileScope::kModelAndLoss) {
      refuse(
          "--loss torchtitan-chunked-ce and --compile-scope model-and-loss (torchtitan's train step runs "
          "its loss_fn outside the compiled model)");
    }
  }
  validate_float8_and_context_parallel(o);
  if (o.generate_tokens < 0 || o.generate_tokens > kMaxPasses) {
    throw InputError(
        fmt::format("--generate: {} new tokens is out of range (1..{})", o.generate_tokens, kMaxPasses));
  }
  if (o.generate_tokens > 0) {
    const std::vector<std::string_view> caches = kv_cache_names();
    if (std::find(caches.begin(), caches.end(), o.kv_cache) == caches.end()) {
      throw InputError(
          fmt::format("--kv-cache: unknown cache '{}' (known: {})", o.kv_cache, fmt::join(caches, ", ")));
    }
  }
  if (o.block_size < 1 || o.block_size > kMaxVllmBlockSize) {
    throw InputError(
        fmt::format("--block-size: must be in 1..{} tokens, got {}", kMaxVllmBlockSize, o.block_size));
  }
  if (o.num_gpu_blocks < 0 || o.num_gpu_blocks > kMaxSeq) {
    throw InputError(
        fmt::format("--kv-cache paged: {} blocks is out of range (0..{})", o.num_gpu_blocks, kMaxSeq));
  }
  if (o.generate_tokens == 0 && o.kv_cache != "dynamic") {
    throw InputError(fmt::format("--kv-cache {}: needs --generate", o.kv_cache));
  }
  if (!o.prompt_lens.empty()) {
    if (static_cast<std::int64_t>(o.prompt_lens.size()) != o.batch) {
      throw InputError(
          fmt::format("--prompt-len: {} lengths for a batch of {}", o.prompt_lens.size(), o.batch));
    }
    if (o.generate_tokens == 0) {
      throw InputError("--prompt-len: prompts of different lengths need --generate");
    }
  }
  if (o.bnb.format != BnbFormat::kNone) {
    // Data parallelism composes by what each scheme does to parameters: DDP and ZeRO-1/2 leave the frozen
    // quantized weights whole on every rank; FSDP1 and ZeRO-3 flatten and shard the packed weight like any
    // tensor of its quant_storage dtype; FSDP2 shards torchao's NF4Tensor by its inner tensors
    // (torchao_nf4.h). Megatron's layers are not modelled.
    const std::string& scheme = o.data_parallel.scheme;
    const bool shards_parameters = scheme.starts_with("fsdp") || scheme == "zero3";
    if (o.tensor_parallel > 1 || o.pipeline.stages > 1) {
      throw InputError(
          "--base-weights: quantized base weights are not modelled with Megatron's --tp or --pp (vramsim)");
    }
    if (shards_parameters && o.bnb.format == BnbFormat::kInt8) {
      throw InputError(
          "--base-weights int8: sharding bitsandbytes' Int8Params (FSDP, ZeRO-3) is not modelled (vramsim); "
          "4-bit weights with --bnb-quant-storage bf16 are");
    }
    if (shards_parameters && o.bnb.format == BnbFormat::kTorchaoNf4 && !scheme.starts_with("fsdp2-")) {
      throw InputError(
          "--base-weights torchao-nf4: torchtune shards NF4Tensor with FSDP2 only; FSDP1 and ZeRO-3 with it "
          "are not modelled (vramsim)");
    }
    // torchtune's load_from_full_model_state_dict shards NF4Tensor itself and raises on a 2-D mesh
    // (torchtune/training/_distributed.py: NotImplementedError(f"only support 1D FSDP but got {mesh.ndim}")).
    if (o.bnb.format == BnbFormat::kTorchaoNf4 && scheme == "fsdp2-hybrid-shard") {
      throw InputError(
          "--base-weights torchao-nf4 with FSDP2 hybrid-shard: torchtune refuses NF4 weights on a 2-D mesh "
          "(\"only support 1D FSDP but got 2\", load_from_full_model_state_dict)");
    }
    if (o.bnb.format == BnbFormat::kTorchaoNf4 && scheme.starts_with("fsdp2-") &&
        o.data_parallel.offload_params) {
      throw InputError(
          "--offload params with --base-weights torchao-nf4: FSDP2's CPUOffloadPolicy of NF4Tensor shards "
          "(every inner tensor copied to the device per all-gather) is not modelled (vramsim)");
    }
    if (shards_parameters && scheme.starts_with("fsdp2-") && o.bnb.format != BnbFormat::kTorchaoNf4) {
      throw InputError(
          "--base-weights: bitsandbytes' Params4bit under FSDP2 (fully_shard) is not modelled (vramsim); "
          "FSDP1 (--fsdp) and ZeRO-3 are");
    }
    if (!o.lora.enabled() && !o.inference && !o.forward_only && o.generate_tokens == 0) {
      throw InputError(
          "--base-weights: transformers refuses to fine-tune a purely quantized model; add --lora-rank "
          "(QLoRA) or run --inference");
    }
  }
  validate(o.pipeline, o.grad_accumulation);
  if (o.data_parallel.zero_redundancy_optimizer &&
      (o.data_parallel.scheme != "ddp" || o.data_parallel.world_size < 2)) {
    throw InputError(
        "--zero-redundancy-optimizer: shards the optimizer over a DDP group: needs --world-size 2 or more "
        "and plain DDP (not --zero 1-3 or --fsdp)");
  }
  if (o.optimizer_in_backward && o.grad_accumulation > 1) {
    // recipes/full_finetune_single_device.py and full_finetune_distributed.py raise it
    throw InputError(
        "--optimizer-in-backward: torchtune refuses gradient accumulation with it (\"Gradient accumulation "
        "is not supported with optimizer in bwd\")");
  }
  // torchtune runs optimizer_in_bwd on one device and over FSDP2 (full_finetune_distributed.py), whose
  // foreach_reduce calls the sharded parameters' hooks.
  const bool fsdp2 = o.data_parallel.scheme.starts_with("fsdp2-");
  if (o.optimizer_in_backward && ((o.data_parallel.scheme != "none" && !fsdp2) || o.pipeline.stages > 1)) {
    throw InputError(
        "--optimizer-in-backward: not modelled with DDP, ZeRO, FSDP1 or --pp (vramsim; on one GPU and "
        "over FSDP2 it is, as torchtune's recipes run it)");
  }
  if (o.optimizer_in_backward && fsdp2 && o.data_parallel.offload_params) {
    throw InputError(
        "--optimizer-in-backward with --offload params: FSDP2's CPUOffloadPolicy steps on the host's "
        "gradient "
        "shards; not modelled (vramsim)");
  }
  if (o.activation_offload_torchtune && (!o.offload_activations || o.pipeline.stages > 1)) {
    throw InputError(
        "--activation-offload torchtune: needs --offload activations, and is not modelled with --pp");
  }
  if (o.sequence_parallel && o.tensor_parallel < 2) {
    throw InputError("--sequence-parallel: needs tensor parallelism (--tp 2 or more)");
  }
  if (o.loss_parallel && o.tensor_parallel < 2) {
    throw InputError(
        "--loss-parallel: needs tensor parallelism (--tp 2 or more): the logits must be sharded "
        "on the vocabulary");
  }
  if (o.loss_parallel && o.loss != LossKind::kCrossEntropy) {
    throw InputError(
        "--loss-parallel: with --loss chunked-ce, ce-shift-logits or torchtitan-chunked-ce is not modelled "
        "(vramsim; torchtitan's loss_parallel runs F.cross_entropy over the whole logits)");
  }
  if (o.loss_parallel && (o.forward_only || o.inference || o.generate_tokens > 0)) {
    throw InputError(
        "--loss-parallel: a training loss does not apply to --inference, --forward-only or "
        "--generate");
  }
  if (o.sequence_parallel && o.generate_tokens > 0) {
    throw InputError("--sequence-parallel: not modelled with --generate");
  }
  if (o.pipeline.stages > 1 && (o.forward_only || o.inference || o.generate_tokens > 0)) {
    throw InputError(
        "--pp: pipeline parallelism with --forward-only, --inference or --generate is not modelled (vramsim "
        "models training steps; vLLM serving, --generate N --kv-cache paged, takes --pp)");
  }
  // --pp: each stage adapts the linears of its own layers (create_parameters' keep filter), whichever
  // method wraps them (peft_method.h; check_peft_job says which job shapes a method is not modelled with);
  // --tp: PEFT's LoraParallelLinear (below).
  if (o.lora.enabled() && o.tensor_parallel > 1) {
    // PEFT's LoraParallelLinear (peft/tuners/lora/tp_layer.py, LoraConfig.megatron_config) adapts Megatron's
    // ColumnParallelLinear with lora_A whole and lora_B split by columns, and RowParallelLinear with lora_A
    // split by rows and lora_B whole: the adapters of the rank's slice of the weight, which is what the
    // rank's model builds (its RowParallelLinear lora_A's output is all-reduced in place).
    if (o.lora.method != PeftMethod::kLora) {
      refuse_peft_method_on_megatron_linears(o.lora.method);
    }
    if (o.lora.use_dora) {
      throw InputError(
          "--use-dora with --tp: PEFT refuses it (\"LoraParallelLinear does not support DoRA yet, please set "
          "it to False\")");
    }
  }
  if (o.batch <= 0 || o.batch > kMaxBatch) {
    throw InputError(fmt::format("--batch: must be in 1..{}, got {}", kMaxBatch, o.batch));
  }
  if (o.seq <= 0 || o.seq > kMaxSeq) {
    throw InputError(fmt::format("--seq: must be in 1..{}, got {}", kMaxSeq, o.seq));
  }
  if (o.batch > kMaxTokens / o.seq) {
    throw InputError(
        fmt::format("--batch x --seq: {} x {} tokens per micro-batch is more than the {} vramsim "
                    "models",
                    o.batch, o.seq, kMaxTokens));
  }
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    throw InputError(fmt::format("--dropout: must be in [0, 1), got {}", o.dropout));
  }
  if (o.grad_accumulation <= 0 || o.grad_accumulation > kMaxPasses) {
    throw InputError(
        fmt::format("--grad-accumulation: must be in 1..{}, got {}", kMaxPasses, o.grad_accumulation));
  }
  if (o.steps <= 0 || o.steps > kMaxPasses) {
    throw InputError(fmt::format("--steps: must be in 1..{}, got {}", kMaxPasses, o.steps));
  }
  if (o.grad_accumulation > kMaxPasses / o.steps) {
    throw InputError(
        fmt::format("--steps x --grad-accumulation: {} x {} micro-batches is more than the {} "
                    "vramsim simulates",
                    o.steps, o.grad_accumulation, kMaxPasses));
  }
}

Precision parse_precision(std::string_view text, std::string_view option) {
  return parse_enum(kPrecisions, text, option);
}

OptimizerKind parse_optimizer(std::string_view text, std::string_view option) {
  return parse_enum(kOptimizers, split_impl(text).first, option);
}

OptimizerImpl parse_optimizer_impl(std::string_view text, OptimizerImpl fallback, std::string_view option) {
  const auto [kind, impl] = split_impl(text);
  (void)parse_enum(kOptimizers, kind, option);
  return impl.empty() ? fallback : parse_enum(kImpls, impl, option);
}

Checkpointing parse_checkpointing(std::string_view text, std::string_view option) {
  return parse_enum(kCheckpointing, text, option);
}

LossKind parse_loss(std::string_view text, std::string_view option) {
  return parse_enum(kLosses, text, option);
}

LossItemSync parse_loss_item_sync(std::string_view text, std::string_view option) {
  return parse_enum(kLossItemSyncs, text, option);
}

AttentionKind parse_attention(std::string_view text, std::string_view option) {
  return parse_enum(kAttention, text, option);
}

AttentionKind resolve_attention(AttentionKind attention, std::int64_t head_dim, Precision precision,
                                int compute_capability, bool requires_grad, bool attn_mask) {
  if (attention != AttentionKind::kSdpa) {
    return attention;
  }
  // sdp_utils.cpp: use_flash_attention needs fp16/bf16 q/k/v, head_dim <= 256 and a multiple of 8, sm80+;
  // check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89 keeps backward on 8.6 / 8.9 to 192;
  // use_mem_efficient_attention takes fp32 too (alignment 4) and any head size.
  const bool half = precision != Precision::kFp32;
  const bool ampere_or_newer = compute_capability == 0 || compute_capability >= 80;
  const bool sm86_89 = compute_capability == 86 || compute_capability == 89;
  const int flash_max = sm86_89 && requires_grad ? 192 : 256;
  if (half && !attn_mask && head_dim <= flash_max && head_dim % 8 == 0 && ampere_or_newer) {
    return AttentionKind::kSdpaFlash;
  }
  if (head_dim % (half ? 8 : 4) == 0) {
    return AttentionKind::kSdpaEfficient;
  }
  return AttentionKind::kSdpaMath;
}

bool materialises_scores(AttentionKind kind) {
  return kind == AttentionKind::kEager || kind == AttentionKind::kSdpaMath;
}

WarmProcess parse_warm(std::string_view text, std::string_view option) {
  return parse_enum(kWarm, text, option);
}
std::string_view warm_name(WarmProcess w) { return name_of(kWarm, w); }
Float8Recipe parse_float8_recipe(std::string_view text, std::string_view option) {
  return parse_enum(kFloat8Recipes, text, option);
}
std::string_view float8_recipe_name(Float8Recipe r) { return name_of(kFloat8Recipes, r); }
CpRotate parse_cp_rotate(std::string_view text, std::string_view option) {
  return parse_enum(kCpRotate, text, option);
}
std::string_view cp_rotate_name(CpRotate r) { return name_of(kCpRotate, r); }
CompileMode parse_compile_mode(std::string_view text, std::string_view option) {
  return parse_enum(kCompileModes, text, option);
}
CompileScope parse_compile_scope(std::string_view text, std::string_view option) {
  return parse_enum(kCompileScopes, text, option);
}
std::string_view compile_mode_name(CompileMode m) { return name_of(kCompileModes, m); }

std::string_view precision_name(Precision p) { return name_of(kPrecisions, p); }
std::string_view optimizer_name(OptimizerKind o) { return name_of(kOptimizers, o); }
std::string_view optimizer_impl_name(OptimizerImpl i) { return name_of(kImpls, i); }
std::string_view checkpointing_name(Checkpointing c) { return name_of(kCheckpointing, c); }
std::string_view attention_name(AttentionKind a) { return name_of(kAttention, a); }

std::optional<DType> autocast_dtype(Precision p) {
  switch (p) {
    case Precision::kAmpFp16:
      return DType::kFloat16;
    case Precision::kAmpBf16:
      return DType::kBFloat16;
    default:
      return std::nullopt;
  }
}

DType parameter_dtype(Precision p) { return p == Precision::kBf16 ? DType::kBFloat16 : DType::kFloat32; }

MasterWeights parse_master_weights(std::string_view text, std::string_view option) {
  if (text == "fp32") {
    return MasterWeights::kFp32;
  }
  if (text == "none") {
    return MasterWeights::kNone;
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: fp32, none)", option, text));
}

std::string_view master_weights_name(MasterWeights m) { return m == MasterWeights::kFp32 ? "fp32" : "none"; }

MasterWeights default_master_weights(std::string_view data_parallel_scheme, int tensor_parallel, int stages) {
  const bool deepspeed = data_parallel_scheme.starts_with("zero");
  const bool fsdp = data_parallel_scheme.starts_with("fsdp");
  const bool megatron = tensor_parallel > 1 || stages > 1;
  return deepspeed || fsdp || megatron ? MasterWeights::kFp32 : MasterWeights::kNone;
}

namespace {
bool bitsandbytes_optimizer(OptimizerKind k) {
  return k == OptimizerKind::kAdamW8bit || k == OptimizerKind::kPagedAdamW ||
         k == OptimizerKind::kPagedAdamW8bit;
}
}  // namespace

bool steps_fp32_master(const TrainingOptions& o) {
  return o.precision == Precision::kBf16 && o.master_weights == MasterWeights::kFp32 &&
         !bitsandbytes_optimizer(o.optimizer);
}

std::string precision_regime(const TrainingOptions& o) {
  switch (o.precision) {
    case Precision::kFp32:
      return "fp32 parameters, gradients and optimizer states";
    case Precision::kAmpFp16:
    case Precision::kAmpBf16:
      return fmt::format("torch.autocast({}): fp32 parameters, gradients and optimizer states; {} matmuls",
                         o.precision == Precision::kAmpFp16 ? "float16" : "bfloat16",
                         o.precision == Precision::kAmpFp16 ? "fp16" : "bf16");
    case Precision::kBf16:
      break;
  }
  if (bitsandbytes_optimizer(o.optimizer)) {
    return "bf16 parameters and gradients; bitsandbytes updates them in place (no master copy)";
  }
  const std::string& dp = o.data_parallel.scheme;
  const bool fsdp_sharded = dp.starts_with("fsdp") && dp != "fsdp-no-shard";
  if (o.master_weights == MasterWeights::kFp32 && fsdp_sharded && o.bnb.format == BnbFormat::kNone) {
    return "FSDP mixed precision on a model built in fp32: fp32 sharded parameters, gradient shards and "
           "optimizer states, bf16 parameters only while a unit is unsharded; no separate master copy "
           "(--master-weights fp32)";
  }
  return o.master_weights == MasterWeights::kFp32
             ? "bf16 parameters and gradients; fp32 master weights and optimizer states (--master-weights "
               "fp32)"
             : "bf16 parameters, gradients and optimizer states; no master copy (--master-weights none)";
}

}  // namespace vramsim
