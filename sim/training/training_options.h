// How a step is run: the settings that change what PyTorch allocates (batch and sequence, precision,
// optimizer and its implementation, activation checkpointing, attention kernel, dropout, accumulation).
// The CLI strings are parsed here and nowhere else; every parse_* throws
// InputError("<option>: unknown value 'x' (known: ...)").
// Each technique's own settings live in its room, beside the technique (sim/parallel/*_options.h,
// sim/finetune/peft_options.h and bnb_options.h, sim/training/float8_options.h,
// sim/compile/compile_options.h, sim/moe/moe_options.h and vision_inputs.h); TrainingOptions holds one of
// each. A new technique adds its own header there, not fields here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sim/compile/compile_options.h"
#include "sim/core/types.h"
#include "sim/finetune/bnb_options.h"
#include "sim/finetune/peft_options.h"
#include "sim/moe/moe_options.h"
#include "sim/parallel/context_parallel_options.h"
#include "sim/parallel/data_parallel_options.h"
#include "sim/parallel/pipeline_options.h"
#include "sim/torch/cuda_reduce.h"
#include "sim/training/checkpoint_options.h"
#include "sim/training/float8_options.h"
#include "sim/training/optimizer_options.h"
#include "sim/vision/vision_inputs.h"

#include <vector>

