// `vramsim compare`: every allocator policy on the same requests (a recorded snapshot or a generated step),
// one row each, measured the same way (sim/simulate/policy_run.h). On a recording that starts mid-run, every
// policy first gets the blocks live at trace start (sim/replay/request_sequence_from_trace.h:
// trace_requests). Several files (or a folder) are the ranks of one job: every policy runs on every rank,
// and the table gives each policy's largest peak over the ranks (the rank every job must fit).
#include <filesystem>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/alloc/caching_config.h"
#include "sim/cli/commands.h"
#include "sim/cli/prediction_report.h"
#include "sim/cli/rank_files.h"
#include "sim/compare/dynamic_shapes.h"
#include "sim/compare/html_pages.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/predict/gpu_memory.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/replay/trace_replay.h"
#include "sim/simulate/policy_run.h"
#include "traces/trace_io.h"

namespace vramsim::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> files;  // as given: one file, several (the ranks of a job) or a folder
  std::string file;                // the one compared
  RequestArgs request;
  std::string alloc_conf;
  std::string policies;
  bool json = false;
  bool list = false;
  std::string html;
};

std::optional<TorchVersion> compare_torch_version(const CompareArgs& args) {
  if (args.request.torch_version.empty()) {
    return std::nullopt;
  }
  return parse_torch_version(args.request.torch_version, "--torch-version");
}

std::string b(std::int64_t v) { return format_bytes_short(static_cast<Bytes>(v < 0 ? 0 : v)); }

// "unlimited", "4.00 GiB", or "H100-80GB (78.72 GiB for the allocator after a 500.00 MiB CUDA context)".
std::string device_label(const AllocatorDevice& d) {
  if (!d.gpu_name.empty()) {
    return fmt::format("{} ({} for the allocator after a {} CUDA context)", d.gpu_name,
                       b(static_cast<std::int64_t>(d.capacity_bytes)), b(d.context_bytes));
  }
  return d.capacity_bytes == AllocatorDevice{}.capacity_bytes
             ? "unlimited"
             : b(static_cast<std::int64_t>(d.capacity_bytes));
}

nlohmann::ordered_json row_json(const PolicyRunResult& r) {
  return {{"policy", r.policy},
          {"peak_reserved_bytes", r.peaks.peak_reserved_bytes},
          {"peak_allocated_bytes", r.peaks.peak_allocated_bytes},
          {"peak_active_bytes", r.peaks.peak_active_bytes},
          {"peak_requested_bytes", r.peaks.peak_requested_bytes},
          {"fragmentation", r.peaks.fragmentation()},
          {"inactive_split_bytes_at_reserved_peak", r.peaks.inactive_split_bytes_at_reserved_peak},
          {"free_bytes_at_allocated_peak", r.free_bytes_at_allocated_peak},
          {"largest_free_block_at_allocated_peak", r.largest_free_block_at_allocated_peak},
          {"num_device_alloc", r.num_device_alloc},
          {"num_device_free", r.num_device_free},
          {"num_ooms", r.num_ooms}};
}

struct StartStateLine {
  std::string text;
  nlohmann::ordered_json json;
};

// What each policy starts from: said in the output, since a recording that starts mid-run is only half
// the story without it.
StartStateLine start_state(const TraceRequests* rec, bool generated) {
  StartStateLine out;
  if (rec == nullptr || rec->initial.starts_empty()) {
    out.text = generated ? "empty: a generated step starts from an empty allocator"
                         : "empty: the trace starts from an empty allocator";
    out.json = {{"empty", true}, {"live_blocks", 0}, {"live_requested_bytes", 0}, {"reserved_bytes", 0}};
    return out;
  }
  const char* kOrder = "address order (segments by address, blocks by address within each)";
  const char* kNative =
      "pytorch and pytorch-expandable adopt the recorded segments instead, cached free blocks included";
  out.text = fmt::format(
      "{} blocks ({}) live at trace start, {} reserved in {} segments (rebuilt as `vramsim replay` does)\n"
      "             every policy allocates them first, in {}, then runs the trace;\n"
      "             {}, as `vramsim replay` does",
      rec->start_blocks, b(static_cast<std::int64_t>(rec->start_requested_bytes)),
      b(static_cast<std::int64_t>(rec->initial.reserved_bytes)), rec->initial.segments.size(), kOrder,
      kNative);
  out.json = {{"empty", false},
              {"live_blocks", rec->start_blocks},
              {"live_requested_bytes", rec->start_requested_bytes},
              {"segments", rec->initial.segments.size()},
              {"reserved_bytes", rec->initial.reserved_bytes},
              {"order", kOrder},
              {"native_policies", kNative}};
  return out;
}

