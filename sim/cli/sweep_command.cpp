// `vramsim sweep`: many training steps whose shapes are drawn from a distribution, through each policy:
// reserved memory and fragmentation step by step, when reserved stops growing, and how often a step OOMs.
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/os.h>

#include "sim/alloc/caching_config.h"
#include "sim/cli/commands.h"
#include "sim/cli/prediction_report.h"
#include "sim/compare/dynamic_shapes.h"
#include "sim/compare/html_pages.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/simulate/policy_run.h"
#include "traces/json_input.h"

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
  std::string shard;
};

std::string b(std::int64_t v) { return format_bytes_short(static_cast<Bytes>(v < 0 ? 0 : v)); }

// Everything sweep prints, as data: what one run computes, or what merge puts together from the shards of
// one (all integers, so a shard's JSON carries it exactly and the merged output is the single run's, byte
// for byte).
struct SweepReport {
  std::string model;
  std::uint64_t seed = 1;
  std::string seq;  // the distributions' text
  std::string batch;
  std::string device;  // "unlimited", or the device and what its allocator may use
  std::size_t distinct_shapes = 0;
  std::size_t requests = 0;
  std::int64_t capacity_bytes = 0;
  std::int64_t peak_live_bytes = 0;
  std::vector<StepShape> shapes;         // per step
  std::vector<PolicyRunResult> results;  // per policy, in --policies order
};

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

void write_csv(const std::string& path, const SweepReport& report) {
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    throw InputError(fmt::format("--csv: cannot write '{}'", path));
  }
  out << "policy,step,batch,seq,reserved_bytes,allocated_bytes,peak_reserved_bytes,peak_active_bytes,"
         "fragmentation,ooms\n";
  for (const PolicyRunResult& r : report.results) {
    for (const StepSample& st : r.steps) {
      const StepShape& shape = report.shapes.at(st.step);
      out << fmt::format("{},{},{},{},{},{},{},{},{:.6f},{}\n", r.policy, st.step + 1, shape.batch, shape.seq,
                         st.reserved_bytes, st.allocated_bytes, st.peak_reserved_bytes, st.peak_active_bytes,
                         st.fragmentation(), st.num_ooms);
    }
  }
  if (!out.flush()) {
    throw InputError(fmt::format("--csv: error writing '{}'", path));
  }
}

nlohmann::ordered_json report_json(const SweepReport& r) {
  const std::size_t n = r.shapes.size();
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["steps"] = n;
  j["seed"] = r.seed;
  j["seq"] = r.seq;
  j["batch"] = r.batch;
  j["distinct_shapes"] = r.distinct_shapes;
  j["requests"] = r.requests;
  j["capacity_bytes"] = r.capacity_bytes;
  j["peak_live_bytes"] = r.peak_live_bytes;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const PolicyRunResult& p : r.results) {
    const Summary s = summarize(p);
    rows.push_back({{"policy", p.policy},
                    {"peak_reserved_bytes", p.peaks.peak_reserved_bytes},
                    {"peak_allocated_bytes", p.peaks.peak_allocated_bytes},
                    {"fragmentation", p.peaks.fragmentation()},
                    {"final_reserved_bytes", p.final_reserved_bytes},
                    {"reserved_settles_at_step", s.reserved_settles_at_step},
                    {"steps_with_oom", s.steps_with_oom},
                    {"oom_probability", static_cast<double>(s.steps_with_oom) / static_cast<double>(n)},
                    {"num_ooms", p.num_ooms},
                    {"num_device_alloc", p.num_device_alloc},
                    {"num_device_free", p.num_device_free}});
  }
  j["policies"] = rows;
  return j;
}

