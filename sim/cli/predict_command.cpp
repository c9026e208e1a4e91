// `vramsim predict`: will this training step fit, and where does the memory go?
#include <algorithm>
#include <charconv>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/cli/commands.h"
#include "sim/cli/moe_routing.h"
#include "sim/cli/prediction_report.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/engine/gpu_table.h"
#include "sim/hub/checkpoint_quantization.h"
#include "sim/hub/checkpoint_weights.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"
#include "sim/predict/html_report.h"
#include "sim/predict/perfetto_trace.h"
#include "sim/predict/step_prediction.h"
#include "traces/trace_io.h"

namespace vramsim::cli {

namespace {

// Predict's runs are explained as traced ones are: every figure from the allocator model.
const ReportText kPredictText{"allocated bytes of the allocator model where the run entered each phase",
                              "peaks of the allocator model within each step"};

// The checkpoint beside --model's config.json (checkpoint_weights.h): its headers' tensors, and where they
// disagree with config.json.
struct CheckpointReport {
  CheckpointWeights weights;
  std::vector<std::string> warnings;
};

std::optional<CheckpointReport> read_checkpoint(const std::string& model) {
  std::optional<CheckpointWeights> weights = checkpoint_weights_of(model);
  if (!weights) {
    return std::nullopt;
  }
  std::vector<std::string> warnings =
      checkpoint_warnings(*weights, load_model(model), checkpoint_quantization_of(model));
  return CheckpointReport{std::move(*weights), std::move(warnings)};
}

nlohmann::ordered_json checkpoint_json(const std::optional<CheckpointReport>& c) {
  if (!c) {
    return nullptr;
  }
  nlohmann::ordered_json by_dtype = nlohmann::ordered_json::object();
  for (const auto& [dtype, bytes] : c->weights.bytes_by_dtype) {
    by_dtype[dtype] = bytes;
  }
  return {{"source", c->weights.source},
          {"files", c->weights.files},
          {"tensors", c->weights.tensors.size()},
          {"elements", c->weights.total_elements},
          {"bytes", c->weights.total_bytes},
          {"bytes_by_dtype", by_dtype},
          {"warnings", c->warnings}};
}

void print_run(const Prediction& p, const RequestArgs& a, const std::optional<CheckpointReport>& checkpoint) {
  fmt::print("model            {} ({} ops, {} tensors, {} allocator requests)\n", p.model_name, p.ops,
             p.tensors, p.requests);
  if (checkpoint) {
    fmt::print("checkpoint       {} (the weights as stored, from the safetensors headers){}\n",
               describe(checkpoint->weights),
               checkpoint->warnings.empty() ? "" : "; differs from config.json (see the warning)");
  }
  if (p.vision.simulated()) {
    // llava: the tower, projector and the image tokens' merge are part of the step (vision_tower.h)
    fmt::print(
        "vision part      {} of {} parameters ({} layers, {}) + projector of {} ({}); {} image(s) per "
        "sample, {} tokens each\n",
        p.vision.model_type, p.vision.tower_parameters, p.vision.clip.layers,
        p.vision_tower_frozen ? "frozen" : "trained", p.vision.projector_parameters,
        p.trainable_parameters > 0 && p.lora_rank == 0 && p.peft_method.empty() ? "trained" : "frozen",
        p.images_per_sample, p.tokens_per_image);
  } else if (p.vision.cross_attention_parameters > 0 && p.images_per_sample > 0) {
    // mllama: the image path runs (mllama_vision.h)
    const bool adapters_only = p.lora_rank > 0 || !p.peft_method.empty();
    const std::int64_t side = p.vision.mllama.image_size / p.vision.mllama.patch_size;
    fmt::print(
        "vision part      {} of {} parameters ({} + {} layers, {}) + projector of {} + {} cross-attention "
        "layers of {} ({}); {} image(s) per sample, {} tiles of {} patches each\n",
        p.vision.model_type, p.vision.tower_parameters, p.vision.mllama.layers, p.vision.mllama.global_layers,
        p.vision_tower_frozen || adapters_only ? "frozen" : "trained", p.vision.projector_parameters,
        p.vision.cross_attention_layers.size(), p.vision.cross_attention_parameters,
        adapters_only || p.trainable_parameters == 0 ? "frozen" : "trained", p.images_per_sample,
        p.vision.mllama.max_num_tiles, side * side + 1);
  } else if (p.vision.cross_attention_parameters > 0) {
    // mllama: the tower, projector and cross-attention layers are loaded but a text-only batch runs none of
    // them (mllama_parameters.h)
    fmt::print(
        "vision part      {} of {} parameters + projector of {} + {} cross-attention layers of {}: in "
        "memory, not run (a text-only batch: --images-per-sample 0)\n",
        p.vision.model_type, p.vision.tower_parameters, p.vision.projector_parameters,
        p.vision.cross_attention_layers.size(), p.vision.cross_attention_parameters);
  } else if (p.vision.total() > 0) {
    // The multimodal wrapper's vision part is built by transformers but not simulated: say how much it is.
    fmt::print(
        "vision part      {} parameters from vision_config ({} {} + projector {}): counted, not "
        "simulated; the prediction is the language model's {}\n",
        p.vision.total(), p.vision.model_type, p.vision.tower_parameters, p.vision.projector_parameters,
        p.total_parameters);
  }
  // What was asked (the code's default when nothing was), and the kernel SDPA resolves to when it differs.
  const std::string& asked = a.attention.empty() ? p.attention_asked : a.attention;
  const std::string attention =
      p.attention_kernel == asked ? asked : fmt::format("{} ({})", asked, p.attention_kernel);
  if (p.generation) {
    const Prediction::Generation& g = *p.generation;
    std::string prompt = std::to_string(g.prompt_tokens);
    if (!g.prompt_lens.empty()) {
      const auto [lo, hi] = std::minmax_element(g.prompt_lens.begin(), g.prompt_lens.end());
      double mean = 0.0;
      for (std::int64_t len : g.prompt_lens) {
        mean += static_cast<double>(len) / static_cast<double>(g.prompt_lens.size());
      }
      const std::string drawn =
          g.prompt_lens.size() <= 16 ? fmt::format("drawn: {}; ", fmt::join(g.prompt_lens, " ")) : "";
      prompt = fmt::format("{} ({}min {}, max {}, mean {:.1f}{})", a.prompt_len, drawn, *lo, *hi, mean,
                           g.kv_cache == "paged" ? "" : "; left-padded to the longest");
    }
    fmt::print(
        "run              batch {}, prompt {}, generate {} tokens ({} KV cache), {}, attention {}, no_grad\n",
        a.batch, prompt, a.generate, a.kv_cache, a.precision, attention);
  } else {
    fmt::print("run              batch {}, seq {}, {}, {}, checkpointing {}, attention {}, {} step(s){}{}\n",
               a.batch, a.seq, a.precision, a.optimizer, a.checkpointing, attention, a.steps,
               a.inference ? ", inference (no_grad)" : (a.forward_only ? ", forward only" : ""),
               a.loss == "ce"                ? std::string()
               : a.loss == "ce-shift-logits" ? fmt::format(", loss {}", a.loss)
                                             : fmt::format(", loss {} ({} chunks)", a.loss, a.loss_chunks));
  }
  if (a.precision == "bf16" && !p.generation && !a.inference && !a.forward_only) {
    fmt::print("precision        {}\n", p.precision_regime);
  }
  if (!a.compile_mode.empty() && a.compile_mode != "none") {
    fmt::print("torch.compile    mode {}, {}{} (Inductor; AOTAutograd's min-cut partitioner{})\n",
               a.compile_mode,
               a.compile_scope == "layer"            ? "each decoder layer a graph"
               : a.compile_scope == "model-and-loss" ? "the model and its loss one graph"
                                                     : "the model one graph",
               !p.compiled_loss         ? ""
               : a.loss == "chunked-ce" ? ", each loss chunk a graph (compile_loss)"
                                        : ", the loss a graph (torchtitan's compiled loss_fn)",
               a.warm == "none" ? "; first call: Triton autotuning's 256 MiB benchmark buffer" : "");
  } else if (p.compiled_loss) {  // --compile-loss on alone: torchtitan's compile.components = ["loss"]
    fmt::print(
        "torch.compile    mode default, the model eager, {} (Inductor; AOTAutograd's min-cut "
        "partitioner{})\n",
        a.loss == "chunked-ce" ? "each loss chunk a graph (compile_loss)"
                               : "the loss a graph (torchtitan's compiled loss_fn, components [\"loss\"])",
        a.warm == "none" ? "; first call: Triton autotuning's 256 MiB benchmark buffer" : "");
  }
  if (!p.base_weights.empty()) {
    const bool four_bit = p.base_weights != "int8";
    if (p.base_weights == "torchao-nf4") {
      fmt::print(
          "base weights     nf4 (torchao NF4Tensor, block 64, scalers int8 per 256, as torchtune's QLoRA): "
          "every "
          "linear layer but the output; nothing cast to fp32\n");
    } else {
      fmt::print(
          "base weights     {} (bitsandbytes {}{}{}, compute {}{}){}: every linear layer but lm_head\n",
          p.base_weights, four_bit ? "Linear4bit, absmax per 64" : "Linear8bitLt, threshold 6.0",
          four_bit ? (p.bnb_double_quant ? ", double quant" : ", no double quant") : "",
          four_bit && p.bnb_saves_input ? ", input saved" : "", p.bnb_compute_dtype,
          four_bit && a.bnb_quant_storage != "uint8" ? ", stored as " + a.bnb_quant_storage : "",
          p.bnb_prepare_kbit_training ? ", other parameters fp32 (prepare_model_for_kbit_training)" : "");
    }
  }
  if (p.peft_method == "lora" && p.lora_rank > 0) {
    fmt::print(
        "lora             r {} on {}: {} trainable of {} parameters ({:.2f} %), base weights frozen (PEFT)\n",
        p.lora_rank, fmt::join(p.lora_targets, ","), p.trainable_parameters, p.total_parameters,
        100.0 * static_cast<double>(p.trainable_parameters) / static_cast<double>(p.total_parameters));
  } else if (!p.peft_method.empty()) {
    fmt::print(
        "peft             {}{}{}: {} trainable of {} parameters ({:.4f} %), base weights frozen (PEFT)\n",
        p.peft_method, p.lora_rank > 0 ? fmt::format(" r {}", p.lora_rank) : "",
        p.lora_targets.empty() ? "" : fmt::format(" on {}", fmt::join(p.lora_targets, ",")),
        p.trainable_parameters, p.total_parameters,
        100.0 * static_cast<double>(p.trainable_parameters) / static_cast<double>(p.total_parameters));
  }
  if (a.float8 == "te") {
    fmt::print(
        "float8           Transformer Engine te.Linear under fp8_autocast (DelayedScaling, amax history "
        "{}){}\n",
        a.fp8_amax_history_len, a.fp8_weight_cache ? "; fp8 weights cached between steps" : "");
  } else if (a.float8 != "none") {
    fmt::print("float8           torchao Float8Linear ({} scaling) on the decoder layers' linears{}{}\n",
               a.float8, a.float8_all_gather ? "; FSDP2 all-gathers their weights in float8" : "",
               a.tp <= 1 ? ""
               : a.float8 == "tensorwise"
                   ? "; float8 tensor parallelism (module inputs cast before their all-gather)"
                   : "; regular tensor parallelism (bf16 all-gathers, each linear casts its input)");
  }
  if (a.ep > 1 || !a.moe_impl.empty() || a.moe_imbalance != 1.0 || a.moe_capacity_factor > 0) {
    // request_args.cpp: --ep alone is torchtitan's MoE under FSDP2, Megatron-Core's otherwise
    const bool by_ep = a.moe_impl.empty() && a.ep > 1;
    const bool torchtitan =
        a.moe_impl == "torchtitan" || (by_ep && std::string_view(p.data_parallel).starts_with("fsdp2-"));
    const bool megatron = !torchtitan && (a.moe_impl == "megatron" || by_ep);
    const char* impl = torchtitan ? "torchtitan MoE (GroupedExperts, grouped_mm; experts FSDP-sharded over "
                                    "the ranks outside their expert-parallel group)"
                       : megatron ? "Megatron-Core MoELayer (AlltoAll dispatcher, grouped GEMM)"
                                  : "transformers' MoE block";
    fmt::print("moe              {}{}; busiest expert {} x the mean tokens{}\n", impl,
               a.ep > 1 ? fmt::format(", expert parallel {} (the busiest rank simulated)", a.ep) : "",
               a.moe_imbalance,
               a.moe_capacity_factor > 0 ? fmt::format(", capacity factor {}{}", a.moe_capacity_factor,
                                                       a.moe_pad_to_capacity ? " (padded)" : " (dropping)")
                                         : "");
  }
  if (a.cp > 1) {
    fmt::print(
        "context parallel {} ranks share each sequence ({} tokens each); ring attention, {} rotation\n", a.cp,
        a.seq / a.cp, a.cp_rotate);
  }
  if (p.tensor_parallel > 1) {
    fmt::print("tensor parallel  {} GPUs per model replica (Megatron): heads, MLP and vocabulary split{}\n",
               p.tensor_parallel, p.sequence_parallel ? "; sequence parallel" : "");
  }
  if (p.pipeline) {
    const Prediction::Pipeline& pp = *p.pipeline;
    std::string stages;
    for (const Prediction::PipelineStagePeak& s : pp.simulated) {
      stages += fmt::format("{}{}: {}{}", stages.empty() ? "" : ", ", s.stage,
                            format_size(static_cast<Bytes>(s.peak_reserved_bytes)), s.fits ? "" : " (OOM)");
    }
    fmt::print(
        "pipeline         {} stages, {} schedule{}, {} micro-batches, {} split: the report is stage {}'s\n",
        pp.stages, pp.schedule,
        pp.virtual_stages > 1 ? fmt::format(" with {} chunks per GPU", pp.virtual_stages) : std::string(),
        pp.micro_batches, pp.split, pp.stage);
    fmt::print("                 decoder layers per {}stage: {}\n", pp.virtual_stages > 1 ? "virtual " : "",
               fmt::join(pp.layers_per_virtual_stage, ","));
    fmt::print("                 peak reserved per stage: {}\n", stages);
    fmt::print(
        "                 step time: this stage's kernels plus the bubble, (p - 1) / (v * M) of them\n");
  }
  if (p.data_parallel != "none") {
    fmt::print("data parallel    {} over {} GPUs: the figures are {}\n", p.data_parallel, p.world_size,
               p.zero_redundancy_optimizer ? "rank 0's" : "one rank's (every rank's alike)");
  }
  if (p.zero_redundancy_optimizer) {
    fmt::print(
        "zero redundancy  ZeroRedundancyOptimizer: rank 0 keeps optimizer states for its partition only "
        "(parameters sorted by numel, each to the rank with the fewest elements so far), then broadcasts the "
        "updated parameters in place\n");
  }
  if (!p.offload.empty()) {
    const auto has = [&p](const char* what) {
      return std::find(p.offload.begin(), p.offload.end(), what) != p.offload.end();
    };
    fmt::print("offload          {} on the host (pinned CPU memory, not counted here){}{}\n",
               fmt::join(p.offload, " and "), has("optimizer") ? "; the optimizer steps there" : "",
               !has("activations") ? ""
               : p.activation_offload == "torchtune"
                   ? "; torchtune's OffloadActivations: copies on a side stream, "
                     "the last 5 saves kept on the GPU, parameters and "
                     "model.output not offloaded"
                   : "; saved tensors come back to the GPU one backward node at a time");
  }
}

struct PredictArgs {
  RequestArgs request;
  std::string alloc_conf;
  bool json = false;
  std::string trace_out;
  std::string perfetto;
  std::string html;
};

}  // namespace

namespace {

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out.push_back(',');
    }
    out.push_back(digits[i]);
  }
  return out;
}