namespace vramsim {

// fp32     : everything fp32.
// amp-*    : torch.autocast: fp32 parameters, low-precision copies of the weights cached for the autocast
//            region, matmul outputs in low precision, fp32 gradients (GradScaler for fp16 adds no tensors of
//            note: a scale and a found-inf flag).
// bf16     : bf16 parameters and gradients; the optimizer keeps fp32 master weights and fp32 states
//            (Megatron / DeepSpeed mixed precision).
enum class Precision : std::uint8_t { kFp32, kAmpFp16, kAmpBf16, kBf16 };

// Under --precision bf16, where the optimizer's copy of the weights lives (TrainingOptions::master_weights):
//   fp32 : fp32 master weights, stepped with fp32 states and copied back into the bf16 parameters (Megatron's
//          Float16OptimizerWithFloat16Params and distributed optimizer, DeepSpeed's bf16 ZeRO optimizers).
//          Under FSDP's sharded strategies it means a model built in fp32 and wrapped with mixed precision
//          (param_dtype bf16): FSDP keeps the fp32 shard, which the optimizer steps with fp32 gradient shards
//          and fp32 states, and the bf16 parameters exist only while a unit is unsharded (no master copy;
//          DataParallelScheme::set_fp32_sharded_parameters);
//   none : torch.optim steps the bf16 parameters themselves: its states, made by torch.zeros_like(p), are
//          bf16 and there is no master copy (a model loaded with torch_dtype=torch.bfloat16 and trained with
//          torch.optim, one GPU or DDP; under FSDP, a model loaded in bf16: bf16 shards, no fp32 anywhere).
// bitsandbytes' optimizers never keep a master copy: they update the parameters in place from their states.
enum class MasterWeights : std::uint8_t { kFp32, kNone };

// paged-adamw / paged-adamw-8bit: bitsandbytes' PagedAdamW (32-bit states) and PagedAdamW8bit (optimizer.h).
enum class OptimizerKind : std::uint8_t {
  kSgd,
  kSgdMomentum,
  kAdam,
  kAdamW,
  kAdamW8bit,
  kAdafactor,
  kPagedAdamW,
  kPagedAdamW8bit
};

// The optimizers' code paths, which differ in temporaries and in when the states are made: foreach (the
// CUDA default) works on whole tensor lists, so its temporaries are as large as all parameters of a dtype
// together; fused has none; the two loops have one parameter's worth. single-tensor is torch.optim's
// foreach=False path (_single_tensor_adam, and every torch.optim step before foreach existed): every state
// is made first (_init_group), then the loop updates one parameter at a time. for-loop is a hand-written
// optimizer like CS336's AdamW: each parameter's states are made inside the loop, right before its update.
enum class OptimizerImpl : std::uint8_t { kForeach, kFused, kForLoop, kSingleTensor };

// none: every saved activation kept. full: torch.utils.checkpoint around each decoder layer (only its input
// is kept; the layer is recomputed in backward). selective: only the attention core (scores, softmax,
// dropout, weighted sum) is recomputed (Korthikanti et al. 2022). selective-op: torch.utils.checkpoint around
// each decoder layer with torchtitan's op-level selective policy (selective_checkpoint.h): the outputs of
// every other matmul and of the fused attention kernels are kept, the rest of the layer is recomputed.
enum class Checkpointing : std::uint8_t { kNone, kFull, kSelective, kSelectiveOp };

// The training loss over the logits:
//   ce         : Hugging Face's ForCausalLMLoss: logits.float(), then F.cross_entropy over all positions;
//                the logits are kept by the training loop (outputs.logits) through backward.
//   chunked-ce : torchtune's CEWithChunkedOutputLoss (num_output_chunks, default 8): the model applies the
//                output projection to each chunk of the sequence (model.set_num_output_chunks), the loss
//                upcasts and cross-entropies one chunk at a time (reduction "sum", divided by the tokens),
//                and the recipe deletes the chunk list before backward (`del logits`). The full logits are
//                never materialized in fp32: only one chunk's fp32 copy is alive at a time, but in eager
//                mode every chunk's fp32 log-probabilities are saved for backward (compiled: compile_loss).
//   torchtitan-chunked-ce : torchtitan's chunked_cross_entropy_loss (pytorch/torchtitan#996;
//   num_output_chunks,
//                default 8): the model returns the whole logits, the loss chunks them AFTER the output
//                projection and upcasts and cross-entropies one chunk at a time (torchtitan_chunked_loss.h);
//                the loop's `del pred` is --free-logits-before-backward.
// kCrossEntropyShiftLogits: transformers before 4.49 (huggingface/transformers#35646), whose causal-LM loss
// shifts the logits with an fp32 `.contiguous()` copy (torch_modules_layers.cpp); kCrossEntropy pads the
// labels instead, as transformers does since.
enum class LossKind : std::uint8_t {
  kCrossEntropy,
  kCrossEntropyShiftLogits,
  kChunkedCrossEntropy,
  kTorchtitanChunkedCrossEntropy
};

// The dtype of the logits the model's forward returns (and the training loop holds):
//   model : the output projection's dtype; the loss upcasts a copy of its own (torchtitan since
//           pytorch/torchtitan#642, e10cb9494 "Move output `.float()` to loss fn": loss_fn's
//           `pred.flatten(0, 1).float()`; transformers >= 4.45: ForCausalLMLoss's `logits = logits.float()`).
//   fp32  : the forward upcasts them and returns the fp32 tensor, whose projection-dtype original is freed
//           (torchtitan before #642: `output = self.output(h).float()` in Transformer.forward, e.g. at
//           83c879f, pytorch/torchtitan#165; transformers < 4.45: `logits = logits.float()` in
//           LlamaForCausalLM.forward). A loop that keeps its logits keeps twice the bytes.
enum class LogitsDtype : std::uint8_t { kModel, kFp32 };

// The attention implementation, as Hugging Face's attn_implementation names them:
//   eager             : the model code's own attention: batch x heads x S x S scores and probabilities.
//   sdpa              : F.scaled_dot_product_attention, whose backend PyTorch picks (resolve_attention):
//   sdpa-flash        :   FlashAttention-2: no S x S tensor; saves the output and an fp32 logsumexp (b, h, s)
//   sdpa-efficient    :   memory-efficient (xFormers/CUTLASS): the same, logsumexp padded to 32 rows
//   sdpa-math         :   the composite fallback: scores and probabilities like eager
//   flash_attention_2 : the flash-attn package (HF's flash_attention_2): the flash kernel, reading grouped
//                       key/value heads as they are (no repeat_kv copies)
// "math" and "flash" are accepted as the older names of eager and sdpa-flash.
enum class AttentionKind : std::uint8_t {
  kEager,
  kSdpa,
  kSdpaFlash,
  kSdpaEfficient,
  kSdpaMath,
  kFlashAttention2
};

// The fused attention kernels allocate their output as (batch, seq, heads, head_dim) and return it transposed
// to (batch, heads, seq, head_dim) (_scaled_dot_product_flash_attention / _efficient_attention_forward in
// aten/src/ATen/native/transformers/cuda; flash_attn_func returns (batch, seq, heads, head_dim) itself), so
// the model's transpose(1, 2).contiguous() afterwards copies nothing.
inline bool attention_kernel_writes_bshd(AttentionKind k) {
  return k == AttentionKind::kSdpaFlash || k == AttentionKind::kSdpaEfficient ||
         k == AttentionKind::kFlashAttention2;
}

// What the process ran before the simulated steps, which it keeps: none (a fresh process: the first matmul
// allocates the main thread's cuBLAS workspace, the first backward matmul the autograd thread's), forward (a
// forward ran: the main thread's workspace exists), step (a training step ran: both exist). Existing
// workspaces are allocated at setup, before the first simulated step.
enum class WarmProcess : std::uint8_t { kNone, kForward, kStep };

// Where the training loop reads the loss on the host (`loss.item()`, or `if torch.isnan(loss)`): a copy to
// the host on the compute stream and a stream synchronize, so the host stops running ahead and the caching
// allocator's next malloc finds every deferred free (record_stream) of the work before it completed
// (process_events). kNone: the loop never reads it between log steps (torchtitan, log_freq 10);
// kAfterBackward: after each micro-batch's loss.backward(), before optimizer.step() (fsdp_qlora's train.py
// `loss.item()`, the Hugging Face Trainer's logging_nan_inf_filter check `torch.isnan(tr_loss_step)`);
// kAfterStep: after the optimizer step (torchtune's recipes log `running_loss.item()` every step,
// log_every_n_steps 1).
enum class LossItemSync : std::uint8_t { kNone, kAfterBackward, kAfterStep };

struct TrainingOptions {
  std::int64_t batch = 1;
  std::int64_t seq = 128;
  Precision precision = Precision::kFp32;
  // With precision bf16: see MasterWeights. The CLI sets the framework's default (default_master_weights).
  MasterWeights master_weights = MasterWeights::kFp32;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;
  AdamForeachDenom adam_foreach_denom = AdamForeachDenom::kInPlace;  // --adam-foreach-denom
  Checkpointing checkpointing = Checkpointing::kNone;
  CheckpointOptions checkpoint;  // --checkpoint-early-stop
  LossKind loss = LossKind::kCrossEntropy;
  // The training loop deletes the model's output before backward (torchtitan's train step: `del pred` "to
  // avoid peaking memory"); false: it keeps it through backward (Hugging Face's `outputs.logits`).
  // torchtune's chunked loss always deletes it (`del logits`).
  bool free_logits_before_backward = false;
  int loss_chunks = 8;  // chunked-ce, torchtitan-chunked-ce: num_output_chunks
  // chunked-ce under --compile: torchtune's recipes call training.compile_loss(loss_fn), which compiles
  // CEWithChunkedOutputLoss.compute_cross_entropy (one chunk's upcast + cross-entropy) on its own, so each
  // chunk's loss is one compiled graph and its backward saves what the partitioner picks, not the fp32
  // log-probabilities (torchtune/training/_compile.py, compile_loss). With --loss ce and --compile-scope
  // layer: torchtitan's build_cross_entropy_loss, `loss_fn = torch.compile(loss_fn)` when training.compile
  // (pytorch/ torchtitan#1033, April 2025, and today's CompileConfig.components ["model", "loss"]; off from
  // #755, 2024-12-18, to #1033): the upcast and cross-entropy are one graph whose backward writes the logits'
  // gradient without the eager loss's fp32 log-probabilities and their gradients.
  bool compile_loss = false;
  LogitsDtype logits_dtype = LogitsDtype::kModel;  // --logits-dtype
  AttentionKind attention = AttentionKind::kEager;
  // The GPU's compute capability (major * 10 + minor; 0: unknown, taken as Ampere or newer): SDPA's choice of
  // backend depends on it.
  int compute_capability = 0;
  // > 0: this probability at every dropout site the architecture has (GPT-2: embeddings, attention,
  // residual; Llama: attention), instead of the model's own rates (ModelConfig::dropout).
  double dropout = 0.0;
  int grad_accumulation = 1;  // micro-batches per optimizer step
  int steps = 1;
  // forward with autograd on, no loss/backward/optimizer. Like `for ...: logits = model(x)`: the previous
  // forward's graph (its saved activations) lives until `logits` is rebound after the next forward.
  bool forward_only = false;
  // forward under torch.no_grad() / torch.inference_mode(): nothing saved for backward, every intermediate
  // freed when the code drops it; implies forward_only. The previous step's logits live until rebound.
  bool inference = false;
  bool zero_grad_set_to_none = true;  // optimizer.zero_grad() default since PyTorch 2.0
  bool autocast_whole_step = false;   // autocast context around backward and step too (weight cache lives on)
  // Where the loop reads the loss on the host (see LossItemSync).
  LossItemSync loss_item_sync = LossItemSync::kNone;
  // Count saved activations exactly as Korthikanti et al. 2022 do (gpt2 family only): fused LayerNorm and
  // scale-mask-softmax kernels that save nothing beyond the paper's tensors. See Note [Megatron accounting].
  bool megatron_accounting = false;
  // cuBLAS workspace the first matmul of the process allocates through the caching allocator (and the first
  // of the autograd thread). 32 MiB is what PyTorch 2.6 took on the H100 of the kkaitlyn111 recordings.
  Bytes cublas_workspace_bytes = 32 * kMiB;
  CudaDevice device;  // SMs and threads per SM, which size the reduction kernels' staging buffers
  WarmProcess warm = WarmProcess::kNone;
  DataParallelOptions data_parallel;
  PipelineOptions pipeline;
  // --offload activations: the forward and the loss run under
  // torch.autograd.graph.save_on_cpu(pin_memory=True) (EagerTape::set_save_on_cpu).
  bool offload_activations = false;
  // --activation-offload torchtune: torchtune's OffloadActivations (side stream, forward stash) around the
  // model's forward only, model.output excluded (EagerTape's ActivationOffload::kTorchtuneStreams).
  bool activation_offload_torchtune = false;
  // torchtune's optimizer_in_bwd: each parameter's optimizer steps from its post-accumulate-grad hook during
  // backward, and its gradient is freed right after (OptimizerModel::step_in_backward).
  bool optimizer_in_backward = false;
  // Megatron tensor parallelism: the model is already one rank's (tensor_parallel.h); the degree matters only
  // with sequence parallelism, which splits the hidden states outside attention and MLP along the sequence.
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // torch.distributed.tensor.parallel.loss_parallel() around the loss and its backward (torchtitan's default
  // with tensor parallelism): F.cross_entropy over logits kept sharded on the vocabulary, computed by
  // DTensor's decomposition (sim/parallel/loss_parallel.h) instead of the fused kernels.
  bool loss_parallel = false;
  LoraOptions lora;  // PEFT LoRA adapters on frozen base weights (rank 0: full fine-tuning)
  BnbOptions bnb;    // bitsandbytes 4-bit / 8-bit base weights (format kNone: not quantized)
  // model.generate() (hf_generate.h): > 0 new tokens after a prompt of `seq` tokens, with this KV cache
  // ("dynamic", "static" or vLLM's "paged"); implies inference.
  int generate_tokens = 0;
  std::string kv_cache = "dynamic";
  // Prompts of different lengths in one batch (--prompt-len uniform:LO..HI), one per sequence; `seq` is the
  // longest (the batch is left-padded to it). Empty: every prompt has `seq` tokens.
  std::vector<std::int64_t> prompt_lens;
  // vLLM's paged cache (vllm_paged_cache.h): tokens per block and the blocks allocated (0: none, as in the
  // profile run); predict sizes num_gpu_blocks from its profile run.
  std::int64_t block_size = 16;
  std::int64_t num_gpu_blocks = 0;
  // vLLM's --kv-cache-dtype fp8*: the cache's one byte per element (stored as torch.uint8,
  // STR_DTYPE_TO_TORCH_DTYPE); false: the model's dtype.
  bool kv_cache_fp8 = false;
  // vLLM's --quantization of the served weights (vllm_weight_formats.h; empty: the model dtype): the served
  // batch's decoder-layer linears hold the bytes vLLM's "Model loading took" counts for them.
  std::string vllm_quantization;
  CompileMode compile = CompileMode::kNone;
  CompileScope compile_scope = CompileScope::kModel;
  Float8Options float8;                     // torchao float8 linears (recipe kNone: none)
  ContextParallelOptions context_parallel;  // degree 1: none; `seq` is the whole sequence of all CP ranks
  VisionInputs vision;                      // a vision-language model's images (text-only: unused)

