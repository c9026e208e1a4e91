// `vramsim sweep`: many training steps whose shapes are drawn from a distribution, through each policy:
// reserved memory and fragmentation step by step, when reserved stops growing, and how often a step OOMs.
#include <nlohmann/json.hpp>

#include <fstream>

#include <fmt/format.h>
#include <fmt/os.h>

#include "sim/alloc/caching_config.h"
#include "sim/cli/commands.h"
#include "sim/cli/prediction_report.h"
#include "sim/compare/dynamic_shapes.h"
#include "sim/compare/html_pages.h"
#include "sim/replay/policy_run.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"

namespace vramsim::cli {
namespace {

struct SweepArgs {
  RequestArgs request;
  std::string alloc_conf;
  std::string seq_dist;
  std::string batch_dist = "1";
  std::uint64_t seed = 1;
  std::string policies = "pytorch,pytorch-expandable";
  std::string csv;
  bool json = false;
  std::string html;
};

std::string b(std::int64_t v) { return format_bytes_short(static_cast<Bytes>(v < 0 ? 0 : v)); }

// Per policy: the step after which peak reserved never grows again (1-based), and how many steps OOMed.
struct Summary {
  std::size_t reserved_settles_at_step = 0;
  std::size_t steps_with_oom = 0;
};
Summary summarize(const PolicyRunResult& r) {
  Summary s;
  std::int64_t peak = -1;
  for (const StepSample& st : r.steps) {
    if (st.peak_reserved_bytes > peak) {
      peak = st.peak_reserved_bytes;
      s.reserved_settles_at_step = st.step + 1;
    }
    s.steps_with_oom += st.num_ooms > 0 ? 1 : 0;
  }
  return s;
}

void write_csv(const std::string& path, const DynamicRun& run, const std::vector<PolicyRunResult>& results) {
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    throw InputError(fmt::format("--csv: cannot write '{}'", path));
  }
  out << "policy,step,batch,seq,reserved_bytes,allocated_bytes,peak_reserved_bytes,peak_active_bytes,"
         "fragmentation,ooms\n";
  for (const PolicyRunResult& r : results) {
    for (const StepSample& st : r.steps) {
      const StepShape& shape = run.shapes[st.step];
      out << fmt::format("{},{},{},{},{},{},{},{},{:.6f},{}\n", r.policy, st.step + 1, shape.batch, shape.seq,
                         st.reserved_bytes, st.allocated_bytes, st.peak_reserved_bytes, st.peak_active_bytes,
                         st.fragmentation(), st.num_ooms);
    }
  }
  if (!out.flush()) {
    throw InputError(fmt::format("--csv: error writing '{}'", path));
  }
}

int run_sweep(SweepArgs& args) {
  if (args.request.steps < 1 || args.request.steps > 100000) {
    throw InputError(fmt::format("--steps: must be in [1, 100000], got {}", args.request.steps));
  }
  const ShapeDistribution seq = ShapeDistribution::parse(args.seq_dist, "--seq");
  const ShapeDistribution batch = ShapeDistribution::parse(args.batch_dist, "--batch");
  const std::vector<const PolicyEntry*> policies = parse_policy_list(args.policies, "--policies");
  RequestArgs base = args.request;
  base.seq = seq.min_value();  // validated per shape again when the graphs are built
  base.batch = batch.min_value();
  const PredictRequest request = make_request(base, /*require_device=*/false);

  const AllocatorDevice target = allocator_device(base);
  PolicyRunOptions options;
  options.capacity_bytes = target.capacity_bytes;
  std::string device = "unlimited";
  if (!target.gpu_name.empty()) {
    device = fmt::format("{} ({} for the allocator)", target.gpu_name,
                         b(static_cast<std::int64_t>(target.capacity_bytes)));
  } else if (!base.capacity.empty()) {
    device = b(static_cast<std::int64_t>(target.capacity_bytes));
  }
  options.config =
      request.alloc_conf ? parse_alloc_conf(*request.alloc_conf, "--alloc-conf") : CachingConfig{};

  const std::vector<StepShape> shapes =
      draw_shapes(batch, seq, static_cast<std::size_t>(args.request.steps), args.seed);
  DynamicRun run = build_dynamic_run(request.model, request.options, shapes);
  options.step_ends = run.step_ends;
  const Bytes live = peak_live_bytes(run.sequence);

  std::vector<PolicyRunResult> results;
  for (const PolicyEntry* p : policies) {
    results.push_back(run_policy(*p, run.sequence, options));
  }
  if (!args.csv.empty()) {
    write_csv(args.csv, run, results);
  }
  if (!args.html.empty()) {
    write_output_file(args.html,
                      sweep_html(results, run, static_cast<std::int64_t>(live),
                                 fmt::format("vramsim sweep {}, seq {}, batch {}", request.model.name,
                                             seq.text(), batch.text())),
                      "page");
  }

  const std::size_t n = shapes.size();
  if (args.json) {
    nlohmann::ordered_json j;
    j["model"] = request.model.name;
    j["steps"] = n;
    j["seed"] = args.seed;
    j["seq"] = seq.text();
    j["batch"] = batch.text();
    j["distinct_shapes"] = run.distinct_shapes;
    j["requests"] = run.sequence.ops().size();
    j["capacity_bytes"] = options.capacity_bytes;
    j["peak_live_bytes"] = live;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const PolicyRunResult& r : results) {
      const Summary s = summarize(r);
      rows.push_back({{"policy", r.policy},
                      {"peak_reserved_bytes", r.peaks.peak_reserved_bytes},
                      {"peak_allocated_bytes", r.peaks.peak_allocated_bytes},
                      {"fragmentation", r.peaks.fragmentation()},
                      {"final_reserved_bytes", r.final_reserved_bytes},
                      {"reserved_settles_at_step", s.reserved_settles_at_step},
                      {"steps_with_oom", s.steps_with_oom},
                      {"oom_probability", static_cast<double>(s.steps_with_oom) / static_cast<double>(n)},
                      {"num_ooms", r.num_ooms},
                      {"num_device_alloc", r.num_device_alloc},
                      {"num_device_free", r.num_device_free}});
    }
    j["policies"] = rows;
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print("model        {}, batch {}, seq {}, {} steps (seed {}; {} distinct shapes, {} requests)\n",
             request.model.name, batch.text(), seq.text(), n, args.seed, run.distinct_shapes,
             run.sequence.ops().size());
  fmt::print("device       {}\n", device);
  fmt::print("peak live    {}  (the most bytes live at once over the run)\n\n",
             b(static_cast<std::int64_t>(live)));
  fmt::print("{:<20}{:>13}{:>13}{:>8}{:>16}{:>16}\n", "policy", "peak reserved", "peak alloc", "frag",
             "settles at step", "steps with OOM");
  for (const PolicyRunResult& r : results) {
    const Summary s = summarize(r);
    fmt::print("{:<20}{:>13}{:>13}{:>7.1f}%{:>16}{:>9} ({:.0f}%)\n", r.policy, b(r.peaks.peak_reserved_bytes),
               b(r.peaks.peak_allocated_bytes), 100.0 * r.peaks.fragmentation(), s.reserved_settles_at_step,
               s.steps_with_oom, 100.0 * static_cast<double>(s.steps_with_oom) / static_cast<double>(n));
  }
  fmt::print(
      "\nfrag = 1 - peak active / peak reserved over the run; settles at step = the last step that raised "
      "peak reserved\n");
  if (!args.csv.empty()) {
    fmt::print("per-step figures: {}\n", args.csv);
  }
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, std::function<int()>& run) {
  static SweepArgs args;
  auto* cmd = app.add_subcommand(
      "sweep",
      "Run many training steps with sequence lengths (and batch sizes) drawn from a distribution through "
      "allocator policies: reserved memory and fragmentation per step, and how often a step runs out of "
      "memory");
  add_request_options(cmd, args.request, args.alloc_conf);
  cmd->remove_option(cmd->get_option("--seq"));
  cmd->add_option("--seq", args.seq_dist, "sequence lengths: N, list:A,B,..., uniform:LO..HI or hist:FILE")
      ->required();
  cmd->add_option("--batch", args.batch_dist, "batch sizes, same syntax as --seq")->capture_default_str();
  cmd->add_option("--seed", args.seed, "seed of the draws")->capture_default_str();
  cmd->add_option("--policies", args.policies, "comma-separated policy names, or all")->capture_default_str();
  cmd->add_option("--csv", args.csv, "write per-step figures (one row per policy and step) to this file");
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->add_option(
      "--html", args.html,
      "write a self-contained page: the shapes drawn, reserved memory and fragmentation per step and "
      "policy");
  args.request.steps = 20;
  cmd->get_option("--steps")->default_val(20);
  cmd->callback([&run, cmd] {
    if (cmd->count("--alloc-conf") > 0) {
      args.request.alloc_conf = args.alloc_conf;
    }
    run = [] { return run_sweep(args); };
  });
}

}  // namespace vramsim::cli
