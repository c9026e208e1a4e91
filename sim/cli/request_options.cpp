// The options of a prediction request (RequestArgs), registered on predict, fit, compare and sweep: each
// group of options in its own function, in the order --help lists them. make_request
// (sim/predict/request_args.cpp) parses and checks their values.
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/cli/commands.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"

namespace vramsim::cli {
namespace {

// The model, the device and the sequence.
void add_model_options(CLI::App* cmd, RequestArgs& a) {
  std::string presets;
  for (const std::string& n : model_preset_names()) {
    presets += (presets.empty() ? "" : ", ") + n;
  }
  cmd->add_option("--model", a.model, "model preset (" + presets + ") or a Hugging Face config.json")
      ->required();
  cmd->add_option("--model-code", a.model_code,
                  "whose layer code to follow: " + fmt::format("{}", fmt::join(layer_code_names(), ", ")) +
                      " (Hugging Face transformers per model_type, the CS336 staff model); default: the "
                      "preset's");
  auto* gpu = cmd->add_option("--gpu", a.gpu, "GPU name (memory and CUDA context from the GPU table)");
  auto* cap = cmd->add_option("--capacity", a.capacity,
                              "device memory for the allocator instead of a GPU, e.g. 80GiB (context 0)");
  gpu->excludes(cap);
  cmd->add_option("--seq,--prompt-len", a.prompt_len,
                  "sequence length (with --generate: the prompt's; uniform:LO..HI draws one per sequence, "
                  "seed 0)")
      ->required()
      ->each([&a](const std::string& text) {
        std::int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec == std::errc{} && ptr == text.data() + text.size()) {
          a.seq = value;  // a plain number, as commands that read `seq` expect
        }
      });
}

// The training step: precision, optimizer, checkpointing, the loss and the logits.
void add_training_step_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--precision", a.precision,
                  "fp32|amp-fp16|amp-bf16|bf16 (fp16: vLLM serving's --dtype float16, with --kv-cache paged)")
      ->capture_default_str();
  cmd->add_flag("--free-logits-before-backward", a.free_logits,
                "the training loop deletes the logits before loss.backward() (torchtitan's `del pred`); by "
                "default they live through backward, as Hugging Face's outputs.logits do");
  cmd->add_option("--loss-item", a.loss_item,
                  "none|after-backward|after-step: where the loop reads the loss on the host (loss.item(), a "
                  "synchronize that lets the allocator reuse blocks freed with record_stream): fsdp_qlora's "
                  "train.py and the HF Trainer after backward, torchtune after the step")
      ->capture_default_str();
  cmd->add_option("--master-weights", a.master_weights,
                  "with --precision bf16: fp32 (master weights and fp32 optimizer states: DeepSpeed, "
                  "Megatron; under FSDP a model built in fp32 with MixedPrecision: fp32 shards, no master "
                  "copy) or none (torch.optim on the bf16 parameters; under FSDP a model loaded in bf16); "
                  "default: the framework's (none on one GPU and with DDP)");
  cmd->add_option("--optimizer", a.optimizer,
                  "sgd|sgd-momentum|adam|adamw|adamw-8bit|paged-adamw|paged-adamw-8bit|adafactor, optionally "
                  "-foreach/-fused/-for-loop/"
                  "-single-tensor (torch.optim's foreach=False loop; for-loop: a hand-written one)")
      ->capture_default_str();
  cmd->add_option(
         "--adam-foreach-denom", a.adam_foreach_denom,
         "in-place|out-of-place: torch.optim's foreach Adam/AdamW adds eps to its sqrt list in place "
         "(PyTorch >= 2.1, pytorch/pytorch#104780, #104898) or into a second list "
         "(`denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`: PyTorch 1.13, 2.0)")
      ->capture_default_str();
  cmd->add_option("--checkpointing", a.checkpointing, "none|full|selective|selective-op")
      ->capture_default_str();
  cmd->add_option(
         "--checkpoint-early-stop", a.checkpoint_early_stop,
         "on|off: torch.utils.checkpoint.set_checkpoint_early_stop: the recomputation stops after "
         "the last saved tensor (PyTorch >= 2.1's default, pytorch/pytorch#96866) or reruns the whole "
         "layer (off; PyTorch 1.13 has no early stop)")
      ->capture_default_str();
  cmd->add_option(
      "--checkpoint-impl", a.checkpoint_impl,
      "reentrant|non-reentrant: torch.utils.checkpoint's use_reentrant (torch/utils/checkpoint.py: "
      "CheckpointFunction reruns the whole layer and keeps its output through the layer's backward; "
      "saved-tensor hooks recompute on first unpack, with early stop). Default non-reentrant: "
      "checkpoint_wrapper's CheckpointImpl.NO_REENTRANT (FSDP), torchtitan, torchtune, transformers since "
      "#43203; transformers' gradient_checkpointing_enable() before it and fsdp_qlora's "
      "--reentrant_checkpointing True are reentrant. Vision towers: reentrant unless named");
  cmd->add_option("--loss", a.loss,
                  "ce (Hugging Face's cross-entropy over fp32 logits) | ce-shift-logits (the same as "
                  "transformers < 4.49 computed it: an fp32 `.contiguous()` copy of the shifted logits, "
                  "huggingface/transformers#35646) | chunked-ce (torchtune's "
                  "CEWithChunkedOutputLoss: output projection and loss one sequence chunk at a time) | "
                  "torchtitan-chunked-ce (torchtitan's chunked_cross_entropy_loss, PR 996: the whole "
                  "logits, the loss one chunk at a time)")
      ->capture_default_str();
  cmd->add_option("--loss-chunks", a.loss_chunks, "num_output_chunks of chunked-ce and torchtitan-chunked-ce")
      ->capture_default_str();
  cmd->add_option(
         "--logits-dtype", a.logits_dtype,
         "model|fp32: the dtype of the logits the model returns: the output projection's (torchtitan "
         "since PR 642, transformers >= 4.45: the loss upcasts a copy) or fp32 (torchtitan's "
         "`self.output(h).float()` before PR 642, transformers < 4.45's `logits.float()`), kept "
         "by the training loop")
      ->capture_default_str();
}