int list_policies() {
  for (const PolicyEntry& p : policy_registry()) {
    fmt::print("{:<20} {}\n", p.name, p.summary);
  }
  return 0;
}

// One rank's recording: the requests every policy runs, with its own allocator settings for the native
// policies (as `vramsim replay` reads them).
struct RankRun {
  std::string file;
  std::vector<PolicyRunResult> results;  // in the policies' order
};

RankRun run_rank(const std::string& file, const std::vector<const PolicyEntry*>& policies,
                 const CompareArgs& args, Bytes capacity_bytes) {
  const Snapshot snapshot = load_snapshot(file);
  PolicyRunOptions options;
  options.capacity_bytes = capacity_bytes;
  ReplayOptions ro;
  ro.alloc_conf = args.request.alloc_conf;
  ro.torch_version = compare_torch_version(args);
  std::string origin;
  options.config = resolve_config(snapshot, ro, origin);
  const TraceRequests recording = trace_requests(snapshot, -1, options.config);
  options.recording = &recording;
  RankRun out{file, {}};
  for (const PolicyEntry* p : policies) {
    out.results.push_back(run_policy(*p, recording.sequence, options));
  }
  return out;
}

// compare RANK0 RANK1 ... | FOLDER: each policy's largest peak reserved and allocated over the ranks, the
// rank it was on, and the OOMs of all ranks. A policy over a work bound on any rank is an error here (name
// fewer policies with --policies).
int compare_ranks(const CompareArgs& args, const std::vector<std::string>& files) {
  if (!args.html.empty()) {
    throw InputError("--html: one file only (compare the rank's file alone)");
  }
  const std::vector<const PolicyEntry*> policies = parse_policy_list(args.policies, "--policies");
  const AllocatorDevice device = allocator_device(args.request);
  std::vector<RankRun> ranks;
  for (const std::string& f : files) {
    ranks.push_back(run_rank(f, policies, args, device.capacity_bytes));
  }
  struct Max {
    std::int64_t reserved = -1, allocated = -1;
    std::size_t reserved_rank = 0, allocated_rank = 0;
    std::size_t ooms = 0;
  };
  std::vector<Max> max(policies.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (std::size_t p = 0; p < policies.size(); ++p) {
      const PolicyRunResult& x = ranks[r].results[p];
      if (x.peaks.peak_reserved_bytes > max[p].reserved) {
        max[p].reserved = x.peaks.peak_reserved_bytes;
        max[p].reserved_rank = r;
      }
      if (x.peaks.peak_allocated_bytes > max[p].allocated) {
        max[p].allocated = x.peaks.peak_allocated_bytes;
        max[p].allocated_rank = r;
      }
      max[p].ooms += x.num_ooms;
    }
  }
  if (args.json) {
    nlohmann::ordered_json j;
    j["capacity_bytes"] = device.capacity_bytes;
    j["ranks"] = nlohmann::ordered_json::array();
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const PolicyRunResult& x : ranks[r].results) {
        rows.push_back(row_json(x));
      }
      j["ranks"].push_back({{"rank", r}, {"file", ranks[r].file}, {"policies", rows}});
    }
    j["max"] = nlohmann::ordered_json::array();
    for (std::size_t p = 0; p < policies.size(); ++p) {
      j["max"].push_back({{"policy", policies[p]->name},
                          {"peak_reserved_bytes", max[p].reserved},
                          {"peak_reserved_rank", max[p].reserved_rank},
                          {"peak_allocated_bytes", max[p].allocated},
                          {"peak_allocated_rank", max[p].allocated_rank},
                          {"num_ooms", max[p].ooms}});
    }
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print("ranks        {}: ", ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    fmt::print("{}{} {}", r == 0 ? "" : ", ", r, ranks[r].file);
  }
  fmt::print("\ndevice       {}\n\n", device_label(device));
  fmt::print("{:<20}{:>16}{:>6}{:>18}{:>6}{:>6}\n", "policy", "reserved (max)", "rank", "allocated (max)",
             "rank", "OOMs");
  for (std::size_t p = 0; p < policies.size(); ++p) {
    fmt::print("{:<20}{:>16}{:>6}{:>18}{:>6}{:>6}\n", policies[p]->name, b(max[p].reserved),
               max[p].reserved_rank, b(max[p].allocated), max[p].allocated_rank, max[p].ooms);
  }
  fmt::print(
      "\nthe largest peak of each policy over the {} ranks, and the rank it is on; OOMs of all ranks\n",
      ranks.size());
  return 0;
}

