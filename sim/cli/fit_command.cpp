// `vramsim fit`: the largest batch (or sequence length) that fits on the device with a safety margin.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/core/size_format.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/predict/step_prediction.h"

namespace vramsim::cli {

namespace {

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
  cmd->add_option("--vary", args.vary, "batch|seq")->capture_default_str();
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->callback([&run, cmd] {
    if (cmd->count("--alloc-conf") > 0) {
      args.request.alloc_conf = args.alloc_conf;
    }
    run = [] {
      const double margin = parse_margin(args.margin);
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
        j["limit_bytes"] = r.limit_bytes;
        if (r.memory_fraction > 0.0) {
          j["per_process_memory_fraction"] = r.memory_fraction;
        }
        j["best"] = r.best;
        if (r.best_is_cap) {
          j["best_is_search_cap"] = true;
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
      fmt::print("limit            peak reserved + {} context <= {} ({:.0f} % of {}{})\n",
                 format_bytes_short(static_cast<Bytes>(r.cuda_context_bytes)),
                 format_bytes_short(static_cast<Bytes>(r.limit_bytes)),
                 100.0 * static_cast<double>(r.limit_bytes) / static_cast<double>(r.total_bytes),
                 format_bytes_short(static_cast<Bytes>(r.total_bytes)),
                 r.memory_fraction > 0.0
                     ? fmt::format(", with per_process_memory_fraction {}", r.memory_fraction)
                     : "");
      for (const FitTrial& t : r.trials) {
        fmt::print("  {} {:>7}   peak reserved {:>12}   {}\n", what, t.value,
                   format_bytes_short(static_cast<Bytes>(t.peak_reserved_bytes)),
                   t.fits ? "fits" : (t.num_ooms > 0 ? "OOM" : "over the margin"));
      }
      if (r.best == 0) {
        fmt::print("answer           nothing fits: {} 1 is over the limit\n", what);
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