// Attention, dropout, micro-batches and steps, the host's and the roofline clock's estimates, and the mode.
void add_run_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--attention", a.attention,
                  "eager|sdpa|sdpa-flash|sdpa-efficient|sdpa-math|flash_attention_2 (Hugging Face's "
                  "attn_implementation; sdpa: the backend PyTorch picks; math = eager, flash = sdpa-flash). "
                  "Default: sdpa for torch-modules, eager for the CS336 codes");
  cmd->add_option(
         "--dropout", a.dropout,
         "dropout probability at every site the model has (default: a config.json's own rates, none for "
         "presets; 0 = no dropout)")
      ->capture_default_str();
  cmd->add_option("--grad-accumulation,--micro-batches", a.grad_accumulation,
                  "micro-batches per optimizer step (with --pp: Megatron's num_microbatches)")
      ->capture_default_str();
  cmd->add_option("--steps", a.steps, "training steps to simulate")->capture_default_str();
  cmd->add_option(
         "--host-op-us", a.host_op_us,
         "est. CPU time of one eager op that launches kernels (Python, dispatcher, launch); the host "
         "runs ahead of the GPU when kernels take longer")
      ->capture_default_str();
  cmd->add_option("--compute-efficiency", a.compute_efficiency,
                  "fraction of the GPU's peak FLOP/s a compute-bound kernel reaches (the time axis only; "
                  "default calibrated on published throughput, docs/time-model.md)")
      ->capture_default_str();
  cmd->add_option("--memory-efficiency", a.memory_efficiency,
                  "fraction of the GPU's peak DRAM bandwidth a memory-bound kernel reaches (the time axis "
                  "only)")
      ->capture_default_str();
  cmd->add_flag("--forward-only", a.forward_only,
                "forward passes with autograd on, no backward/optimizer (`logits = model(x)` in a loop: the "
                "previous graph lives until logits is rebound)");
  cmd->add_flag("--inference", a.inference,
                "forward passes under torch.no_grad()/inference_mode(): nothing saved for backward");
}