// The report as sweep prints it: text, or --json; --csv writes the per-step figures.
int print_report(const SweepReport& r, bool json, const std::string& csv) {
  if (!csv.empty()) {
    write_csv(csv, r);
  }
  if (json) {
    fmt::print("{}\n", json_text(report_json(r)));
    return 0;
  }
  const std::size_t n = r.shapes.size();
  fmt::print("model        {}, batch {}, seq {}, {} steps (seed {}; {} distinct shapes, {} requests)\n",
             r.model, r.batch, r.seq, n, r.seed, r.distinct_shapes, r.requests);
  fmt::print("device       {}\n", r.device);
  fmt::print("peak live    {}  (the most bytes live at once over the run)\n\n", b(r.peak_live_bytes));
  fmt::print("{:<20}{:>13}{:>13}{:>8}{:>16}{:>16}\n", "policy", "peak reserved", "peak alloc", "frag",
             "settles at step", "steps with OOM");
  for (const PolicyRunResult& p : r.results) {
    const Summary s = summarize(p);
    fmt::print("{:<20}{:>13}{:>13}{:>7.1f}%{:>16}{:>9} ({:.0f}%)\n", p.policy, b(p.peaks.peak_reserved_bytes),
               b(p.peaks.peak_allocated_bytes), 100.0 * p.peaks.fragmentation(), s.reserved_settles_at_step,
               s.steps_with_oom, 100.0 * static_cast<double>(s.steps_with_oom) / static_cast<double>(n));
  }
  fmt::print(
      "\nfrag = 1 - peak active / peak reserved over the run; settles at step = the last step that raised "
      "peak reserved\n");
  if (!csv.empty()) {
    fmt::print("per-step figures: {}\n", csv);
  }
  return 0;
}

// --- Shards: `sweep --shard K/N` runs the policies i with i % N == K - 1 (the run itself is drawn and built
// in every shard: the same seed gives the same shapes); `vramsim merge` puts the parts together.

nlohmann::ordered_json result_json(const PolicyRunResult& p, std::size_t index) {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const StepSample& st : p.steps) {
    steps.push_back({st.step, st.reserved_bytes, st.allocated_bytes, st.peak_reserved_bytes,
                     st.peak_active_bytes, st.num_ooms});
  }
  return {{"index", index},
          {"policy", p.policy},
          {"peak_reserved_bytes", p.peaks.peak_reserved_bytes},
          {"peak_allocated_bytes", p.peaks.peak_allocated_bytes},
          {"peak_active_bytes", p.peaks.peak_active_bytes},
          {"final_reserved_bytes", p.final_reserved_bytes},
          {"num_ooms", p.num_ooms},
          {"num_device_alloc", p.num_device_alloc},
          {"num_device_free", p.num_device_free},
          {"steps", steps}};
}

PolicyRunResult result_from(const nlohmann::json& j, std::size_t n_steps) {
  PolicyRunResult p;
  p.policy = j.at("policy");
  // Every size and count a non-negative integer of at most 2^60 (a part is vramsim's own output; anything
  // else was edited or damaged).
  p.peaks.peak_reserved_bytes = json_int(j, "peak_reserved_bytes", 0, kMaxJsonNumber);
  p.peaks.peak_allocated_bytes = json_int(j, "peak_allocated_bytes", 0, kMaxJsonNumber);
  p.peaks.peak_active_bytes = json_int(j, "peak_active_bytes", 0, kMaxJsonNumber);
  p.final_reserved_bytes = json_int(j, "final_reserved_bytes", 0, kMaxJsonNumber);
  p.num_ooms = json_int(j, "num_ooms", 0, kMaxJsonNumber);
  p.num_device_alloc = json_int(j, "num_device_alloc", 0, kMaxJsonNumber);
  p.num_device_free = json_int(j, "num_device_free", 0, kMaxJsonNumber);
  for (const nlohmann::json& st : j.at("steps")) {
    StepSample s;
    s.step = static_cast<std::size_t>(json_int_at(st, 0, 0, kMaxJsonNumber));
    if (s.step >= n_steps) {
      throw InputError(fmt::format("step {} is outside the run's {} steps", s.step + 1, n_steps));
    }
    s.reserved_bytes = json_int_at(st, 1, 0, kMaxJsonNumber);
    s.allocated_bytes = json_int_at(st, 2, 0, kMaxJsonNumber);
    s.peak_reserved_bytes = json_int_at(st, 3, 0, kMaxJsonNumber);
    s.peak_active_bytes = json_int_at(st, 4, 0, kMaxJsonNumber);
    s.num_ooms = json_int_at(st, 5, 0, kMaxJsonNumber);
    p.steps.push_back(s);
  }
  return p;
}