int run_compare(CompareArgs& args) {
  if (args.list) {
    return list_policies();
  }
  if (!args.files.empty()) {
    const std::vector<std::string> files = rank_files(args.files);
    std::error_code ec;
    if (files.size() > 1 || std::filesystem::is_directory(args.files.front(), ec)) {
      if (!args.request.model.empty()) {
        throw InputError("compare: give trace files or --model (not both)");
      }
      return compare_ranks(args, files);
    }
    args.file = files.front();
  }
  if (args.file.empty() == args.request.model.empty()) {
    throw InputError("compare: give a trace FILE or --model (not both)");
  }
  const std::vector<const PolicyEntry*> policies = parse_policy_list(args.policies, "--policies");
  const AllocatorDevice device = allocator_device(args.request);

  PolicyRunOptions options;
  options.capacity_bytes = device.capacity_bytes;
  std::string source;
  RequestSequence generated;
  TraceRequests recording;
  const RequestSequence* seq = &generated;
  if (!args.file.empty()) {
    const Snapshot snapshot = load_snapshot(args.file);
    // A recording's own allocator settings apply to the native policies, as in `vramsim replay`.
    ReplayOptions ro;
    ro.alloc_conf = args.request.alloc_conf;
    ro.torch_version = compare_torch_version(args);
    std::string origin;
    options.config = resolve_config(snapshot, ro, origin);
    recording = trace_requests(snapshot, -1, options.config);
    options.recording = &recording;
    seq = &recording.sequence;
    source = args.file;
  } else {
    if (args.request.seq <= 0) {
      throw InputError("--seq: a positive sequence length is required with --model");
    }
    const PredictRequest request = make_request(args.request, /*require_device=*/false);
    CachingConfig base;
    base.torch_version = request.torch_version;
    options.config = request.alloc_conf ? parse_alloc_conf(*request.alloc_conf, "--alloc-conf", base) : base;
    DynamicRun run = fixed_shape_run(request.model, request.options);
    generated = std::move(run.sequence);
    options.step_ends = std::move(run.step_ends);
    source = fmt::format("{} batch {} seq {}, {} step(s) (generated)", request.model.name,
                         request.options.batch, request.options.seq, request.options.steps);
  }
  const RequestSequence& sequence = *seq;
  const Bytes live = peak_live_bytes(sequence);
  const StartStateLine start = start_state(options.recording, args.file.empty());

  options.keep_curve = !args.html.empty();
  std::vector<PolicyRunResult> results;
  std::vector<std::pair<std::string, std::string>> skipped;  // (policy, why): over a work bound
  for (const PolicyEntry* p : policies) {
    try {
      results.push_back(run_policy(*p, sequence, options));
    } catch (const WorkBoundError& e) {
      if (!args.policies.empty()) {
        throw;  // asked for by name: the bound is the answer
      }
      skipped.emplace_back(p->name, e.what());
    }
  }
  if (!args.html.empty()) {
    write_output_file(
        args.html,
        compare_html(results, source, static_cast<std::int64_t>(live), "vramsim compare " + source), "page");
  }

  if (args.json) {
    nlohmann::ordered_json j;
    j["source"] = source;
    j["requests"] = sequence.ops().size();
    j["allocations"] = sequence.alloc_count();
    j["capacity_bytes"] = device.capacity_bytes;
    j["peak_live_bytes"] = live;
    j["start_state"] = start.json;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const PolicyRunResult& r : results) {
      rows.push_back(row_json(r));
    }
    j["policies"] = rows;
    if (!skipped.empty()) {
      nlohmann::ordered_json s = nlohmann::ordered_json::array();
      for (const auto& [policy, why] : skipped) {
        s.push_back({{"policy", policy}, {"reason", why}});
      }
      j["skipped_policies"] = s;
    }
    fmt::print("{}\n", json_text(j));
    return 0;
  }
  fmt::print("requests     {} ({} allocations{}) from {}\n", sequence.ops().size(), sequence.alloc_count(),
             options.recording != nullptr && options.recording->start_blocks > 0
                 ? fmt::format(", the first {} of them the start state", options.recording->start_blocks)
                 : "",
             source);
  fmt::print("device       {}\n", device_label(device));
  fmt::print("start state  {}\n", start.text);
  fmt::print("peak live    {}  (the most bytes live at once: no placement can reserve less)\n\n",
             b(static_cast<std::int64_t>(live)));
  fmt::print("{:<20}{:>12}{:>12}{:>8}{:>12}{:>25}{:>9}{:>9}{:>6}\n", "policy", "reserved", "allocated",
             "frag", "over live", "largest free / free", "mallocs", "frees", "OOMs");
  fmt::print("{:<20}{:>12}{:>12}{:>8}{:>12}{:>25}{:>9}{:>9}{:>6}\n", "", "(peak)", "(peak)", "", "",
             "(at alloc peak)", "", "", "");
  for (const PolicyRunResult& r : results) {
    const double over =
        live > 0
            ? 100.0 * (static_cast<double>(r.peaks.peak_reserved_bytes) / static_cast<double>(live) - 1.0)
            : 0.0;
    fmt::print(
        "{:<20}{:>12}{:>12}{:>7.1f}%{:>+11.1f}%{:>25}{:>9}{:>9}{:>6}\n", r.policy,
        b(r.peaks.peak_reserved_bytes), b(r.peaks.peak_allocated_bytes), 100.0 * r.peaks.fragmentation(),
        over,
        fmt::format("{} / {}", b(r.largest_free_block_at_allocated_peak), b(r.free_bytes_at_allocated_peak)),
        r.num_device_alloc, r.num_device_free, r.num_ooms);
  }
  for (const auto& [policy, why] : skipped) {
    fmt::print("{:<20}skipped: {}\n", policy, why);
  }
  fmt::print("\nfrag = 1 - peak active / peak reserved; over live = peak reserved / peak live - 1\n");
  return 0;
}

}  // namespace