// PyTorch's runtime: the allocator's settings, the CUDA context, warm-up, torch.compile, zero_grad.
void add_runtime_options(CLI::App* cmd, RequestArgs& a, std::string& alloc_conf) {
  cmd->add_option("--alloc-conf", alloc_conf, "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax");
  add_torch_version_option(cmd, a.torch_version);
  cmd->add_option("--module-loading", a.module_loading,
                  "lazy|eager: how CUDA loads kernels (eager: CUDA < 11.7, PyTorch <= 1.12, or "
                  "CUDA_MODULE_LOADING=EAGER); sets the CUDA context figure")
      ->capture_default_str();
  cmd->add_option("--cuda-context", a.cuda_context,
                  "the CUDA context you measured, e.g. 600MiB (nvidia-smi's process memory minus "
                  "torch.cuda.memory_reserved()); default: the GPU table's figure");
  cmd->add_option(
      "--nccl-channels", a.nccl_channels,
      "NCCL's ring channels as its INFO line prints them (\"N coll channels\"): sizes each process "
      "group's ring; default: 24 on H100/H200 SXM from public logs, else the NCCL lines are not sized");
  cmd->add_option(
      "--nccl-p2p-channels", a.nccl_p2p_channels,
      "NCCL's p2p channels per peer as its INFO line prints them (\"M p2p channels per peer\"): "
      "sizes the pipeline and expert-parallel send/recv; default: 32 on H100/H200 SXM, else not sized");
  cmd->add_option("--warm", a.warm,
                  "none|forward|step: what the process ran before (its cuBLAS workspaces already exist)")
      ->capture_default_str();
  cmd->add_flag("--compile{default}", a.compile_mode,
                "torch.compile the model (Inductor): the min-cut partitioner picks what is saved, fused "
                "kernels drop intermediates; --compile=MODE or --compile-mode MODE");
  cmd->add_option(
      "--compile-mode", a.compile_mode,
      "default|reduce-overhead|max-autotune|max-autotune-no-cudagraphs: torch.compile's mode (implies "
      "--compile; reduce-overhead and max-autotune run CUDA graphs from a private pool)");
  cmd->add_option(
         "--compile-scope", a.compile_scope,
         "model|model-and-loss|layer: torch.compile(model) as one graph (the loop computes the loss), "
         "the same with the model computing its loss from labels (Hugging Face Trainer), or each "
         "decoder layer compiled on its own (torchtitan)")
      ->capture_default_str();
  cmd->add_option(
         "--compile-loss", a.compile_loss,
         "auto|on|off: compile the loss on its own: chunked-ce's per-chunk upcast + cross-entropy "
         "(torchtune's training.compile_loss) or ce's (torchtitan's compiled loss_fn); auto: on with "
         "--compile and --loss chunked-ce (torchtune's recipes) or --compile-scope layer and --loss ce "
         "(torchtitan since PR 1033); on without --compile: the loss alone, the model eager (torchtitan's "
         "compile.components = [\"loss\"])")
      ->capture_default_str();
  cmd->add_option("--zero-grad", a.zero_grad,
                  "set-to-none|zeros: optimizer.zero_grad() frees the gradients (PyTorch 2 default), or "
                  "zero_grad(set_to_none=False) / a loop that never zeroes them keeps them allocated")
      ->capture_default_str();
}