// `predict --list-models`: every preset, its model_type and its parameter count (model.parameters()).
void print_model_list() {
  fmt::print("{:<16} {:<12} {:>17}\n", "preset", "model_type", "parameters");
  for (const std::string& name : model_preset_names()) {
    const ModelConfig m = model_preset(name);
    const std::int64_t n = m.parameter_count();
    fmt::print("{:<16} {:<12} {:>17}  ({:.2f}B)\n", name, m.model_type, with_commas(n),
               static_cast<double>(n) / 1e9);
  }
}

// `predict --list-gpus`: the GPU table's memory (the runtime's total) and compute capability.
void print_gpu_list() {
  fmt::print("{:<14} {:>12} {:>12} {:>4}  {}\n", "gpu", "total MiB", "nominal GiB", "cc", "variant");
  for (const GpuSpec& g : gpu_table()) {
    fmt::print("{:<14} {:>12} {:>12} {:>4}  {}\n", g.name, g.total_memory_bytes / kMiB,
               g.nominal_memory_bytes / kGiB,
               fmt::format("{}.{}", g.compute_capability / 10, g.compute_capability % 10), g.variant);
  }
}

}  // namespace

void add_predict_command(CLI::App& app, std::function<int()>& run, CommandResult* result) {
  static PredictArgs args;
  args = PredictArgs{};
  auto* cmd = app.add_subcommand(
      "predict",
      "Simulate training steps of a Transformer and predict their GPU memory: the bill, the peak, "
      "phases, fragmentation and whether it fits");
  add_request_options(cmd, args.request, args.alloc_conf);
  cmd->add_option("--batch", args.request.batch, "batch size");
  // checked in the callback: --list-* need none of them
  cmd->get_option("--model")->required(false);
  cmd->get_option("--seq")->required(false);
  static bool list_models = false, list_gpus = false;
  list_models = list_gpus = false;
  cmd->add_flag("--list-models", list_models, "print the model presets with their parameter counts and exit");
  cmd->add_flag("--list-gpus", list_gpus, "print the GPU table (memory, compute capability) and exit");
  static std::string imbalance_dist;
  imbalance_dist.clear();
  cmd->add_option(
      "--moe-imbalance-dist", imbalance_dist,
      "routing model uniform:LO..HI over --moe-imbalance: the peak at four points of the range, the "
      "largest F that fits (bisection) and the OOM probability");
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->add_option("--trace-out", args.trace_out, "write the generated trace (.json / .pickle / .vtrace)");
  cmd->add_option("--perfetto", args.perfetto,
                  "write the predicted run as Chrome trace-event JSON (Perfetto, chrome://tracing): ops per "
                  "stream, the allocator's allocated / reserved / active bytes, requested bytes alive per "
                  "category, cudaMalloc / cudaFree / OOM instants");
  cmd->add_option(
      "--html", args.html,
      "write a self-contained page: memory over time stacked by category, the peak, the segment map "
      "at the peak, the bill");
  cmd->callback([&run, cmd, result] {
    if (list_models || list_gpus) {
      run = [] {
        if (list_models) {
          print_model_list();
        }
        if (list_gpus) {
          print_gpu_list();
        }
        return 0;
      };
      return;
    }
    for (const char* required : {"--model", "--seq", "--batch"}) {
      if (cmd->count(required) == 0) {
        throw CLI::RequiredError(required);
      }
    }
    if (cmd->count("--alloc-conf") > 0) {
      args.request.alloc_conf = args.alloc_conf;
    }
    if (!imbalance_dist.empty()) {
      const bool alone = !args.json && args.html.empty() && args.perfetto.empty() && args.trace_out.empty() &&
                         result == nullptr && cmd->count("--moe-imbalance") == 0;
      run = [alone] {
        if (!alone) {
          throw InputError(
              "--moe-imbalance-dist: prints its own table; not with --moe-imbalance, --json, --html, "
              "--perfetto or --trace-out");
        }
        const ImbalanceDist dist = parse_imbalance_dist(imbalance_dist);
        const PredictRequest request = make_request(args.request);
        print_imbalance_sweep(sweep_imbalance(request, dist), dist);
        return 0;
      };
      return;
    }
    run = [result] {
      const std::optional<CheckpointReport> checkpoint = read_checkpoint(args.request.model);
      // On stderr from the command line; a caller of the result object (Python) has them in its JSON.
      for (const std::string& w :
           checkpoint&& result == nullptr ? checkpoint->warnings : std::vector<std::string>{}) {
        fmt::print(stderr, "vramsim: warning: {}\n", w);
      }
      PredictRequest request = make_request(args.request);
      // A caller of the result object may ask for the page later.
      request.keep_timeline = !args.perfetto.empty() || !args.html.empty() || result != nullptr;
      Snapshot trace;
      auto shared =
          std::make_shared<const Prediction>(predict(request, args.trace_out.empty() ? nullptr : &trace));
      const Prediction& p = *shared;
      const std::string title = "vramsim predict " + args.request.model;
      const auto pages_possible = [shared](const char* option) {
        if (!shared->timeline) {
          throw InputError(fmt::format(
              "{}: one rank's run only (not every stage of a pipeline: name --pp-stage)", option));
        }
      };
      if (!args.html.empty() || !args.perfetto.empty()) {
        pages_possible(args.html.empty() ? "--perfetto" : "--html");
      }
      if (!args.html.empty()) {
        write_output_file(args.html, html_report(p, p.timeline->memory, title), "page");
      }
      if (!args.perfetto.empty()) {
        write_output_file(args.perfetto, perfetto_json(p.timeline->ops, p.timeline->memory, title) + "\n",
                          "trace");
      }
      if (result != nullptr) {
        result->json = prediction_json(p, kPredictText);
        if (checkpoint) {  // only where a checkpoint was read: other documents are unchanged
          result->json["checkpoint"] = checkpoint_json(checkpoint);
        }
        result->html = [shared, title, pages_possible] {
          pages_possible("--html");
          return html_report(*shared, shared->timeline->memory, title);
        };
        result->perfetto = [shared, title, pages_possible] {
          pages_possible("--perfetto");
          return perfetto_json(shared->timeline->ops, shared->timeline->memory, title) + "\n";
        };
        result->text = [shared, request_args = args.request, checkpoint] {
          return capture_stdout([&] {
            print_run(*shared, request_args, checkpoint);
            print_prediction(*shared, kPredictText);
          });
        };
      } else if (args.json) {
        nlohmann::ordered_json j = prediction_json(p, kPredictText);
        if (checkpoint) {
          j["checkpoint"] = checkpoint_json(checkpoint);
        }
        fmt::print("{}\n", json_text(j));
      } else {
        print_run(p, args.request, checkpoint);
        print_prediction(p, kPredictText);
      }
      if (!args.trace_out.empty()) {
        trace.source = args.trace_out;
        save_snapshot(trace, args.trace_out, format_from_path(args.trace_out));
      }
      return 0;
    };
  });
}

}  // namespace vramsim::cli
