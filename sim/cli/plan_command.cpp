// `vramsim plan`: the configuration to run a model with on some GPUs (sim/plan/plan.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/core/size_format.h"
#include "sim/engine/gpu_table.h"
#include "sim/plan/plan.h"
#include "traces/json_input.h"

namespace vramsim::cli {

namespace {

struct PlanArgs {
  PlanRequest request;
  std::string margin = "10%";
  std::string allow;
  bool json = false;
  std::string csv;
  std::string shard;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      out.push_back(item);
    }
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  return out;
}

nlohmann::ordered_json evaluation_json(const PlanRequest& r, const PlanEvaluation& e) {
  nlohmann::ordered_json j;
  j["configuration"] = describe(e.config);
  j["command"] = predict_command(r, e.config);
  j["fits"] = e.fits;
  j["peak_reserved_bytes"] = e.peak_reserved_bytes;
  j["needed_bytes"] = e.needed_bytes;
  j["headroom_bytes"] = e.headroom_bytes;
  j["tokens_per_s"] = e.tokens_per_s;
  if (e.tied_with_best) {
    j["tied_with_best"] = true;  // within the time model's error of the best one's step time
  }
  if (!e.error.empty()) {
    j["error"] = e.error;
  }
  if (e.probe_micro_batches > 0) {
    j["probe_micro_batches"] = e.probe_micro_batches;  // the figures are a lower bound (a probe)
  }
  return j;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30));
}

std::string outcome(const PlanEvaluation& e, std::int64_t limit) {
  if (!e.error.empty()) {
    return "refused: " + e.error;
  }
  if (e.fits) {
    return fmt::format("{:>10}  fits, {:.0f} tokens/s", gib(e.needed_bytes), e.tokens_per_s);
  }
  if (e.probe_micro_batches > 0) {  // a lower bound: the first micro-batches alone did not fit
    return fmt::format("{:>10}  over by at least {} (a probe of {} micro-batches)", gib(e.needed_bytes),
                       gib(e.needed_bytes - limit), e.probe_micro_batches);
  }
  return fmt::format("{:>10}  over by {}", gib(e.needed_bytes), gib(e.needed_bytes - limit));
}

void write_csv(const std::string& path, const PlanRequest& r, const PlanResult& p) {
  std::ofstream f(path);
  if (!f) {
    throw InputError(fmt::format("{}: cannot write the CSV file", path));
  }
  f << "precision,micro_batch,grad_accumulation,checkpointing,zero,fsdp,tp,pp,ep,cp,optimizer,adapters,"
       "offload,"
       "compile,float8,float8_all_gather,evaluated,skipped,probe_micro_batches,fits,model_states_bytes,peak_"
       "reserved_bytes,"
       "needed_bytes,headroom_bytes,tokens_per_s,tied_with_best,command\n";
  for (const PlanEvaluation& e : p.grid) {
    const PlanConfig& c = e.config;
    f << fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1f},{},\"{}\"\n",
        c.precision, c.micro_batch, c.grad_accumulation, c.checkpointing, c.zero, c.fsdp, c.tp, c.pp, c.ep,
        c.cp, c.optimizer, c.adapters, c.offload, c.compile ? 1 : 0, c.float8, c.float8_all_gather ? 1 : 0,
        e.evaluated ? 1 : 0, e.skipped, e.probe_micro_batches, e.fits ? 1 : 0, e.model_states_bytes,
        e.peak_reserved_bytes, e.needed_bytes, e.headroom_bytes, e.tokens_per_s, e.tied_with_best ? 1 : 0,
        predict_command(r, c));
  }
}

// How sure the ranking is: the configurations whose estimated step time is within the time model's error of
// the best one's (time_model_error.h), the closest first.
void print_ties(const PlanResult& p) {
  const double best = p.grid[*p.best].tokens_per_s;
  if (p.tied.empty()) {
    fmt::print(
        "                 no other configuration within the time model's error (+{:.0f} % step time)\n",
        100.0 * p.time_model_error);
    return;
  }
  fmt::print(
      "                 tied within the time model's error (+{:.0f} % step time) with {} more: the "
      "model cannot rank these\n",
      100.0 * p.time_model_error, p.tied.size());
  std::vector<std::size_t> order = p.tied;
  std::stable_sort(order.begin(), order.end(), [&p](std::size_t a, std::size_t b) {
    return p.grid[a].tokens_per_s > p.grid[b].tokens_per_s;
  });
  constexpr std::size_t kShown = 5;
  for (std::size_t k = 0; k < std::min(order.size(), kShown); ++k) {
    const PlanEvaluation& e = p.grid[order[k]];
    fmt::print("                   {:>8.0f} tokens/s (step time +{:.1f} %)  {}\n", e.tokens_per_s,
               100.0 * (best / e.tokens_per_s - 1.0), describe(e.config));
  }
  if (order.size() > kShown) {
    fmt::print("                   ... {} more (--json or --csv lists them)\n", order.size() - kShown);
  }
}

std::string shard_spec_error(const std::string& text) {
  return fmt::format("--shard: '{}' is not K/N (1 <= K <= N)", text);
}

}  // namespace