// Generation and serving: the KV cache, vLLM's engine arguments, SGLang's.
void add_serving_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--generate", a.generate,
                  "model.generate() of N new tokens after the prompt (--seq / --prompt-len): a prefill, then "
                  "one forward per token through the KV cache, under no_grad; step t + 1 decodes token t + 1")
      ->check(CLI::PositiveNumber);  // 0 would be the unset default: training steps
  cmd->add_option("--kv-cache", a.kv_cache,
                  "dynamic|static|paged: transformers' DynamicCache (grows by torch.cat) or StaticCache "
                  "(preallocated for prompt + new tokens), or vLLM's paged cache (blocks sized by a profile "
                  "run, allocated once)")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", a.gpu_memory_utilization,
                  "vLLM: the fraction of GPU memory the engine may use (paged cache)")
      ->capture_default_str();
  cmd->add_option("--block-size", a.block_size, "vLLM: tokens per KV-cache block (paged cache)")
      ->capture_default_str();
  cmd->add_option("--max-model-len", a.max_model_len,
                  "vLLM: the longest sequence served (paged cache; default: the model's trained context)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                  "vLLM: tokens of the profile run and of one scheduled batch (paged cache; default v1: "
                  "8192 on GPUs of 70 GiB or more other than A100s, else 2048, with chunked prefill; v0: "
                  "max(max_model_len, 2048))")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--max-num-seqs", a.max_num_seqs,
         "vLLM: sequences per batch, the profile run's dummy requests (paged cache; default v1: 1024 "
         "on GPUs of 70 GiB or more other than A100s, else 256; v0: 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--vllm-version", a.vllm_version,
         "v1|v0: vLLM's V1 engine start-up (its log's lines) or the older V0 profile run (paged cache)")
      ->capture_default_str();
  cmd->add_option(
         "--mm-encoder-tp-mode", a.mm_encoder_tp_mode,
         "vLLM: weights|data, how a vision tower uses the TP ranks (weights: its layers split; data: "
         "whole on every rank, the images split; v1)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "vLLM: auto|fp8|fp8_e4m3|fp8_e5m2, the KV cache's element (fp8: one byte; v1)")
      ->capture_default_str();
  cmd->add_option(
      "--quantization", a.quantization,
      "vLLM: fp8 (Fp8LinearMethod: the decoder layers' linear weights in float8, one float32 scale each; "
      "runtime or per-tensor checkpoints), fp8-block (an FP8 checkpoint with weight_block_size [128, 128]: "
      "a float32 scale per 128 x 128 block), w8a8-int8 / w8a8-fp8 (compressed-tensors W8A8, a float32 "
      "scale per output channel), w4a16 (compressed-tensors WNA16, 4-bit, group 128, symmetric), gptq or "
      "awq (4-bit, group 128, Marlin's layout) (v1)");
  cmd->add_flag("--enable-lora", a.enable_lora,
                "vLLM: serve LoRA adapters: every linear layer (and llama's embedding and lm_head) gets "
                "--max-loras adapter slots of --max-lora-rank at load (v1)");
  cmd->add_flag("--enable-expert-parallel", a.enable_expert_parallel,
                "vLLM: expert parallelism for MoE models: each MoE layer's experts whole, experts / tp of "
                "them a rank (the remainder to the first ranks), instead of every expert split over the "
                "TP ranks; attention, dense MLPs and shared experts stay TP-split (v1)");
  cmd->add_option("--max-loras", a.max_loras,
                  "vLLM: adapters active in one batch, the slots (with --enable-lora)")
      ->capture_default_str();
  cmd->add_option("--max-lora-rank", a.max_lora_rank,
                  "vLLM: the slots' rank, one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (with --enable-lora)")
      ->capture_default_str();
  cmd->add_flag("--fully-sharded-loras", a.fully_sharded_loras,
                "vLLM: shard both LoRA matrices over the TP ranks (with --enable-lora)");
  cmd->add_option("--lora-dtype", a.lora_dtype,
                  "vLLM: auto|float16|bfloat16, the slots' dtype (auto: the model's; with --enable-lora)")
      ->capture_default_str();
  cmd->add_option("--vllm-non-torch-increase", a.vllm_non_torch_increase,
                  "vLLM: a measured 'non-torch forward increase memory' (e.g. 2.1GiB) in place of the "
                  "modelled communication buffers (v1)");
  cmd->add_option("--serving-engine", a.serving_engine,
                  "vllm|sglang: whose start-up sizes the paged KV cache (--kv-cache paged; sglang: SGLang's "
                  "ModelRunner.profile_max_num_token)")
      ->capture_default_str();
  cmd->add_option("--mem-fraction-static", a.mem_fraction_static,
                  "SGLang: the fraction of GPU memory for weights and KV pool (default: SGLang's, see "
                  "--sglang-version)");
  cmd->add_option("--sglang-version", a.sglang_version,
                  "0.5|0.4: whose default --mem-fraction-static: SGLang 0.5.3+'s _handle_gpu_memory_settings "
                  "(from the GPU's memory, 0.834 on an H100 at TP 1) or 0.4.x's by TP size (0.88 .. 0.79)")
      ->capture_default_str();
  cmd->add_option("--vllm-pp-layer-partition", a.vllm_pp_layer_partition,
                  "vLLM: VLLM_PP_LAYER_PARTITION, decoder layers per pipeline stage (e.g. 16,16; with --pp; "
                  "default: get_pp_indices' even split, the remainder to the stages before the last)");
  cmd->add_option("--vllm-cudagraph-memory", a.vllm_cudagraph_memory,
                  "vLLM 0.21+: the 'Estimated CUDA graph memory' (e.g. 0.6GiB), subtracted from the KV "
                  "cache's memory as VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 does (v1; default: graphs "
                  "captured after the KV cache, as up to 0.20)");
}

