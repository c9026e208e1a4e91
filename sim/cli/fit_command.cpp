// `vramsim fit`: the largest batch (or sequence length) that fits on the device with a safety margin.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/size_format.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/sglang_serving_fit.h"
#include "sim/serving/vllm_serving_fit.h"

namespace vramsim::cli {

namespace {

// vLLM's "%.2f GiB"
std::string gib2(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

int print_serving_fit(const ServingFitResult& r, bool json) {
  const char* names[] = {"max-model-len", "max-num-seqs", "gpu-memory-utilization", "max-loras"};
  const char* what = names[static_cast<int>(r.question)];
  if (json) {
    nlohmann::ordered_json j;
    j["vary"] = what;
    j["gpu_memory_utilization"] = r.gpu_memory_utilization;
    j["max_model_len"] = r.max_model_len;
    j["max_num_batched_tokens"] = r.max_num_batched_tokens;
    j["max_num_seqs"] = r.max_num_seqs;
    j["total_bytes"] = r.total_bytes;
    j["available_kv_cache_bytes"] = r.available_bytes;
    j["gpu_kv_cache_tokens"] = r.kv_cache_tokens;
    j["refusal"] = r.refusal;
    j["min_gpu_memory_utilization"] = r.min_utilization;
    if (r.question == ServingQuestion::kGpuMemoryUtilization) {
      j["margin"] = r.margin;
      j["outside_budget_bytes"] = r.outside_budget_bytes;
      j["best"] = r.answer_utilization;
    } else {
      j["best"] = r.answer;
    }
    nlohmann::ordered_json trials = nlohmann::ordered_json::array();
    for (const ServingTrial& t : r.trials) {
      trials.push_back({{r.question == ServingQuestion::kMaxLoras ? "max_loras" : "max_num_seqs", t.value},
                        {"num_gpu_blocks", t.num_gpu_blocks},
                        {"needed_blocks", t.needed_blocks},
                        {"starts", t.starts},
                        {"fits", t.fits}});
    }
    j["trials"] = trials;
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print(
      "vLLM V1          gpu_memory_utilization {}, max_model_len {}, max_num_batched_tokens {}, max_num_seqs "
      "{}: "
      "Available KV cache memory {}, GPU KV cache size {} tokens\n",
      r.gpu_memory_utilization, r.max_model_len, r.max_num_batched_tokens, r.max_num_seqs,
      gib2(r.available_bytes), r.kv_cache_tokens);
  switch (r.question) {
    case ServingQuestion::kMaxModelLen:
      if (!r.refusal.empty()) {
        fmt::print("refusal          {}\n", r.refusal);
      }
      if (r.answer > 0) {
        fmt::print(
            "answer           largest max_model_len that starts: {} (estimate_max_model_len: whole blocks of "
            "{} "
            "tokens, at most max_position_embeddings)\n",
            r.answer, r.block_size);
      } else {
        fmt::print("answer           no max_model_len starts: not one block of {} tokens fits\n",
                   r.block_size);
      }
      break;
    case ServingQuestion::kMaxNumSeqs:
      for (const ServingTrial& t : r.trials) {
        fmt::print("  max_num_seqs {:>6}   {:>8} blocks, {:>8} needed   {}\n", t.value, t.num_gpu_blocks,
                   t.needed_blocks,
                   !t.starts ? "refused"
                   : t.fits  ? "fits"
                             : "over the blocks");
      }
      if (r.answer == 0) {
        fmt::print("answer           no max_num_seqs serves requests of {} tokens at once\n",
                   r.max_model_len);
      } else {
        fmt::print("answer           largest max_num_seqs whose requests of {} tokens all fit at once: {}\n",
                   r.max_model_len, r.answer);
      }
      break;
    case ServingQuestion::kMaxLoras:
      for (const ServingTrial& t : r.trials) {
        fmt::print("  max_loras {:>6}   {:>8} blocks, {:>8} for one request   {}\n", t.value,
                   t.num_gpu_blocks, t.needed_blocks, t.starts ? "starts" : "refused");
      }
      if (r.answer == 0) {
        fmt::print("answer           no max_loras starts with requests of {} tokens\n", r.max_model_len);
      } else {
        fmt::print("answer           largest max_loras that starts with requests of {} tokens: {}\n",
                   r.max_model_len, r.answer);
      }
      break;
    case ServingQuestion::kGpuMemoryUtilization:
      fmt::print(
          "limit            CUDA context + outside torch {} + utilization x {} <= {:.0f} % of the device; "
          "CUDA graphs outside the budget are not counted (--vllm-cudagraph-memory puts them in it)\n",
          gib2(r.outside_budget_bytes), gib2(r.total_bytes), 100.0 * (1.0 - r.margin));
      if (r.answer_utilization > 0.0) {
        fmt::print(
            "answer           largest gpu_memory_utilization that leaves {:.0f} % free: {:.4f} (one "
            "max_model_len request needs >= {:.4f})\n",
            100.0 * r.margin, r.answer_utilization, r.min_utilization);
      } else {
        fmt::print(
            "answer           none: leaving {:.0f} % free, one max_model_len request ({}) does not fit "
            "(it needs gpu_memory_utilization >= {:.4f})\n",
            100.0 * r.margin, r.max_model_len, r.min_utilization);
      }
      break;
  }
  return 0;
}

int print_serving_tp(const ServingTpPlan& p, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["vary"] = "tp";
    j["max_model_len"] = p.max_model_len;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const ServingTpRow& r : p.rows) {
      rows.push_back({{"tp", r.tp},
                      {"error", r.error},
                      {"model_loading_bytes", r.weights_bytes},
                      {"available_kv_cache_bytes", r.available_bytes},
                      {"gpu_kv_cache_tokens", r.kv_cache_tokens},
                      {"max_concurrency", r.max_concurrency},
                      {"refusal", r.refusal}});
    }
    j["rows"] = rows;
    j["best"] = p.smallest_tp_that_starts;
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print(
      "vLLM V1          one rank at each tensor-parallel size; concurrency for {} tokens per request\n",
      p.max_model_len);
  for (const ServingTpRow& r : p.rows) {
    if (!r.error.empty()) {
      fmt::print("  tp {}   {}\n", r.tp, r.error);
      continue;
    }
    fmt::print(
        "  tp {}   Model loading took {:>10}   Available KV cache memory {:>10}   {:>11} tokens   {:>8.2f}x  "
        " "
        "{}\n",
        r.tp, gib2(r.weights_bytes), gib2(r.available_bytes), r.kv_cache_tokens, r.max_concurrency,
        r.refusal.empty() ? "starts" : "refused");
  }
  if (p.smallest_tp_that_starts == 0) {
    fmt::print("answer           no tensor-parallel size up to 8 starts\n");
  } else {
    fmt::print("answer           the smallest tensor-parallel size that starts: {}\n",
               p.smallest_tp_that_starts);
  }
  return 0;
}

// SGLang's "%.2f GB" (GB = 2^30 B, as its log prints K size)
std::string gb2(std::int64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

int print_sglang_fit(const SglangFitResult& r, bool json) {
  const char* names[] = {"max-model-len", "max-num-seqs", "mem-fraction-static"};
  const char* what = names[static_cast<int>(r.question)];
  const Prediction::Generation::Paged::Sglang& s = r.pool;
  if (json) {
    nlohmann::ordered_json j;
    j["vary"] = what;
    j["serving_engine"] = "sglang";
    j["mem_fraction_static"] = s.mem_fraction_static;
    j["default_mem_fraction_static"] = r.default_fraction;
    j["context_len"] = s.context_len;
    j["max_total_num_tokens"] = r.refusal.empty() ? s.max_total_num_tokens : 0;
    j["max_running_requests"] = s.max_running_requests;
    j["refusal"] = r.refusal;
    if (r.question == SglangQuestion::kMemFractionStatic) {
      j["best"] = r.answer_fraction;
    } else {
      j["best"] = r.answer;
    }
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print("SGLang           mem_fraction_static {}{}, context_len {}: rest_memory {}, ",
             s.mem_fraction_static,
             s.default_fraction ? fmt::format(" (SGLang {}'s default)", s.version) : std::string(),
             s.context_len, gb2(s.rest_bytes));
  if (!r.refusal.empty()) {
    fmt::print("refused: {}\n", r.refusal);
  } else {
    fmt::print("#tokens {}\n", s.max_total_num_tokens);
  }
  switch (r.question) {
    case SglangQuestion::kMaxModelLen:
      if (r.answer > 0) {
        fmt::print(
            "answer           largest context length whose longest request fits the pool whole: {} "
            "(max_req_len = min(context_len - 1, max_total_num_tokens - 1){})\n",
            r.answer, r.max_position_embeddings > 0 ? ", at most max_position_embeddings" : "");
      } else {
        fmt::print("answer           no context length: the pool holds no token\n");
      }
      break;
    case SglangQuestion::kMaxNumSeqs:
      fmt::print(
          "answer           requests of {} tokens the pool holds at once: {} (max_total_num_tokens // "
          "context_len, at most max_running_requests {})\n",
          s.context_len, r.answer, s.max_running_requests);
      break;
    case SglangQuestion::kMemFractionStatic:
      if (r.answer_fraction > 0.0) {
        fmt::print(
            "answer           smallest mem_fraction_static whose pool holds one request of {} tokens: {:.4f} "
            "(SGLang's default here: {}); what a larger fraction leaves for activations and CUDA graphs is "
            "not modelled\n",
            s.context_len, r.answer_fraction, r.default_fraction);
      } else {
        fmt::print("answer           none below 1: the weights leave no room for one request of {} tokens\n",
                   s.context_len);
      }
      break;
  }
  return 0;
}

int print_sglang_tp(const SglangTpPlan& p, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["vary"] = "tp";
    j["serving_engine"] = "sglang";
    j["context_len"] = p.context_len;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const SglangTpRow& r : p.rows) {
      rows.push_back({{"tp", r.tp},
                      {"error", r.error},
                      {"mem_fraction_static", r.mem_fraction_static},
                      {"weights_bytes", r.weights_bytes},
                      {"max_total_num_tokens", r.max_total_num_tokens},
                      {"max_running_requests", r.max_running_requests},
                      {"refusal", r.refusal},
                      {"holds_one_request", r.holds_one_request}});
    }
    j["rows"] = rows;
    j["best"] = p.smallest_tp_that_holds;
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print(
      "SGLang           one rank at each tensor-parallel size, its default mem_fraction_static; context_len "
      "{}\n",
      p.context_len);
  for (const SglangTpRow& r : p.rows) {
    if (!r.error.empty()) {
      fmt::print("  tp {}   {}\n", r.tp, r.error);
      continue;
    }
    fmt::print("  tp {}   mem_fraction_static {:<5}   Load weight end {:>9}   #tokens {:>9}   {}\n", r.tp,
               r.mem_fraction_static, gb2(r.weights_bytes), r.max_total_num_tokens,
               !r.refusal.empty()    ? "refused"
               : r.holds_one_request ? "holds one context_len request"
                                     : "starts; one context_len request does not fit");
  }
  if (p.smallest_tp_that_holds == 0) {
    fmt::print("answer           no tensor-parallel size up to 8 holds one request of {} tokens\n",
               p.context_len);
  } else {
    fmt::print(
        "answer           the smallest tensor-parallel size whose pool holds one request of {} tokens: {}\n",
        p.context_len, p.smallest_tp_that_holds);
  }
  return 0;
}

struct FitArgs {
  RequestArgs request;
  std::string alloc_conf;
  std::string margin = "10%";
  std::string vary = "batch";
  bool json = false;
};

}  // namespace

void add_fit_command(CLI::App& app, std::function<int()>& run) {
  static FitArgs args;
  args = FitArgs{};
  auto* cmd = app.add_subcommand(
      "fit",
      "Find the largest batch (or sequence length) whose predicted peak reserved memory plus the CUDA "
      "context stays within (1 - margin) of the device");
  add_request_options(cmd, args.request, args.alloc_conf);
  cmd->add_option("--batch", args.request.batch, "batch size (the search starts here with --vary batch)")
      ->capture_default_str();
  cmd->add_option("--margin", args.margin, "fraction of the device kept free, e.g. 10% or 0.1")
      ->capture_default_str();
  cmd->add_option(
         "--vary", args.vary,
         "batch|seq, or with --kv-cache paged (vLLM V1): max-model-len|max-num-seqs|"
         "gpu-memory-utilization|tp (and max-loras with --enable-lora); with --serving-engine sglang: "
         "max-model-len|max-num-seqs|"
         "mem-fraction-static|tp")
      ->capture_default_str();
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->callback([&run, cmd] {
    if (cmd->count("--alloc-conf") > 0) {
      args.request.alloc_conf = args.alloc_conf;
    }
    run = [] {
      const double margin = parse_margin(args.margin);
      if (args.request.kv_cache == "paged" && args.request.serving_engine == "sglang") {
        if (args.vary == "tp") {
          return print_sglang_tp(plan_sglang_tensor_parallel(args.request), args.json);
        }
        if (const std::optional<SglangQuestion> q = parse_sglang_question(args.vary)) {
          return print_sglang_fit(fit_sglang_serving(make_request(args.request), *q), args.json);
        }
      }
      if (args.vary == "tp" && args.request.kv_cache == "paged") {
        return print_serving_tp(plan_vllm_tensor_parallel(args.request), args.json);
      }
      if (const std::optional<ServingQuestion> q = parse_serving_question(args.vary)) {
        return print_serving_fit(fit_vllm_serving(make_request(args.request), *q, margin), args.json);
      }
      const FitVary vary = parse_fit_vary(args.vary);
      const PredictRequest request = make_request(args.request);
      const FitResult r = fit(request, vary, margin);
      const char* what = vary == FitVary::kBatch ? "batch" : "seq";
      if (args.json) {
        nlohmann::ordered_json j;
        j["vary"] = what;
        j["data_parallel"] = {{"scheme", request.options.data_parallel.scheme},
                              {"world_size", request.options.data_parallel.world_size}};
        j["tensor_parallel"] = request.tensor_parallel;
        j["pipeline_stages"] = request.options.pipeline.stages;
        j["margin"] = r.margin;
        j["total_bytes"] = r.total_bytes;
        j["cuda_context_bytes"] = r.cuda_context_bytes;
        if (r.nccl_bytes > 0) {
          j["nccl_bytes"] = r.nccl_bytes;
        }
        j["limit_bytes"] = r.limit_bytes;
        if (r.memory_fraction > 0.0) {
          j["per_process_memory_fraction"] = r.memory_fraction;
        }
        j["best"] = r.best;
        if (r.best_is_cap) {
          j["best_is_search_cap"] = true;
          if (!r.cap_reason.empty()) {
            j["cap_reason"] = r.cap_reason;
          }
        }
        nlohmann::ordered_json trials = nlohmann::ordered_json::array();
        for (const FitTrial& t : r.trials) {
          trials.push_back({{what, t.value},
                            {"peak_reserved_bytes", t.peak_reserved_bytes},
                            {"num_ooms", t.num_ooms},
                            {"fits", t.fits}});
        }
        j["trials"] = trials;
        fmt::print("{}\n", json_text(j));
        return 0;
      }
      const DataParallelOptions& dp = request.options.data_parallel;
      const PipelineOptions& pp = request.options.pipeline;
      if (request.tensor_parallel > 1 || dp.scheme != "none" || pp.stages > 1) {
        fmt::print("layout           one rank: tensor-parallel {}, {} over {} data-parallel ranks{}\n",
                   request.tensor_parallel, dp.scheme, dp.world_size,
                   pp.stages == 1 ? std::string()
                   : request.every_pipeline_stage
                       ? fmt::format(", the fullest of {} pipeline stages ({}, {} micro-batches)", pp.stages,
                                     pipeline_schedule_name(pp.schedule), request.options.grad_accumulation)
                       : fmt::format(", pipeline stage {} of {}", pp.stage, pp.stages));
      }
      fmt::print(
          "limit            peak reserved + {} context{} <= {} ({:.0f} % of {}{})\n",
          format_bytes_short(static_cast<Bytes>(r.cuda_context_bytes)),
          r.nccl_bytes > 0 ? fmt::format(" + {} NCCL", format_bytes_short(static_cast<Bytes>(r.nccl_bytes)))
                           : std::string(),
          format_bytes_short(static_cast<Bytes>(r.limit_bytes)),
          100.0 * static_cast<double>(r.limit_bytes) / static_cast<double>(r.total_bytes),
          format_bytes_short(static_cast<Bytes>(r.total_bytes)),
          r.memory_fraction > 0.0 ? fmt::format(", with per_process_memory_fraction {}", r.memory_fraction)
                                  : "");
      for (const FitTrial& t : r.trials) {
        fmt::print("  {} {:>7}   peak reserved {:>12}   {}\n", what, t.value,
                   format_bytes_short(static_cast<Bytes>(t.peak_reserved_bytes)),
                   t.fits ? "fits" : (t.num_ooms > 0 ? "OOM" : "over the margin"));
      }
      if (r.best == 0) {
        fmt::print("answer           nothing fits: {} 1 is over the limit\n", what);
      } else if (r.best_is_cap && !r.cap_reason.empty()) {
        fmt::print("answer           {} {} fits, the longest {} allow\n", what, r.best, r.cap_reason);
      } else if (r.best_is_cap) {
        fmt::print("answer           {} {} fits, the largest fit tries: the largest that fits may be more\n",
                   what, r.best);
      } else {
        fmt::print("answer           largest {} that fits: {}\n", what, r.best);
      }
      return 0;
    };
  });
}

}  // namespace vramsim::cli