  MoeOptions moe;  // mixture-of-experts implementation, routing model, --ep
};

// Limits on what a user can type, checked by validate() before any size is computed from them: far beyond
// any real run (16M-token contexts, 4G tokens per micro-batch), small enough that every tensor size is an
// exact 64-bit number (eager_tape.h checks each against kMaxTensorBytes) and that the work is bounded.
inline constexpr std::int64_t kMaxBatch = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxTokens = std::int64_t{1} << 32;  // batch x seq
inline constexpr int kMaxPasses = 100'000;                         // steps x grad_accumulation
inline constexpr std::int64_t kMaxVllmBlockSize = 1024;            // --block-size (vLLM offers 8..128)

// Whether transformers left-pads the batch: prompts of different lengths under a Hugging Face cache (its 2D
// attention_mask then has zeros, so the 4D mask is always built). vLLM packs sequences without padding.
inline bool left_padded(const TrainingOptions& o) {
  if (o.prompt_lens.empty() || o.kv_cache == "paged") {
    return false;
  }
  for (std::int64_t len : o.prompt_lens) {
    if (len != o.seq) {
      return true;
    }
  }
  return false;
}

// Throws InputError("<option>: ...") for values out of range (batch <= 0, dropout >= 1, ...).
void validate(const TrainingOptions& options);

// The dtype autocast computes in (none for fp32 and pure bf16), and the parameters' dtype.
std::optional<DType> autocast_dtype(Precision p);
DType parameter_dtype(Precision p);

Precision parse_precision(std::string_view text, std::string_view option = "--precision");
MasterWeights parse_master_weights(std::string_view text, std::string_view option = "--master-weights");
std::string_view master_weights_name(MasterWeights m);
// What the framework a layout names does under --precision bf16: DeepSpeed ZeRO (scheme zero1..3), FSDP
// (fsdp-*, fsdp2-*: fp32 sharded parameters under MixedPrecision) and Megatron (tp or pp > 1) keep fp32
// masters; one GPU and DDP run torch.optim on the bf16 parameters.
MasterWeights default_master_weights(std::string_view data_parallel_scheme, int tensor_parallel, int stages);
// Whether the optimizer keeps fp32 master weights and fp32 states for bf16 parameters.
bool steps_fp32_master(const TrainingOptions& o);
// The precision regime in words, for reports ("bf16 parameters and gradients; fp32 master weights ...").
std::string precision_regime(const TrainingOptions& o);
// Accepts a kind ("adamw") or a kind with an implementation ("adamw-fused", "adam-foreach", "sgd-for-loop").
OptimizerKind parse_optimizer(std::string_view text, std::string_view option = "--optimizer");
OptimizerImpl parse_optimizer_impl(std::string_view text, OptimizerImpl fallback,
                                   std::string_view option = "--optimizer");
Checkpointing parse_checkpointing(std::string_view text, std::string_view option = "--checkpointing");
LossKind parse_loss(std::string_view text, std::string_view option = "--loss");
LossItemSync parse_loss_item_sync(std::string_view text, std::string_view option = "--loss-item");
AttentionKind parse_attention(std::string_view text, std::string_view option = "--attention");
WarmProcess parse_warm(std::string_view text, std::string_view option = "--warm");
CompileMode parse_compile_mode(std::string_view text, std::string_view option = "--compile-mode");
CompileScope parse_compile_scope(std::string_view text, std::string_view option = "--compile-scope");
std::string_view compile_mode_name(CompileMode m);
std::string_view warm_name(WarmProcess w);
Float8Recipe parse_float8_recipe(std::string_view text, std::string_view option = "--float8");
std::string_view float8_recipe_name(Float8Recipe r);
CpRotate parse_cp_rotate(std::string_view text, std::string_view option = "--cp-rotate-method");
std::string_view cp_rotate_name(CpRotate r);

// The kernel an `attention` choice runs for a model of this head size in this precision: kSdpa becomes the
// backend PyTorch 2.x's sdp_utils picks for a causal call (is_causal, no mask: what Hugging Face passes for
// unpadded batches; `attn_mask`: a mask tensor, which rules flash out):
// flash for fp16/bf16 inputs with head_dim <= 256 (multiple of 8) on compute capability
// 8.0+ (on 8.6 / 8.9 only up to 192 when gradients are needed); memory-efficient for other inputs with
// head_dim a multiple of 8 (4 in fp32); math otherwise. Other kinds are returned as they are.
AttentionKind resolve_attention(AttentionKind attention, std::int64_t head_dim, Precision precision,
                                int compute_capability, bool requires_grad, bool attn_mask = false);
// Eager-like kinds materialise the S x S scores.
bool materialises_scores(AttentionKind kind);

std::string_view precision_name(Precision p);
std::string_view optimizer_name(OptimizerKind o);
std::string_view optimizer_impl_name(OptimizerImpl i);
std::string_view checkpointing_name(Checkpointing c);
std::string_view attention_name(AttentionKind a);

}  // namespace vramsim