// PEFT's adapters.
void add_peft_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--lora-rank", a.lora_rank,
                  "PEFT LoRA rank r: frozen base weights, trainable adapters (0: full fine-tuning)")
      ->capture_default_str();
  cmd->add_option("--lora-alpha", a.lora_alpha, "LoRA lora_alpha (scaling = alpha / r; no memory effect)")
      ->capture_default_str();
  cmd->add_option("--lora-dropout", a.lora_dropout,
                  "LoRA lora_dropout (> 0: a dropout copy of each adapted input)")
      ->capture_default_str();
  cmd->add_option(
      "--lora-targets", a.lora_targets,
      "LoRA target_modules, PEFT's names: q_proj,v_proj,... or all-linear (default: PEFT's for the "
      "model_type)");
  cmd->add_option(
         "--peft-method", a.peft_method,
         "PEFT method (peft.PeftType): lora, ia3, prompt-tuning, p-tuning, loha, lokr, vera, adalora, "
         "oft, boft, trainable-tokens, prefix-tuning "
         "(DoRA: --use-dora; LoRA-FA: --lora-fa)")
      ->capture_default_str();
  cmd->add_flag("--use-dora", a.use_dora,
                "LoraConfig(use_dora=True): DoRA's magnitude vector and weight norm");
  cmd->add_flag("--lora-fa", a.lora_fa,
                "peft.optimizers.create_lorafa_optimizer: lora_A frozen, only lora_B trained (LoRA-FA)");
  cmd->add_option("--num-virtual-tokens", a.num_virtual_tokens,
                  "prompt tuning / P-tuning num_virtual_tokens (the model runs on --seq + this many); prefix "
                  "tuning's prefix length");
  cmd->add_option("--encoder-hidden-size", a.encoder_hidden_size,
                  "P-tuning PromptEncoderConfig.encoder_hidden_size (default: the model's hidden size)");
  cmd->add_option("--feedforward-modules", a.feedforward_modules,
                  "IA3Config.feedforward_modules (with --lora-targets; default: PEFT's for the model_type)");
  cmd->add_option("--decompose-factor", a.decompose_factor, "LoKrConfig.decompose_factor (-1: PEFT's)")
      ->capture_default_str();
  cmd->add_flag(
      "--prefix-projection", a.prefix_projection,
      "PrefixTuningConfig.prefix_projection: the prefix through a two-layer MLP (--encoder-hidden-size)");
  cmd->add_option("--token-indices", a.token_indices,
                  "TrainableTokensConfig.token_indices: the embedding rows trained (--peft-method "
                  "trainable-tokens), e.g. 128000,128001");
  cmd->add_option("--init-r", a.init_r,
                  "AdaLoraConfig.init_r: each layer's starting rank (--lora-rank is target_r)")
      ->capture_default_str();
  cmd->add_option("--oft-block-size", a.oft_block_size,
                  "OFTConfig.oft_block_size (0: from r, the number of blocks, --lora-rank)")
      ->capture_default_str();
  cmd->add_option("--use-cayley-neumann", a.use_cayley_neumann,
                  "OFTConfig.use_cayley_neumann (PEFT's default true; false: torch.linalg.solve)")
      ->capture_default_str();
  cmd->add_option("--num-cayley-neumann-terms", a.num_cayley_neumann_terms,
                  "OFTConfig.num_cayley_neumann_terms")
      ->capture_default_str();
  cmd->add_option("--boft-block-size", a.boft_block_size, "BOFTConfig.boft_block_size (PEFT's default 4)")
      ->capture_default_str();
  cmd->add_option("--boft-block-num", a.boft_block_num, "BOFTConfig.boft_block_num (0: from the block size)")
      ->capture_default_str();
  cmd->add_option("--boft-n-butterfly-factor", a.boft_n_butterfly_factor,
                  "BOFTConfig.boft_n_butterfly_factor")
      ->capture_default_str();
  cmd->add_option("--autocast-adapter-dtype", a.autocast_adapter_dtype,
                  "get_peft_model(autocast_adapter_dtype=...): fp16/bf16 adapters cast to fp32 (PEFT's "
                  "default true)")
      ->capture_default_str();
}

// Quantized base weights (bitsandbytes, torchao).
void add_quantization_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option(
      "--base-weights", a.base_weights,
      "bitsandbytes base weights via transformers' BitsAndBytesConfig: nf4|fp4 (load_in_4bit) or "
      "int8 (load_in_8bit, LLM.int8); or torchao-nf4 (torchao's NF4Tensor, torchtune's QLoRA); every "
      "linear layer but lm_head (default: the --precision dtype)");
  cmd->add_flag(
      "--bnb-double-quant", a.bnb_double_quant,
      "bnb_4bit_use_double_quant=True: 8-bit absmax per block of 64 (BitsAndBytesConfig's default is "
      "False)");
  cmd->add_option("--bnb-compute-dtype", a.bnb_compute_dtype,
                  "bnb_4bit_compute_dtype: fp32 (transformers' default when unset), fp16 or bf16")
      ->capture_default_str();
  cmd->add_flag("--bnb-saves-input", a.bnb_saves_input,
                "4-bit layers save their input for backward, as bitsandbytes releases of 2023-24 did "
                "(MatMul4Bit ctx.tensors = (A, B)); current ones do not");
  cmd->add_option("--bnb-quant-storage", a.bnb_quant_storage,
                  "bnb_4bit_quant_storage: uint8|bf16|fp16|fp32, the dtype the packed 4-bit codes are stored "
                  "as (FSDP and ZeRO-3 shard them like the model's own parameters when it matches)")
      ->capture_default_str();
}