std::string shard_json(const SweepReport& r, int shard, int shards, std::size_t policies,
                       const std::vector<std::size_t>& indices) {
  nlohmann::ordered_json j;
  j["vramsim_sweep_shard"] = 1;
  j["shard"] = shard + 1;
  j["shards"] = shards;
  j["policies"] = policies;
  j["model"] = r.model;
  j["seed"] = r.seed;
  j["seq"] = r.seq;
  j["batch"] = r.batch;
  j["device"] = r.device;
  j["distinct_shapes"] = r.distinct_shapes;
  j["requests"] = r.requests;
  j["capacity_bytes"] = r.capacity_bytes;
  j["peak_live_bytes"] = r.peak_live_bytes;
  nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
  for (const StepShape& s : r.shapes) {
    shapes.push_back({s.batch, s.seq});
  }
  j["shapes"] = shapes;
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < r.results.size(); ++k) {
    results.push_back(result_json(r.results[k], indices[k]));
  }
  j["results"] = results;
  return j.dump(1) + "\n";
}

int run_sweep(SweepArgs& args) {
  if (args.request.steps < 1 || args.request.steps > 100000) {
    throw InputError(fmt::format("--steps: must be in [1, 100000], got {}", args.request.steps));
  }
  int shard = 0;
  int shards = 1;
  if (!args.shard.empty()) {
    std::tie(shard, shards) = parse_shard(args.shard);
    if (!args.html.empty()) {
      throw InputError("--html: draws the whole sweep; give it without --shard");
    }
  }
  const ShapeDistribution seq = ShapeDistribution::parse(args.seq_dist, "--seq");
  const ShapeDistribution batch = ShapeDistribution::parse(args.batch_dist, "--batch");
  const std::vector<const PolicyEntry*> policies = parse_policy_list(args.policies, "--policies");
  RequestArgs base = args.request;
  base.seq = seq.min_value();  // validated per shape again when the graphs are built
  base.batch = batch.min_value();
  const PredictRequest request = make_request(base, /*require_device=*/false);

  SweepReport report;
  report.model = request.model.name;
  report.seed = args.seed;
  report.seq = seq.text();
  report.batch = batch.text();
  const AllocatorDevice target = allocator_device(base);
  PolicyRunOptions options;
  options.capacity_bytes = target.capacity_bytes;
  report.capacity_bytes = static_cast<std::int64_t>(target.capacity_bytes);
  report.device = "unlimited";
  if (!target.gpu_name.empty()) {
    report.device = fmt::format("{} ({} for the allocator)", target.gpu_name,
                                b(static_cast<std::int64_t>(target.capacity_bytes)));
  } else if (!base.capacity.empty()) {
    report.device = b(static_cast<std::int64_t>(target.capacity_bytes));
  }
  CachingConfig versioned;
  versioned.torch_version = request.torch_version;
  options.config =
      request.alloc_conf ? parse_alloc_conf(*request.alloc_conf, "--alloc-conf", versioned) : versioned;

  report.shapes = draw_shapes(batch, seq, static_cast<std::size_t>(args.request.steps), args.seed);
  DynamicRun run = build_dynamic_run(request.model, request.options, report.shapes);
  options.step_ends = run.step_ends;
  report.distinct_shapes = run.distinct_shapes;
  report.requests = run.sequence.ops().size();
  report.peak_live_bytes = static_cast<std::int64_t>(peak_live_bytes(run.sequence));

  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(shards)) == shard) {
      report.results.push_back(run_policy(*policies[i], run.sequence, options));
      indices.push_back(i);
    }
  }
  if (shards > 1) {
    fmt::print("{}", shard_json(report, shard, shards, policies.size(), indices));  // for `vramsim merge`
    return 0;
  }
  if (!args.html.empty()) {
    write_output_file(
        args.html,
        sweep_html(report.results, run, report.peak_live_bytes,
                   fmt::format("vramsim sweep {}, seq {}, batch {}", report.model, report.seq, report.batch)),
        "page");
  }
  return print_report(report, args.json, args.csv);
}

}  // namespace