std::pair<int, int> parse_shard(const std::string& text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) {
    throw InputError(shard_spec_error(text));
  }
  try {
    std::size_t used_k = 0;
    std::size_t used_n = 0;
    const int k = std::stoi(text.substr(0, slash), &used_k);
    const int n = std::stoi(text.substr(slash + 1), &used_n);
    if (used_k != slash || used_n != text.size() - slash - 1 || n < 1 || k < 1 || k > n) {
      throw InputError(shard_spec_error(text));
    }
    return {k - 1, n};
  } catch (const std::logic_error&) {
    throw InputError(shard_spec_error(text));
  }
}

namespace {

int run_plan(PlanArgs& args) {
  PlanRequest& r = args.request;
  r.margin = parse_margin(args.margin);
  r.allow = split_commas(args.allow);
  if (!args.shard.empty()) {
    std::tie(r.shard, r.shards) = parse_shard(args.shard);
  }
  // every configuration is printed only in a CSV file or a shard's part: otherwise the plan keeps what the
  // report prints (Note [Streaming the grid], sim/plan/plan_stream.h)
  r.keep_grid = !args.csv.empty() || r.shards > 1;
  // A progress bar on a terminal only (never in a pipe or a file), redrawn at most every 100 ms and at the
  // end.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  auto drawn = start - std::chrono::seconds(1);
  bool finished = false;  // threads report in any order: nothing after the last line
  const PlanResult p = plan(r, [tty, start, &drawn, &finished](int done, int total) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty || finished || (done != total && now - drawn < std::chrono::milliseconds(100))) {
      return;
    }
    drawn = now;
    finished = done == total;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "\r%s\x1b[K%s", plan_progress_line(done, total, elapsed).c_str(),
                 done == total ? "\n" : "");
  });
  if (std::find(r.allow.begin(), r.allow.end(), "float8") != r.allow.end() && !float8_supported(r)) {
    // torchtitan's Float8Converter on such a GPU: logger.warning, then the model trains without float8
    const GpuSpec& g = find_gpu(r.gpu);
    fmt::print(
        stderr,
        "plan: --allow float8 adds nothing on {} (compute capability {}.{}): float8 training needs FP8 "
        "tensor cores (8.9 or later, or ROCm MI300+)\n",
        g.name, g.compute_capability / 10, g.compute_capability % 10);
  }
  if (r.shards > 1) {
    fmt::print("{}", plan_shard_json(r, p));  // for `vramsim merge`
    return 0;
  }
  return print_plan(r, p, args.json, args.csv);
}

}  // namespace

