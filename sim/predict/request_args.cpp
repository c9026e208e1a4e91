// make_request: the options as a user types them (RequestArgs, CLI strings) -> a PredictRequest. Each
// technique's options are parsed in its own room (request_args_parts.h: the step, fine-tuning, parallelism,
// serving), with the framework's defaults and the layout checks; this file holds the device, the allocator's
// settings, the checks across rooms, and the option parsers of fit (--vary, --margin) and --prompt-len. Every
// bad value is an InputError naming its option.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "sim/alloc/caching_config.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/engine/gpu_table.h"
#include "sim/inference/vllm_expert_parallel.h"
#include "sim/models/layer_code.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/cuda_context.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/request_args_parts.h"

namespace vramsim {
namespace {

// The device: --gpu (its memory, CUDA context and cuBLAS workspaces) or --capacity. Unknown GPU names fail
// here, before any work; the GPU's table entry, or nullptr with --capacity.
const GpuSpec* apply_device_args(const RequestArgs& a, PredictRequest& r) {
  r.gpu = a.gpu;
  // The cuBLAS workspaces PyTorch makes on this GPU (with --capacity there is no GPU to ask: Hopper's 32
  // MiB).
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
  return spec;
}

// The allocator's settings (--torch-version, --alloc-conf) and the CUDA context's bytes.
void apply_allocator_args(const RequestArgs& a, PredictRequest& r) {
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
  for (const auto& [value, option] : {std::pair{a.nccl_channels, "--nccl-channels"},
                                      std::pair{a.nccl_p2p_channels, "--nccl-p2p-channels"}}) {
    if (value < 0 || value > kNcclMaxChannels) {
      throw InputError(
          fmt::format("{}: {} is not in 1..{} (NCCL's MAXCHANNELS)", option, value, kNcclMaxChannels));
    }
    if (value > 0 && a.gpu.empty()) {
      throw InputError(
          fmt::format("{}: needs --gpu (--capacity counts nothing outside the allocator)", option));
    }
  }
  r.nccl_channels = NcclChannels{a.nccl_channels, a.nccl_p2p_channels};
}

// The work the run simulates, bounded before any of it is done (kMaxLayerPasses).
void check_simulated_work(const PredictRequest& r) {
  const TrainingOptions& o = r.options;
  const std::int64_t layers = std::max<std::int64_t>(1, r.model.n_layers);
  const std::int64_t passes =
      o.generate_tokens > 0 ? std::int64_t{o.generate_tokens}
                            : 2 * std::int64_t{o.steps} * std::max<std::int64_t>(1, o.grad_accumulation);
  if (passes > kMaxLayerPasses / layers) {
    throw InputError(
        o.generate_tokens > 0
            ? fmt::format("--generate: {} tokens through {} layers is more than vramsim simulates ({} layer "
                          "passes, about 6 GB of host memory): at most {} tokens for this model",
                          o.generate_tokens, layers, kMaxLayerPasses, kMaxLayerPasses / layers)
            : fmt::format("--steps x --grad-accumulation: {} x {} training passes through {} layers is more "
                          "than vramsim simulates ({} layer passes, 2 per training pass, about 6 GB of host "
                          "memory): at most {} for this model",
                          o.steps, o.grad_accumulation, layers, kMaxLayerPasses,
                          kMaxLayerPasses / layers / 2));
  }
}

}  // namespace

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
  const DataParallelOptions data_parallel = request_args::parse_data_parallel(a);
  r.tensor_parallel = a.tp;
  r.vllm.vocab_size = r.model.vocab_size;  // vLLM pads it its own way (vllm_vocab_rows_per_rank)
  const ModelConfig full = r.model;
  request_args::check_serving_expert_parallel(a, data_parallel);
  r.model = tensor_parallel_rank(full, a.tp);
  if (request_args::chosen_moe_impl(a, data_parallel) == MoeImpl::kMegatron) {
    // Megatron splits the experts over their own group (arguments.py: --expert-tensor-parallel-size
    // unset is --tensor-model-parallel-size)
    r.model = expert_tensor_parallel_rank(full, r.model, a.etp.value_or(a.tp));
  } else if (request_args::chosen_moe_impl(a, data_parallel) == MoeImpl::kTorchtitan) {
    // torchtitan's parallelism.expert_tensor_parallel_degree defaults to 1: EP borrows the TP ranks
    r.model = torchtitan_expert_tensor_parallel_rank(full, r.model, a.tp, a.ep, a.etp.value_or(1));
  }
  r.model = expert_parallel_rank(r.model, a.ep);
  if (a.enable_expert_parallel) {  // vLLM's: ep_size = tp (its data parallelism with it is refused above)
    r.model = vllm_expert_parallel_rank(full, r.model, a.tp);
    r.vllm.expert_parallel = r.model.moe.expert_parallel > 1 ? a.tp : 1;
    r.vllm.local_experts = r.model.moe.n_experts > 0 ? r.model.moe.local_experts() : 0;
    r.vllm.global_experts = r.model.moe.n_experts;
  }
  const GpuSpec* spec = apply_device_args(a, r);
  TrainingOptions& o = r.options;
  request_args::apply_step_args(a, spec, r);
  validate(o);
  apply_allocator_args(a, r);
  request_args::apply_compile_args(a, r);
  request_args::apply_generation_args(a, r);
  request_args::apply_peft_args(a, r);
  request_args::apply_quantization_args(a, data_parallel, r);
  request_args::apply_parallel_args(a, data_parallel, r);
  if (spec != nullptr && o.float8.recipe != Float8Recipe::kNone && !spec->runs_float8()) {
    // What the run would raise at its first float8 matmul (torchao) or on entering fp8_autocast (TE).
    const std::string device = fmt::format("the {} (compute capability {}.{})", spec->name,
                                           spec->compute_capability / 10, spec->compute_capability % 10);
    if (o.float8.recipe == Float8Recipe::kTeDelayed) {
      throw InputError(
          fmt::format("--float8 te: Transformer Engine refuses {}: \"Device compute capability 8.9 or higher "
                      "required for "
                      "FP8 execution.\" (check_fp8_support)",
                      device));
    }
    throw InputError(fmt::format(
        "--float8 {}: torchao's float8 matmuls fail on {}: \"torch._scaled_mm is only supported on CUDA "
        "devices with compute capability >= 9.0 or 8.9, or ROCm MI300+\" (PyTorch's _scaled_mm_out_cuda)",
        float8_recipe_name(o.float8.recipe), device));
  }
  request_args::apply_vision_args(a, r);
  request_args::apply_pipeline_args(a, data_parallel, r);
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
  check_simulated_work(r);
  if (o.pipeline.stages > 1) {
    (void)pipeline_chunks(r.model.n_layers, o.pipeline);  // layers that do not split fail here
  }
  return r;
}

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