bool is_sweep_shard(const nlohmann::json& part) {
  return part.is_object() && part.contains("vramsim_sweep_shard");
}

int merge_sweep_shards(const std::vector<nlohmann::json>& parts, const std::vector<std::string>& names,
                       bool json, const std::string& csv) {
  SweepReport report;
  nlohmann::json first;
  std::vector<bool> seen_shard;
  std::vector<std::optional<PolicyRunResult>> results;
  for (std::size_t f = 0; f < parts.size(); ++f) {
    const std::string& name = names.at(f);
    try {
      const nlohmann::json& j = parts[f];
      if (!j.is_object() || !j.contains("vramsim_sweep_shard")) {
        throw InputError(fmt::format("{}: not a `vramsim sweep --shard` output", name));
      }
      const int shards = static_cast<int>(json_int(j, "shards", 1, 100000));
      const int shard = static_cast<int>(json_int(j, "shard", 1, 100000));
      const auto policies = static_cast<std::size_t>(json_int(j, "policies", 0, 1000));
      const std::size_t steps = j.at("shapes").size();
      if (shards < 1 || shards > 100000 || shard < 1 || shard > shards || policies > 1000 || steps > 100000) {
        throw InputError(fmt::format("{}: shard {} of {} is out of range", name, shard, shards));
      }
      // Every field but the shard's own part must be the same in every file.
      nlohmann::json common = j;
      common.erase("shard");
      common.erase("results");
      if (f == 0) {
        first = common;
        report.model = j.at("model");
        report.seed = j.at("seed");
        report.seq = j.at("seq");
        report.batch = j.at("batch");
        report.device = j.at("device");
        report.distinct_shapes = j.at("distinct_shapes");
        report.requests = j.at("requests");
        report.capacity_bytes = json_int(j, "capacity_bytes", 0, kMaxJsonNumber);
        report.peak_live_bytes = json_int(j, "peak_live_bytes", 0, kMaxJsonNumber);
        for (const nlohmann::json& s : j.at("shapes")) {
          report.shapes.push_back(StepShape{s.at(0), s.at(1)});
        }
        seen_shard.assign(static_cast<std::size_t>(shards), false);
        results.assign(policies, std::nullopt);
      } else if (common != first) {
        throw InputError(
            fmt::format("{}: a shard of another sweep (its run differs from {}'s)", name, names[0]));
      }
      if (seen_shard[static_cast<std::size_t>(shard - 1)]) {
        throw InputError(fmt::format("{}: shard {} of {} given twice", name, shard, shards));
      }
      seen_shard[static_cast<std::size_t>(shard - 1)] = true;
      for (const nlohmann::json& e : j.at("results")) {
        const std::size_t i = e.at("index");
        if (i >= results.size() || results[i] ||
            static_cast<int>(i % static_cast<std::size_t>(shards)) != shard - 1) {
          throw InputError(fmt::format("{}: policy {} out of range or in two shards", name, i));
        }
        results[i] = result_from(e, steps);
      }
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    } catch (const JsonValueError& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    }
  }
  for (std::size_t k = 0; k < seen_shard.size(); ++k) {
    if (!seen_shard[k]) {
      throw InputError(fmt::format("merge: shard {} of {} is missing", k + 1, seen_shard.size()));
    }
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i]) {  // a shard that left out one of its policies
      throw InputError(fmt::format("merge: policy {} of {} is in no shard", i + 1, results.size()));
    }
    report.results.push_back(std::move(*results[i]));
  }
  return print_report(report, json, csv);
}

void add_sweep_command(CLI::App& app, std::function<int()>& run) {
  static SweepArgs args;
  args = SweepArgs{};
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
  cmd->add_option(
      "--shard", args.shard,
      "K/N: run only the K-th of N parts of the policies and print it as JSON for `vramsim merge` "
      "(a Slurm job array: --shard $SLURM_ARRAY_TASK_ID/N)");
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