// FSDP's wrapping, the world, tensor / sequence / loss parallelism, float8, context parallelism.
void add_parallel_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--fsdp-auto-wrap", a.fsdp_auto_wrap,
                  "FSDP1 with LoRA: peft (PEFT's fsdp_auto_wrap_policy, the Trainer's: adapters are units of "
                  "their own) or transformer (each decoder layer with its adapters)")
      ->capture_default_str();
  cmd->add_option("--fsdp-use-orig-params", a.fsdp_use_orig_params,
                  "FSDP1's use_orig_params: true (accelerate's default) or false")
      ->capture_default_str();
  cmd->add_flag(
      "--no-prepare-kbit", a.no_prepare_kbit,
      "skip PEFT's prepare_model_for_kbit_training, which training runs call by default (it casts the "
      "non-quantized parameters to fp32; its gradient checkpointing is --checkpointing full)");
  cmd->add_option("--world-size,--gpus", a.world_size,
                  "GPUs in all (data-parallel x tensor-parallel); the report is one rank's")
      ->capture_default_str();
  cmd->add_option(
      "--dp", a.dp,
      "data-parallel degree (Megatron's data-parallel size, torchtitan's "
      "data_parallel_shard_degree): the GPUs are dp x cp x tp x pp (--gpus, if given, must agree)");
  cmd->add_option("--tp", a.tp, "Megatron tensor parallelism: GPUs per model replica (divides --world-size)")
      ->capture_default_str();
  cmd->add_flag(
      "--sequence-parallel", a.sequence_parallel,
      "Megatron sequence parallelism with --tp: norms, dropouts and residuals split along the sequence");
  cmd->add_flag("--loss-parallel", a.loss_parallel,
                "with --tp: the cross-entropy over vocabulary-sharded logits under "
                "torch.distributed.tensor.parallel.loss_parallel() (torchtitan's default with tensor "
                "parallelism) instead of the fused kernels");
  cmd->add_option("--float8", a.float8,
                  "torchao float8 training (convert_to_float8_training, torchtitan's filter): none, "
                  "tensorwise or rowwise scaling; or te: Transformer Engine's te.Linear under "
                  "fp8_autocast(DelayedScaling()) (Accelerate's convert_model); needs --precision bf16")
      ->capture_default_str();
  cmd->add_option("--fp8-amax-history-len", a.fp8_amax_history_len,
                  "Transformer Engine DelayedScaling.amax_history_len (--float8 te)")
      ->capture_default_str();
  cmd->add_flag("--fp8-weight-cache", a.fp8_weight_cache,
                "Transformer Engine: te.Linear.forward(is_first_microbatch=...) keeps the fp8 weight and its "
                "transpose between steps (_fp8_workspaces; --float8 te)");
  cmd->add_flag("--float8-all-gather", a.float8_all_gather,
                "torchao's enable_fsdp_float8_all_gather: FSDP2 all-gathers the float8 linears' weights in "
                "float8 (tensorwise only)");
  cmd->add_option("--cp", a.cp,
                  "context parallelism (torch's context_parallel, as torchtitan runs it): the sequence split "
                  "over N of the data-parallel ranks, attention as ring attention; FSDP still shards over "
                  "all of them (torchtitan's dp_shard x cp)")
      ->capture_default_str();
  cmd->add_option("--cp-rotate-method", a.cp_rotate,
                  "how ring attention passes keys and values: allgather (torchtitan's default) or alltoall")
      ->capture_default_str();
}

// A vision-language model's image inputs.
void add_vision_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--images-per-sample", a.images_per_sample,
                  "vision-language models (llava, gemma3, qwen2_vl, qwen2_5_vl): images per sample, each "
                  "tokens_per_image of --seq's tokens (the processor expands every image token)")
      ->capture_default_str();
  cmd->add_option("--image-size", a.image_size,
                  "vision-language models: N or HEIGHTxWIDTH pixels (0: vision_config.image_size; CLIP and "
                  "SigLIP refuse any other; qwen2_vl: resized by Qwen2VLImageProcessor's smart_resize, "
                  "default 448x448)")
      ->capture_default_str();
  cmd->add_option("--image-min-pixels", a.image_min_pixels,
                  "qwen2_vl: Qwen2VLImageProcessor's min_pixels for smart_resize (0: 56*56)")
      ->capture_default_str();
  cmd->add_option("--image-max-pixels", a.image_max_pixels,
                  "qwen2_vl: Qwen2VLImageProcessor's max_pixels for smart_resize (0: 28*28*1280)")
      ->capture_default_str();
  cmd->add_option("--freeze-vision-tower", a.freeze_vision_tower,
                  "vision-language models: true (LLaVA's fine-tune scripts, LLaMA-Factory's "
                  "freeze_vision_tower) trains only the projector and language model; false trains the "
                  "vision tower too")
      ->capture_default_str();
}