AllocatorDevice allocator_device(const RequestArgs& a) {
  AllocatorDevice d;
  if (!a.gpu.empty()) {
    const GpuMemory g = gpu_memory(a.gpu);
    d.gpu_name = g.name;
    d.context_bytes = g.context_bytes;
    d.capacity_bytes = static_cast<Bytes>(g.total_bytes - g.context_bytes);
  } else if (!a.capacity.empty()) {
    d.capacity_bytes = parse_size(a.capacity, "--capacity");
    if (d.capacity_bytes == 0) {
      throw InputError("--capacity: must be positive");
    }
  }
  return d;
}

void add_compare_command(CLI::App& app, std::function<int()>& run) {
  static CompareArgs args;
  args = CompareArgs{};
  auto* cmd = app.add_subcommand("compare",
                                 "Run every allocator policy on the same requests (a recorded snapshot or a "
                                 "generated training step) and "
                                 "compare peak reserved memory, fragmentation, device calls and OOMs");
  cmd->add_option(
      "FILE", args.files,
      "snapshot (.pickle / .json / .vtrace), or several (or a folder): the ranks of one job, each "
      "policy's largest peak over them; or use --model");
  add_request_options(cmd, args.request, args.alloc_conf);  // --torch-version among them
  cmd->get_option("--model")->required(false);
  cmd->get_option("--seq")->required(false);
  args.request.seq = 0;
  cmd->add_option("--batch", args.request.batch, "batch size (with --model)")->capture_default_str();
  cmd->add_option("--policies", args.policies, "comma-separated policy names (default: all)");
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->add_flag("--list-policies", args.list, "list the registered policies and exit");
  cmd->add_option(
      "--html", args.html,
      "write a self-contained page: the policies' table and their reserved memory over the requests");
  cmd->callback([&run, cmd] {
    if (cmd->count("--alloc-conf") > 0) {
      args.request.alloc_conf = args.alloc_conf;
    }
    run = [] { return run_compare(args); };
  });
}

}  // namespace vramsim::cli
