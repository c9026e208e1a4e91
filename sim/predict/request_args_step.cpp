// make_request's rooms for the training step itself: precision and optimizer, activation checkpointing, the
// loss, torch.compile, and the vision inputs (request_args_parts.h).
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/engine/gpu_table.h"
#include "sim/models/layer_code.h"
#include "sim/predict/request_args_parts.h"
#include "sim/vision/vision_tower.h"

namespace vramsim::request_args {
namespace {

void apply_optimizer_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
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

void apply_checkpoint_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
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
}

void apply_loss_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
  o.loss = parse_loss(a.loss);
  if (a.loss_chunks < 1 || a.loss_chunks > 4096) {
    throw InputError(fmt::format("--loss-chunks: {} is not in 1..4096", a.loss_chunks));
  }
  if (a.loss_chunks != 8 && o.loss != LossKind::kChunkedCrossEntropy &&
      o.loss != LossKind::kTorchtitanChunkedCrossEntropy) {
    throw InputError(
        "--loss-chunks: the chunked losses' option (use it with --loss chunked-ce or torchtitan-chunked-ce)");
  }
  if (o.loss == LossKind::kCrossEntropyShiftLogits && a.seq < 2) {
    throw InputError("--loss ce-shift-logits: needs --seq 2 or more (the shifted logits drop one position)");
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
}

}  // namespace

void apply_step_args(const RequestArgs& a, const GpuSpec* spec, PredictRequest& r) {
  TrainingOptions& o = r.options;
  o.batch = a.batch;
  o.seq = a.seq;
  apply_optimizer_args(a, r);
  apply_checkpoint_args(a, r);
  apply_loss_args(a, r);
  o.loss_item_sync = parse_loss_item_sync(a.loss_item);
  o.attention =
      a.attention.empty()
          ? (layer_code(r.model.code).follows_transformers() ? AttentionKind::kSdpa : AttentionKind::kEager)
          : parse_attention(a.attention);
  o.compute_capability = spec == nullptr ? 0 : spec->compute_capability;
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
    const std::string& name = a.loss;  // parse_loss accepted it: the option's own spelling
    const std::string_view library = o.loss == LossKind::kChunkedCrossEntropy       ? "torchtune's"
                                     : o.loss == LossKind::kCrossEntropyShiftLogits ? "transformers'"
                                                                                    : "torchtitan's";
    if (!layer_code(r.model.code).follows_transformers()) {
      throw InputError(fmt::format(
          "--loss {}: {} loss over transformers-style models (not with --model-code cs336-basics)", name,
          library));
    }
    if (a.inference || a.forward_only || a.generate > 0) {
      throw InputError(fmt::format(
          "--loss {}: a training loss does not apply to --inference, --forward-only or --generate", name));
    }
  }
}

void apply_compile_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
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
  // --compile-loss on without --compile: the loss compiled, the model eager (torchtitan's
  // `[compile] enable = true, components = ["loss"]`: parallelize_fn applies apply_compile only with "model"
  // in the components, build_cross_entropy_loss compiles loss_fn with "loss"; deepseek_v3_16b.toml since
  // #1608).
  const bool model_compiled = o.compile != CompileMode::kNone;
  const bool loss_alone = !model_compiled && a.compile_loss == "on";
  // torchtune's recipes: `if self._compile: training.compile_loss(self._loss_fn)`
  const bool compiled_chunked_loss =
      o.loss == LossKind::kChunkedCrossEntropy && (model_compiled || loss_alone);
  // torchtitan's build_cross_entropy_loss (torchtitan/components/loss.py since pytorch/torchtitan#1033):
  // `if job_config.training.compile: loss_fn = torch.compile(loss_fn)`, with its per-block compile (since
  // #1608: `if compile.enable and "loss" in compile.components`). Not modelled: under loss_parallel (a
  // DTensor loss) or in a pipeline's last stage.
  const bool compiled_torchtitan_loss =
      o.loss == LossKind::kCrossEntropy &&
      ((model_compiled && o.compile_scope == CompileScope::kLayer) || loss_alone) && !a.loss_parallel &&
      a.pp <= 1 && !a.inference && !a.forward_only && a.generate == 0;
  if (a.compile_loss == "on" && !compiled_chunked_loss && !compiled_torchtitan_loss) {
    throw InputError(
        "--compile-loss on: compiles --loss chunked-ce (torchtune's compile_loss compiles "
        "CEWithChunkedOutputLoss.compute_cross_entropy) or --loss ce alone or with --compile-scope layer "
        "(torchtitan's compiled loss_fn; not modelled with --loss-parallel, --pp or without a training step; "
        "torchtitan-chunked-ce ran eager: torchtitan removed it when it compiled the loss, "
        "pytorch/torchtitan#1033)");
  }
  o.compile_loss = (compiled_chunked_loss || compiled_torchtitan_loss) && a.compile_loss != "off";
  if (a.zero_grad != "set-to-none" && a.zero_grad != "zeros") {
    throw InputError(
        fmt::format("--zero-grad: unknown value '{}' (expected set-to-none or zeros)", a.zero_grad));
  }
  o.zero_grad_set_to_none = a.zero_grad == "set-to-none";
}

void apply_vision_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
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
}

}  // namespace vramsim::request_args