// Mixture-of-experts: the implementation, expert parallelism and routing.
void add_moe_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option(
      "--moe-impl", a.moe_impl,
      "mixture-of-experts layers as transformers' MoE block runs them (default), as Megatron-Core's "
      "MoELayer (megatron: AlltoAll token dispatcher, permute/unpermute, grouped GEMM; the default "
      "with --ep over DDP) or as torchtitan's MoE (torchtitan: GroupedExperts, ExpertParallel over "
      "FSDP2; the default with --ep and --fsdp2)");
  cmd->add_option("--ep", a.ep,
                  "expert parallelism (Megatron-Core's --expert-model-parallel-size, torchtitan's "
                  "expert_parallel_degree): the experts split over N ranks, tokens exchanged by all-to-all "
                  "(data-parallel ranks; Megatron's and torchtitan's may span the --tp ranks too: "
                  "--expert-tensor-parallel 1)")
      ->capture_default_str();
  cmd->add_option(
      "--expert-tensor-parallel", a.etp,
      "Megatron-Core's --expert-tensor-parallel-size: each expert's fc1 split by columns and fc2 by "
      "rows over N ranks, the dispatcher gathering their tokens (default: --tp; 1: whole experts); "
      "torchtitan's expert_tensor_parallel_degree with --ep: 1 (its default: EP borrows the TP ranks) or "
      "--tp");
  cmd->add_option("--moe-imbalance", a.moe_imbalance,
                  "routing model: the busiest expert's tokens over the mean (1: an even router); the busiest "
                  "expert-parallel rank is simulated")
      ->capture_default_str();
  cmd->add_option(
         "--moe-capacity-factor", a.moe_capacity_factor,
         "Megatron-Core's --moe-expert-capacity-factor: each expert keeps at most ceil(tokens x top-k / "
         "experts x F) of a rank's tokens, the rest dropped (0: dropless, its default)")
      ->capture_default_str();
  cmd->add_flag("--moe-pad-to-capacity", a.moe_pad_to_capacity,
                "Megatron-Core's --moe-pad-expert-input-to-capacity: every expert gets exactly its capacity");
}

// Pipeline parallelism (Megatron's and torchtitan's schedules and splits).
void add_pipeline_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option(
         "--pp", a.pp,
         "Megatron pipeline stages: the layers split over --pp GPUs per replica (world = dp x tp x pp)")
      ->capture_default_str();
  cmd->add_option("--pp-schedule", a.pp_schedule,
                  "1f1b|interleaved (Megatron's; torch.distributed.pipelining's Schedule1F1B and "
                  "ScheduleInterleaved1F1B alike)|gpipe (ScheduleGPipe)")
      ->capture_default_str();
  cmd->add_option("--pp-split", a.pp_split,
                  "megatron (layers split evenly, or refused) | torchtitan (generate_llm_fqn_per_model_part: "
                  "uneven splits, the embeddings and the output counted as layers)")
      ->capture_default_str();
  cmd->add_option("--pp-first-stage-less-layers", a.pp_first_stage_less_layers,
                  "with --pp-split torchtitan: the layers the embeddings weigh "
                  "(pipeline_parallel_first_stage_less_layers)")
      ->capture_default_str();
  cmd->add_option("--pp-last-stage-less-layers", a.pp_last_stage_less_layers,
                  "with --pp-split torchtitan: the layers the norm and output weigh "
                  "(pipeline_parallel_last_stage_less_layers)")
      ->capture_default_str();
  cmd->add_option("--virtual-stages", a.virtual_stages, "model chunks per GPU with --pp-schedule interleaved")
      ->capture_default_str();
  cmd->add_option(
      "--pp-stage", a.pp_stage,
      "the pipeline stage to report (default: every stage is simulated, the highest peak reported)");
}

