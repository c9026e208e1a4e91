// make_request's room for generation and serving: --generate, the KV cache, --prompt-len, and the serving
// engines' own arguments (vLLM's engine arguments, SGLang's mem_fraction_static).
#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/predict/request_args_parts.h"

namespace vramsim::request_args {
namespace {

// --serving-engine: vLLM's or SGLang's KV pool, SGLang's with its own settings (mem_fraction_static).
void parse_serving_engine(const RequestArgs& a, VllmServing& v) {
  const RequestArgs defaults;
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
}

// vLLM's LoRA serving: --enable-lora with the V1 start-up; its sizes only with --enable-lora.
void parse_vllm_lora(const RequestArgs& a, VllmServing& v) {
  const RequestArgs defaults;
  const bool sizes = a.max_loras != defaults.max_loras || a.max_lora_rank != defaults.max_lora_rank ||
                     a.fully_sharded_loras || a.lora_dtype != defaults.lora_dtype;
  if (sizes && !a.enable_lora) {
    throw InputError(
        "--max-loras / --max-lora-rank / --fully-sharded-loras / --lora-dtype: vLLM's LoRA slots, for "
        "--enable-lora");
  }
  if (a.enable_lora && (a.kv_cache != "paged" || a.vllm_version != "v1" || a.serving_engine != "vllm")) {
    throw InputError("--enable-lora: vLLM's LoRA serving, for --kv-cache paged with the V1 engine");
  }
  v.lora = VllmLoraOptions{a.enable_lora, a.max_loras, a.max_lora_rank, a.fully_sharded_loras, a.lora_dtype};
  if (a.enable_lora) {
    validate_vllm_lora(v.lora);
  }
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
                       a.vllm_cudagraph_memory != defaults.vllm_cudagraph_memory ||
                       a.mm_encoder_tp_mode != defaults.mm_encoder_tp_mode;
  if (changed && a.kv_cache != "paged") {
    throw InputError(
        "--gpu-memory-utilization / --block-size / --max-model-len / --max-num-batched-tokens / "
        "--max-num-seqs / --kv-cache-dtype / --quantization / --vllm-non-torch-increase / "
        "--vllm-cudagraph-memory / --mm-encoder-tp-mode: vLLM's settings, for --kv-cache paged");
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
  parse_serving_engine(a, v);
  const bool v1_only = a.kv_cache_dtype != defaults.kv_cache_dtype ||
                       a.quantization != defaults.quantization ||
                       a.vllm_non_torch_increase != defaults.vllm_non_torch_increase ||
                       a.vllm_cudagraph_memory != defaults.vllm_cudagraph_memory ||
                       a.mm_encoder_tp_mode != defaults.mm_encoder_tp_mode;
  if (a.vllm_version != "v1" && v1_only) {
    throw InputError(
        "--kv-cache-dtype / --quantization / --vllm-non-torch-increase / --vllm-cudagraph-memory / "
        "--mm-encoder-tp-mode: modelled for --vllm-version v1 only");
  }
  if (a.mm_encoder_tp_mode != "weights" && a.mm_encoder_tp_mode != "data") {
    throw InputError(fmt::format("--mm-encoder-tp-mode: '{}' is not weights or data", a.mm_encoder_tp_mode));
  }
  v.mm_encoder_tp_mode = a.mm_encoder_tp_mode;
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
  parse_vllm_lora(a, v);
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

}  // namespace

void check_serving_expert_parallel(const RequestArgs& a, const DataParallelOptions& data_parallel) {
  if (a.kv_cache == "paged" && (a.ep > 1 || !a.moe_impl.empty() || a.etp)) {
    throw InputError(
        "--ep / --moe-impl / --expert-tensor-parallel: Megatron-Core's and torchtitan's MoE layers "
        "(training); vLLM's serving expert parallelism is --enable-expert-parallel");
  }
  if (!a.enable_expert_parallel) {
    return;
  }
  if (a.kv_cache != "paged" || a.vllm_version != "v1") {
    throw InputError("--enable-expert-parallel: vLLM's option, for --kv-cache paged with the V1 engine");
  }
  if (a.serving_engine != "vllm") {
    throw InputError(
        "--enable-expert-parallel: vLLM's option; SGLang's expert parallelism (--ep-size) is not modelled "
        "(vramsim)");
  }
  if (data_parallel.world_size > 1) {
    // FusedMoEParallelConfig.use_all2all_kernels: dp_size > 1 and use_ep. The MoE layers then dispatch the
    // DP ranks' tokens through the VLLM_ALL2ALL_BACKEND's kernels, whose buffers are not sized here.
    throw InputError(
        "--enable-expert-parallel with vLLM data parallelism (--world-size above tp x pp): not modelled "
        "(vramsim): the MoE layers' all-to-all kernels (use_all2all_kernels) exchange the DP ranks' tokens");
  }
}

void apply_generation_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
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
}

}  // namespace vramsim::request_args