int print_plan(const PlanRequest& r, const PlanResult& p, bool json, const std::string& csv) {
  if (!csv.empty()) {
    write_csv(csv, r, p);
  }
  if (json) {
    nlohmann::ordered_json j;
    j["model"] = r.model;
    j["gpu"] = r.gpu;
    j["gpus"] = r.gpus;
    j["global_batch"] = r.global_batch;
    j["seq"] = r.seq;
    j["margin"] = r.margin;
    j["limit_bytes"] = p.limit_bytes;
    j["best"] = p.best ? evaluation_json(r, p.grid[*p.best]) : nlohmann::ordered_json();
    nlohmann::ordered_json path = nlohmann::ordered_json::array();
    for (const PlanStep& s : p.decision_path) {
      nlohmann::ordered_json e = evaluation_json(r, s.result);
      e["lever"] = s.lever;
      e["setting"] = s.setting;
      path.push_back(e);
    }
    j["decision_path"] = path;
    nlohmann::ordered_json pareto = nlohmann::ordered_json::array();
    for (std::size_t i : p.pareto) {
      pareto.push_back(evaluation_json(r, p.grid[i]));
    }
    j["pareto"] = pareto;
    j["time_model_error"] = p.time_model_error;
    nlohmann::ordered_json tied = nlohmann::ordered_json::array();
    for (std::size_t i : p.tied) {
      tied.push_back(evaluation_json(r, p.grid[i]));
    }
    j["tied_with_best"] = tied;
    j["configurations_evaluated"] = p.configurations_evaluated;
    j["configurations_pruned"] = p.configurations_pruned;
    j["pruned_model_states"] = p.pruned_model_states;
    j["pruned_micro_batch"] = p.pruned_micro_batch;
    j["pruned_layout"] = p.pruned_layout;
    j["pruned_throughput"] = p.pruned_throughput;
    j["errors"] = p.errors;
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print("plan             {} on {} x {}, global batch {} x seq {}; limit {} ({:.0f} % of {})\n", r.model,
             r.gpus, r.gpu, r.global_batch, r.seq, gib(p.limit_bytes), 100.0 * (1.0 - r.margin),
             gib(p.total_bytes));
  fmt::print(
      "configurations   {} predicted, {} refused; {} skipped: {} with model states alone over the limit, "
      "{} after a smaller micro-batch did not fit, {} after a smaller parallel layout fit, {} slower than "
      "one "
      "that fits\n\n",
      p.configurations_evaluated, p.errors, p.configurations_pruned, p.pruned_model_states,
      p.pruned_micro_batch, p.pruned_layout, p.pruned_throughput);
  fmt::print("decision path (the levers in order of their cost in speed)\n");
  for (std::size_t k = 0; k < p.decision_path.size(); ++k) {
    const PlanStep& s = p.decision_path[k];
    fmt::print("  {:>2}. {:<30} {:<42} {}\n", k + 1, s.lever, s.setting, outcome(s.result, p.limit_bytes));
  }
  if (!p.best) {
    fmt::print("\nbest             none fits: no configuration the allowed levers make fits in {}\n",
               gib(p.limit_bytes));
    return 0;
  }
  const PlanEvaluation& b = p.grid[*p.best];
  fmt::print("\nbest             {}\n", describe(b.config));
  fmt::print("                 {} needed, headroom {}, {:.0f} tokens/s (estimate)\n", gib(b.needed_bytes),
             gib(b.headroom_bytes), b.tokens_per_s);
  print_ties(p);
  fmt::print("command          {}\n", predict_command(r, b.config));
  fmt::print("Hugging Face     {}\n", trainer_settings(r, b.config));
  fmt::print(
      "\npareto (the predicted configurations that fit: less memory, or faster than every one with less)\n");
  for (std::size_t i : p.pareto) {
    const PlanEvaluation& e = p.grid[i];
    fmt::print("  {:>10}  {:>8.0f} tokens/s  {}{}\n", gib(e.needed_bytes), e.tokens_per_s, describe(e.config),
               e.tied_with_best ? "  (tied with the best)" : "");
  }
  return 0;
}

void add_plan_command(CLI::App& app, std::function<int()>& run) {
  static PlanArgs args;
  args = PlanArgs{};
  auto* cmd =
      app.add_subcommand("plan",
                         "Find the fastest configuration that fits: try the memory levers in order of "
                         "their cost in speed, predict every combination, report the decision path");
  PlanRequest& r = args.request;
  cmd->add_option("--model", r.model, "model preset or a Hugging Face config.json")->required();
  cmd->add_option("--model-code", r.model_code, "whose layer code to follow (as predict's)");
  cmd->add_option("--gpu", r.gpu, "GPU name (memory, CUDA context and the roofline)")->required();
  cmd->add_option("--gpus", r.gpus, "GPUs in all (data-parallel x tensor-parallel x pipeline)")
      ->capture_default_str();
  cmd->add_option("--gpus-per-node", r.gpus_per_node, "GPUs per node: the largest tensor-parallel degree")
      ->capture_default_str();
  cmd->add_option("--global-batch", r.global_batch, "sequences per optimizer step over all GPUs")->required();
  cmd->add_option("--seq", r.seq, "sequence length")->required();
  cmd->add_option("--attention", r.attention, "as predict's (default: the code's)");
  cmd->add_option("--allow", args.allow,
                  "more levers: lora,qlora,offload,compile,cp,float8 (comma-separated)");
  cmd->add_option("--margin", args.margin, "fraction of the GPU kept free, e.g. 10%")->capture_default_str();
  cmd->add_option("--threads", r.threads, "threads predicting configurations (0: every core)")
      ->capture_default_str();
  cmd->add_flag("--exhaustive", r.exhaustive,
                "predict every configuration, no bound on memory or speed (slow; the reference the bounded "
                "search is checked against)");
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->add_option("--csv", args.csv, "write every configuration to this CSV file");
  cmd->add_option(
      "--shard", args.shard,
      "K/N: predict only the K-th of N parts of the grid and print it as JSON for `vramsim merge` "
      "(a Slurm job array: --shard $SLURM_ARRAY_TASK_ID/N)");
  cmd->callback([&run] { run = [] { return run_plan(args); }; });
}

}  // namespace vramsim::cli

namespace vramsim::cli {

void add_merge_command(CLI::App& app, std::function<int()>& run) {
  static std::vector<std::string> files;
  static bool json = false;
  static std::string csv;
  files.clear();
  json = false;
  csv.clear();
  auto* cmd =
      app.add_subcommand("merge",
                         "Merge the parts of a `vramsim plan --shard K/N` or `vramsim sweep --shard K/N` run "
                         "into its result (the output of the same command on one machine, byte for byte)");
  cmd->add_option("files", files, "the shards' JSON files, in any order")->required();
  cmd->add_flag("--json", json, "machine-readable output");
  cmd->add_option("--csv", csv, "write every configuration to this CSV file");
  cmd->callback([&run] {
    run = [] {
      // Every part read and parsed within bounds, and every value checked (no control characters, no
      // number past 2^60) before any is interpreted.
      std::vector<nlohmann::json> parts;
      for (const std::string& f : files) {
        parts.push_back(
            parse_json_input(read_input_file(f, "merge part", kMaxSmallInputBytes), f, kMaxSmallJsonMemory));
        check_json_values(parts.back(), f);
      }
      if (is_sweep_shard(parts.front())) {
        return merge_sweep_shards(parts, files, json, csv);
      }
      PlanRequest request;
      const PlanResult p = merge_plan_shards(parts, files, request);
      return print_plan(request, p, json, csv);
    };
  });
}

}  // namespace vramsim::cli