// Data parallelism: DeepSpeed ZeRO, FSDP1 / FSDP2, DDP, offload, and cuBLAS's workspace.
void add_sharding_options(CLI::App* cmd, RequestArgs& a) {
  cmd->add_option("--zero", a.zero, "DeepSpeed ZeRO stage 1|2|3 (0: plain DDP)");
  cmd->add_option("--fsdp", a.fsdp,
                  "PyTorch FSDP sharding strategy: full-shard|shard-grad-op|no-shard|hybrid-shard");
  cmd->add_flag(
      "--fsdp2", a.fsdp2,
      "PyTorch FSDP2 (fully_shard per decoder layer and root) instead of FSDP1; --fsdp picks "
      "reshard_after_forward (full-shard: True, shard-grad-op: False) or a 2-D mesh (hybrid-shard)");
  cmd->add_option(
      "--reduce-dtype", a.reduce_dtype,
      "fp32|bf16|fp16: FSDP's MixedPrecision reduce_dtype, the dtype gradients are reduce-scattered "
      "in (default: the gradients')");
  cmd->add_option(
         "--fsdp2-copy-in", a.fsdp2_copy_in,
         "FSDP2's reduce-scatter copy-in stream: compute (current PyTorch: the input kept until the next "
         "unit's post_backward, one alive at a time) or reduce-scatter (the 2024 FSDP2: freed once the "
         "reduce-scatter is issued)")
      ->capture_default_str();
  cmd->add_option("--fsdp2-last-layer", a.fsdp2_last_layer,
                  "FSDP2's last decoder layer after forward: reshard (fully_shard's default) or keep "
                  "(torchtitan's apply_fsdp without PP: reshard_after_forward=False for the last block)")
      ->capture_default_str();
  cmd->add_flag("--no-limit-all-gathers", a.no_limit_all_gathers,
                "FSDP1 with limit_all_gathers=False: the host issues all-gathers without waiting for frees");
  cmd->add_flag(
      "--fsdp-sync-module-states", a.fsdp_sync_module_states,
      "FSDP1 with sync_module_states=True: each unit's parameters are broadcast from rank 0 (250 MiB "
      "buckets) as it is wrapped (accelerate's cpu_ram_efficient_loading, fsdp_qlora's low_memory)");
  cmd->add_option("--gpus-per-node", a.gpus_per_node, "GPUs per node (FSDP hybrid-shard's shard group)")
      ->capture_default_str();
  cmd->add_option("--bucket-cap-mb", a.bucket_cap_mb, "DDP's bucket_cap_mb (default 25)");
  cmd->add_flag(
      "--gradient-as-bucket-view", a.gradient_as_bucket_view,
      "DDP's gradient_as_bucket_view=True: each .grad is a view of its all-reduce bucket, so a rank "
      "holds its gradients once");
  cmd->add_flag(
      "--find-unused-parameters", a.find_unused_parameters,
      "DDP's find_unused_parameters=True (a graph walk on the host each forward; the same buckets)");
  cmd->add_flag(
      "--static-graph", a.static_graph,
      "DDP's static_graph=True (the first step's all-reduce delayed to the end of backward; the same "
      "buckets)");
  cmd->add_flag(
      "--zero-redundancy-optimizer", a.zero_redundancy_optimizer,
      "DDP with torch.distributed.optim.ZeroRedundancyOptimizer: each rank's optimizer keeps states "
      "for its partition of the parameters only (sorted-greedy by numel)");
  cmd->add_option("--stage3-max-reuse-distance", a.stage3_max_reuse_distance,
                  "DeepSpeed ZeRO-3 stage3_max_reuse_distance in elements (default 1e9): parameters reused "
                  "within it stay gathered from their forward to their backward");
  cmd->add_option("--stage3-prefetch-bucket-size", a.stage3_prefetch_bucket_size,
                  "DeepSpeed ZeRO-3 stage3_prefetch_bucket_size in elements (default 5e7): parameters "
                  "all-gathered ahead of the module that needs them, from the second step (0: no prefetch)");
  cmd->add_option("--stage3-max-live-parameters", a.stage3_max_live_parameters,
                  "DeepSpeed ZeRO-3 stage3_max_live_parameters in elements (default 1e9): prefetching stops "
                  "when this many elements are gathered");
  cmd->add_option("--reduce-bucket-size", a.reduce_bucket_size,
                  "DeepSpeed ZeRO 1/2 reduce_bucket_size in elements (default 5e8)");
  cmd->add_flag("--overlap-comm", a.overlap_comm, "DeepSpeed overlap_comm (two gradient buffers)");
  cmd->add_flag("--optimizer-in-backward", a.optimizer_in_backward,
                "step each parameter's optimizer as its gradient is made and free it (torchtune's "
                "optimizer_in_bwd)");
  cmd->add_option(
      "--offload", a.offload,
      "optimizer|params|activations, any subset: to the host, as ZeRO-Offload / ZeRO-Infinity (--zero 2|3), "
      "FSDP's CPUOffload (--fsdp, params) and saved-tensor hooks (activations) do");
  cmd->add_option("--activation-offload", a.activation_offload,
                  "with --offload activations: save-on-cpu (torch.autograd.graph.save_on_cpu) or torchtune "
                  "(OffloadActivations: side stream, forward stash, parameters and model.output kept)")
      ->capture_default_str();
  cmd->add_option(
      "--cublas-workspace-config", a.cublas_workspace_config,
      "CUBLAS_WORKSPACE_CONFIG as the run sets it, e.g. :4096:8 (default: PyTorch's for the GPU)");
}

}  // namespace

void add_request_options(CLI::App* cmd, RequestArgs& a, std::string& alloc_conf) {
  add_model_options(cmd, a);
  add_training_step_options(cmd, a);
  add_run_options(cmd, a);
  add_runtime_options(cmd, a, alloc_conf);
  add_serving_options(cmd, a);
  add_peft_options(cmd, a);
  add_quantization_options(cmd, a);
  add_parallel_options(cmd, a);
  add_vision_options(cmd, a);
  add_moe_options(cmd, a);
  add_pipeline_options(cmd, a);
  add_sharding_options(cmd, a);
}

}  // namespace vramsim::cli
