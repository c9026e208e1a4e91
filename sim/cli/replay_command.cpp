#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "sim/alloc/caching_config.h"
#include "sim/cli/commands.h"
#include "sim/cli/prediction_report.h"
#include "sim/cli/rank_files.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/predict/html_report.h"
#include "sim/predict/perfetto_trace.h"
#include "sim/replay/memory_timeline.h"
#include "sim/replay/recorded_annotations.h"
#include "sim/replay/trace_replay.h"
#include "sim/report/memory_stats.h"
#include "traces/trace_io.h"

namespace vramsim::cli {
namespace {

struct ReplayArgs {
  std::vector<std::string> files;  // as given: one file, several (the ranks of a job) or a folder of them
  std::string file;                // the one replayed
  int device = -1;
  std::string alloc_conf;
  bool alloc_conf_given = false;
  std::string torch_version;
  std::string capacity;
  bool check = false;
  bool stats = false;
  bool json = false;
  bool summary = false;
  std::string snapshot_out;
  std::string html;
  std::string perfetto;
};

std::string bytes_and_human(std::int64_t b) {
  return fmt::format("{:>10}  ({} bytes)", format_bytes_short(static_cast<Bytes>(b)), b);
}

std::string ratio(std::size_t a, std::size_t b) { return fmt::format("{} / {}", a, b); }

nlohmann::ordered_json divergence_json(const std::optional<Divergence>& d) {
  if (!d) {
    return nullptr;
  }
  return {{"event_index", d->event_index}, {"expected", d->expected}, {"model", d->got}};
}

nlohmann::ordered_json annotations_json(const RecordedAnnotations& n) {
  return {{"record_function_marks", n.external},
          {"annotate_entries", n.annotate_entries},
          {"events_with_user_metadata", n.events_with_metadata},
          {"distinct_user_metadata", n.distinct_metadata},
          {"events_with_compile_context", n.events_with_compile_context},
          {"open_ranges_at_reserved_peak", n.open_ranges},
          {"user_metadata_at_reserved_peak", n.metadata}};
}

nlohmann::ordered_json to_json(const ReplayResult& r, const ReplayArgs& a, bool identical,
                               const RecordedAnnotations* notes) {
  nlohmann::ordered_json j;
  j["file"] = r.source;
  j["device"] = r.device;
  j["events"] = r.events;
  j["policy"] = r.policy;
  j["alloc_conf"] = r.config.text;
  j["alloc_conf_origin"] = r.config_origin;
  j["torch_version"] = r.config.torch_version.text();
  j["torch_version_origin"] = r.torch_version_origin;
  j["starts_mid_run"] = r.starts_mid_run;
  j["reserved_at_start_bytes"] = r.reserved_at_start_bytes;
  j["inferred_block_sizes"] = r.guessed_block_sizes;
  j["inferred_block_sizes_from_later_allocations"] = r.placed_block_sizes;
  j["peak_allocated_bytes"] = r.peaks.peak_allocated_bytes;
  j["peak_reserved_bytes"] = r.peaks.peak_reserved_bytes;
  j["peak_active_bytes"] = r.peaks.peak_active_bytes;
  j["peak_requested_bytes"] = r.peaks.peak_requested_bytes;
  j["fragmentation"] = r.peaks.fragmentation();
  j["inactive_split_bytes_at_reserved_peak"] = r.peaks.inactive_split_bytes_at_reserved_peak;
  j["num_device_alloc"] = r.stats.num_device_alloc;
  j["num_device_free"] = r.stats.num_device_free;
  j["num_ooms"] = r.stats.num_ooms;
  j["num_alloc_retries"] = r.stats.num_alloc_retries;
  j["recorded_cudamalloc_failures_followed"] = r.recorded_failures_followed;
  j["capacity_bytes"] = r.capacity_bytes;
  j["capacity_refusals"] = r.capacity_refusals;
  j["inferred_capacity_below_bytes"] = r.inferred_capacity_below_bytes;
  if (!r.private_pools.empty()) {
    nlohmann::ordered_json pools = nlohmann::ordered_json::array();
    for (const PrivatePool& p : r.private_pools) {
      pools.push_back({{"pool_id", {p.id.first, p.id.second}},
                       {"use_count", p.use_count},
                       {"segments", p.segment_count},
                       {"released", !p.live}});
    }
    j["private_pools"] = pools;
  }
  if (notes != nullptr && notes->any()) {
    j["annotations"] = annotations_json(*notes);
  }
  if (!r.warnings.empty()) {
    j["warnings"] = r.warnings;
  }
  if (a.check) {
    const CheckReport& c = r.check;
    j["check"] = {
        {"identical", identical},
        {"segment_events_recorded", c.segment_events_recorded},
        {"segment_events_matched", c.segment_events_matched},
        {"segment_events_model", c.model_segment_events},
        {"allocs_recorded", c.allocs_recorded},
        {"allocs_same_offset", c.allocs_same_offset},
        {"ooms_recorded", c.ooms_recorded},
        {"final_segments_recorded", c.final_segments_recorded},
        {"final_segments_matched", c.final_segments_matched},
        {"final_blocks_recorded", c.final_blocks_recorded},
        {"final_blocks_matched", c.final_blocks_matched},
        {"recorded_peak_reserved_bytes", c.recorded_peak_reserved_bytes},
        {"recorded_peak_requested_bytes", c.recorded_peak_requested_bytes},
        {"invariant_violations", c.invariant_violations},
        {"first_divergence", divergence_json(c.first_divergence)},
    };
  }
  return j;
}

// --json's document: to_json's, with torch.cuda.memory_stats() of the model at the end under --stats.
nlohmann::ordered_json replay_json(const ReplayResult& r, const ReplayArgs& a, bool identical,
                                   const RecordedAnnotations* notes = nullptr) {
  nlohmann::ordered_json j = to_json(r, a, identical, notes);
  if (a.stats) {
    nlohmann::ordered_json stats;
    for (const auto& [k, v] : flatten_stats(r.stats)) {
      stats[k] = v;
    }
    j["memory_stats"] = stats;
  }
  return j;
}

// "annotations" line: what the recording says about itself, and where the reserved peak falls in it.
void print_annotations(const RecordedAnnotations& n) {
  std::string at_peak;
  if (!n.open_ranges.empty()) {
    std::string ranges;
    for (const std::string& name : n.open_ranges) {
      ranges += fmt::format("{}\"{}\"", ranges.empty() ? "" : " > ", name);
    }
    at_peak += fmt::format("; at the reserved peak inside {}", ranges);
  }
  if (!n.metadata.empty()) {
    at_peak +=
        fmt::format("{} user_metadata \"{}\"", at_peak.empty() ? "; at the reserved peak" : ",", n.metadata);
  }
  fmt::print(
      "annotations      {} record_function marks, {} annotate entries, user_metadata on {} events ({} "
      "distinct), compile_context on {}{}\n",
      n.external, n.annotate_entries, n.events_with_metadata, n.distinct_metadata,
      n.events_with_compile_context, at_peak);
}

void print_text(const ReplayResult& r, const ReplayArgs& a, bool identical,
                const RecordedAnnotations* notes) {
  fmt::print("trace            {}: device {}, {} events\n", r.source, r.device, r.events);
  if (r.starts_mid_run) {
    fmt::print(
        "start state      recorded mid-run: {} reserved before the first event, rebuilt from the final "
        "snapshot ({} block sizes inferred, {} of them from a later allocation)\n",
        format_bytes_short(r.reserved_at_start_bytes), r.guessed_block_sizes, r.placed_block_sizes);
  } else {
    fmt::print("start state      empty allocator\n");
  }
  fmt::print("allocator        {} \"{}\" ({})\n", r.policy, r.config.text, r.config_origin);
  if (r.torch_version_origin == "--torch-version") {  // the default (newest modelled) is not repeated
    fmt::print("torch version    {} (--torch-version)\n", r.config.torch_version.text());
  }
  fmt::print("peak allocated   {}\n", bytes_and_human(r.peaks.peak_allocated_bytes));
  fmt::print("peak reserved    {}\n", bytes_and_human(r.peaks.peak_reserved_bytes));
  fmt::print("peak active      {}\n", bytes_and_human(r.peaks.peak_active_bytes));
  fmt::print("peak requested   {}\n", bytes_and_human(r.peaks.peak_requested_bytes));
  fmt::print(
      "fragmentation    {:.2f} %  (1 - peak active / peak reserved); inactive split at the reserved peak: "
      "{}\n",
      100.0 * r.peaks.fragmentation(),
      format_bytes_short(static_cast<Bytes>(r.peaks.inactive_split_bytes_at_reserved_peak)));
  fmt::print("device calls     {} cudaMalloc/map, {} cudaFree/unmap, {} alloc retries\n",
             r.stats.num_device_alloc, r.stats.num_device_free, r.stats.num_alloc_retries);
  fmt::print("OOMs             {}\n", r.stats.num_ooms);
  if (notes != nullptr && notes->any()) {
    print_annotations(*notes);
  }
  if (!r.private_pools.empty()) {
    std::string list;
    for (const PrivatePool& p : r.private_pools) {
      list += fmt::format("{}{} {}", list.empty() ? "" : "; ", p.id.text(),
                          !p.live ? "released"
                                  : fmt::format("use_count {}, {} segment{}", p.use_count, p.segment_count,
                                                p.segment_count == 1 ? "" : "s"));
    }
    fmt::print("private pools    {} ({} pool events): {}\n", r.private_pools.size(), r.pool_events, list);
  }
  if (r.capacity_bytes != 0) {
    fmt::print(
        "device limit     --capacity {} ({} cudaMalloc/map calls refused by it){}\n",
        format_bytes_short(r.capacity_bytes), r.capacity_refusals,
        r.config.per_process_memory_fraction
            ? fmt::format("; per_process_memory_fraction {} allows {}", *r.config.per_process_memory_fraction,
                          format_bytes_short(static_cast<Bytes>(*r.config.per_process_memory_fraction *
                                                                static_cast<double>(r.capacity_bytes))))
            : "");
  }
  if (r.capacity_bytes == 0 && r.check.segment_events_recorded == 0 && !r.check.has_final_state) {
    fmt::print("device limit     none: the trace records no device calls; give --capacity to model one\n");
  } else if (r.capacity_bytes == 0) {
    // Nothing in a snapshot says how much memory the GPU had: state what the recorded outcomes imply.
    fmt::print(
        "device limit     not recorded; the model followed the recorded cudaMalloc outcomes: >= {} (peak "
        "reserved){}{}\n",
        format_bytes_short(static_cast<Bytes>(r.check.recorded_peak_reserved_bytes)),
        r.inferred_capacity_below_bytes != 0
            ? fmt::format(", < {} (smallest reserved + request that failed)",
                          format_bytes_short(r.inferred_capacity_below_bytes))
            : "",
        r.recorded_failures_followed > 0
            ? fmt::format("; {} cudaMalloc/map calls failed as recorded", r.recorded_failures_followed)
            : "");
  }
  if (!a.check) {
    return;
  }
  const CheckReport& c = r.check;
  auto ok = [](bool good) { return good ? "ok" : "DIFFERS"; };
  fmt::print("check segments   {:<22} recorded segment events reproduced (model made {})  {}\n",
             ratio(c.segment_events_matched, c.segment_events_recorded), c.model_segment_events,
             ok(c.segment_events_matched == c.segment_events_recorded &&
                c.model_segment_events == c.segment_events_recorded));
  fmt::print("check allocs     {:<22} allocations at the recorded segment and offset  {}\n",
             ratio(c.allocs_same_offset, c.allocs_recorded), ok(c.allocs_same_offset == c.allocs_recorded));
  if (c.has_final_state) {
    fmt::print("check final      {:<22} segments and {} blocks identical to the snapshot  {}\n",
               ratio(c.final_segments_matched, c.final_segments_recorded),
               ratio(c.final_blocks_matched, c.final_blocks_recorded),
               ok(c.final_segments_matched == c.final_segments_recorded &&
                  c.final_blocks_matched == c.final_blocks_recorded));
  }
  fmt::print("check peaks      reserved {} recorded / {} model, requested {} / {}  {}\n",
             c.recorded_peak_reserved_bytes, r.peaks.peak_reserved_bytes, c.recorded_peak_requested_bytes,
             r.peaks.peak_requested_bytes,
             ok(c.recorded_peak_reserved_bytes == r.peaks.peak_reserved_bytes &&
                c.recorded_peak_requested_bytes == r.peaks.peak_requested_bytes));
  if (!c.invariant_violations.empty()) {
    fmt::print("check invariants {} violations, first: {}\n", c.invariant_violations.size(),
               c.invariant_violations.front());
  }
  if (c.first_divergence) {
    fmt::print("first divergence event {}: expected {}; model: {}\n", c.first_divergence->event_index,
               c.first_divergence->expected, c.first_divergence->got);
  } else {
    fmt::print("first divergence none\n");
  }
  fmt::print("verdict          {}\n",
             identical ? "IDENTICAL to the recording" : "DIVERGES from the recording");
}

// --snapshot-out: when the model reproduced the recording, the recorded trace leads to the model's final
// state, so the file keeps it with all it carries (annotate entries, user_metadata, compile_context, the
// device's record_function marks) and, without --alloc-conf, the recorded allocator_settings: a snapshot read
// back is the one replayed. Otherwise that trace would contradict the state written with it: left out, said.
void carry_recording(const Snapshot& recorded, int device, bool identical, bool alloc_conf_given,
                     Snapshot& out) {
  const auto d = static_cast<std::size_t>(device);
  if (!identical) {
    fmt::print(
        stderr,
        "vramsim: warning: --snapshot-out: the model diverged from {}, so its trace (and the annotations "
        "and metadata on it) is not written with the model's final state\n",
        recorded.source);
    return;
  }
  if (d < recorded.device_traces.size()) {
    out.device_traces[d] = recorded.device_traces[d];
  }
  out.strings = recorded.strings;
  for (const ExternalAnnotation& a : recorded.external_annotations) {
    if (a.device == device) {
      out.external_annotations.push_back(a);
    }
  }
  if (!alloc_conf_given) {
    out.allocator_settings = recorded.allocator_settings;
  }
}

// The ranks of one job, each replayed as `replay FILE` would, and the largest of each peak over them (what
// torchtitan's and Megatron's memory logs report: each rank's torch.cuda.max_memory_*, and their maximum).
int replay_ranks(const std::vector<std::string>& files, const ReplayOptions& options, const ReplayArgs& a,
                 CommandResult* result) {
  for (const auto& [flag, given] : {std::pair{"--snapshot-out", !a.snapshot_out.empty()},
                                    {"--html", !a.html.empty()},
                                    {"--perfetto", !a.perfetto.empty()},
                                    {"--stats", a.stats},
                                    {"--summary", a.summary}}) {
    if (given) {
      throw InputError(fmt::format("{}: one file only (replay the rank's file alone)", flag));
    }
  }
  std::vector<ReplayResult> ranks;
  std::vector<bool> identical;
  for (const std::string& f : files) {
    ranks.push_back(replay_snapshot(load_snapshot(f), options));
    identical.push_back(ranks.back().check.identical(ranks.back().peaks));
  }
  const auto arg_max = [&](auto peak) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < ranks.size(); ++i) {
      best = peak(ranks[i]) > peak(ranks[best]) ? i : best;
    }
    return best;
  };
  const auto allocated = [](const ReplayResult& r) { return r.peaks.peak_allocated_bytes; };
  const auto reserved = [](const ReplayResult& r) { return r.peaks.peak_reserved_bytes; };
  const auto active = [](const ReplayResult& r) { return r.peaks.peak_active_bytes; };
  const std::size_t max_allocated = arg_max(allocated), max_reserved = arg_max(reserved),
                    max_active = arg_max(active);
  nlohmann::ordered_json j;
  j["ranks"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ReplayArgs one = a;
    one.file = files[i];
    nlohmann::ordered_json r = replay_json(ranks[i], one, identical[i]);
    r["rank"] = i;
    j["ranks"].push_back(r);
  }
  j["max"] = {
      {"peak_allocated_bytes", allocated(ranks[max_allocated])}, {"peak_allocated_rank", max_allocated},
      {"peak_reserved_bytes", reserved(ranks[max_reserved])},    {"peak_reserved_rank", max_reserved},
      {"peak_active_bytes", active(ranks[max_active])},          {"peak_active_rank", max_active}};
  const auto short_bytes = [](std::int64_t b) { return format_bytes_short(static_cast<Bytes>(b)); };
  const auto print = [&] {
    fmt::print("{:<5} {:>16} {:>16} {:>16} {:>5}{}  {}\n", "rank", "peak allocated", "peak reserved",
               "peak active", "OOMs", a.check ? "  check    " : "", "file");
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const ReplayResult& r = ranks[i];
      fmt::print("{:<5} {:>16} {:>16} {:>16} {:>5}{}  {}\n", i, short_bytes(r.peaks.peak_allocated_bytes),
                 short_bytes(r.peaks.peak_reserved_bytes), short_bytes(r.peaks.peak_active_bytes),
                 r.stats.num_ooms, a.check ? (identical[i] ? "  identical" : "  differs  ") : "", files[i]);
    }
    fmt::print("max over {} ranks: allocated {} (rank {}), reserved {} (rank {}), active {} (rank {})\n",
               ranks.size(), short_bytes(allocated(ranks[max_allocated])), max_allocated,
               short_bytes(reserved(ranks[max_reserved])), max_reserved,
               short_bytes(active(ranks[max_active])), max_active);
  };
  if (result != nullptr) {
    result->json = j;
    result->text = [text = capture_stdout(print)] { return text; };  // `print` reads locals: run it now
  } else if (a.json) {
    fmt::print("{}\n", json_text(j));
  } else {
    print();
  }
  const bool all_identical = std::all_of(identical.begin(), identical.end(), [](bool b) { return b; });
  return a.check && !all_identical ? 1 : 0;
}

}  // namespace

void add_torch_version_option(CLI::App* cmd, std::string& text) {
  cmd->add_option(
      "--torch-version", text,
      fmt::format("the PyTorch release whose caching-allocator rules apply, {} to {} (default: the "
                  "newest, {}: snapshots do not record their release); docs/replay.md lists what "
                  "differs",
                  kOldestModelledTorch.text(), kNewestModelledTorch.text(), kNewestModelledTorch.text()));
}

void add_replay_command(CLI::App& app, std::function<int()>& run, CommandResult* result) {
  static ReplayArgs args;
  args = ReplayArgs{};
  auto* cmd = app.add_subcommand("replay",
                                 "Replay a PyTorch memory snapshot (or a vramsim trace) through the "
                                 "allocator model; --check scores it against the recording");
  cmd->add_option(
         "FILE", args.files,
         "snapshot .pickle / .json from torch.cuda.memory._dump_snapshot, or .vtrace; several files "
         "(or a folder of them) are the ranks of one job: each is replayed, and the maximum over them "
         "reported")
      ->required();
  cmd->add_option("--device", args.device, "device index (default: the first device with a trace)")
      ->check(CLI::Range(0, 1023));
  cmd->add_option(
      "--alloc-conf", args.alloc_conf,
      "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the snapshot's allocator_settings)");
  add_torch_version_option(cmd, args.torch_version);
  cmd->add_option(
      "--capacity", args.capacity,
      "device memory available to the allocator, e.g. 80GiB (default: follow the recorded cudaMalloc "
      "outcomes)");
  cmd->add_flag("--check", args.check, "compare the model with the recording; exit 1 unless identical");
  cmd->add_flag("--stats", args.stats, "print torch.cuda.memory_stats() of the model at the end");
  cmd->add_flag("--summary", args.summary, "print a torch.cuda.memory_summary() style table");
  cmd->add_flag("--json", args.json, "machine-readable output");
  cmd->add_option("--snapshot-out", args.snapshot_out,
                  "write the model's final state as a snapshot (.json / .pickle / .vtrace)");
  cmd->add_option(
      "--html", args.html,
      "write a self-contained page: allocated / reserved over the trace, the peak, the segment map "
      "at the peak");
  cmd->add_option("--perfetto", args.perfetto,
                  "write the replay as Chrome trace-event JSON (Perfetto, chrome://tracing): allocated / "
                  "reserved / active counters, cudaMalloc / cudaFree / OOM instants");
  std::string footer = "\n--alloc-conf keys (PYTORCH_CUDA_ALLOC_CONF syntax, comma-separated key:value):\n";
  for (const CachingOption& o : caching_options()) {
    footer += fmt::format("  {:<34} default {:<10} {}\n", o.key, o.default_value, o.meaning);
  }
  cmd->footer(footer);
  cmd->callback([&run, cmd, result] {
    args.alloc_conf_given = cmd->count("--alloc-conf") > 0;
    run = [result] {
      ReplayOptions options;
      options.device = args.device;
      if (args.alloc_conf_given) {
        options.alloc_conf = args.alloc_conf;
      }
      if (!args.torch_version.empty()) {
        options.torch_version = parse_torch_version(args.torch_version, "--torch-version");
      }
      if (!args.capacity.empty()) {
        options.capacity_bytes = parse_size(args.capacity, "--capacity");
      }
      const std::vector<std::string> files = rank_files(args.files);
      std::error_code ec;
      if (files.size() > 1 || std::filesystem::is_directory(args.files.front(), ec)) {
        return replay_ranks(files, options, args, result);
      }
      args.file = files.front();
      const auto snapshot = std::make_shared<const Snapshot>(load_snapshot(args.file));
      const auto shared = std::make_shared<const ReplayResult>(replay_snapshot(*snapshot, options));
      const ReplayResult& r = *shared;
      const bool identical = r.check.identical(r.peaks);
      const auto notes = std::make_shared<const RecordedAnnotations>(recorded_annotations(
          *snapshot, r.device, static_cast<std::size_t>(r.peaks.reserved_peak_event_index)));
      for (const std::string& w : r.warnings) {
        fmt::print(stderr, "vramsim: warning: {}\n", w);
      }
      ReplayOptions again = options;
      again.device = r.device;
      const std::string title = "vramsim replay " + args.file;
      if (result != nullptr) {
        result->json = replay_json(r, args, identical, notes.get());
        result->summary = [shared] { return memory_summary(shared->stats, shared->device); };
        result->text = [shared, notes, text_args = args, identical] {
          return capture_stdout([&] { print_text(*shared, text_args, identical, notes.get()); });
        };
        result->html = [snapshot, shared, notes, again, title] {
          return replay_html(*shared, observe_memory_timeline(*snapshot, again), title, notes.get());
        };
        result->perfetto = [snapshot, again, title] {
          return perfetto_json({}, observe_memory_timeline(*snapshot, again), title) + "\n";
        };
      } else if (args.json) {
        fmt::print("{}\n", json_text(replay_json(r, args, identical, notes.get())));
      } else {
        print_text(r, args, identical, notes.get());
        if (args.stats) {
          fmt::print("\nmemory_stats\n");
          for (const auto& [k, v] : flatten_stats(r.stats)) {
            fmt::print("  {:<40} {}\n", k, v);
          }
        }
        if (args.summary) {
          fmt::print("\n{}", memory_summary(r.stats, r.device));
        }
      }
      if (!args.snapshot_out.empty()) {
        Snapshot out;
        out.source = args.snapshot_out;
        out.segments = r.final_segments;
        out.device_traces.resize(static_cast<std::size_t>(r.device) + 1);
        carry_recording(*snapshot, r.device, identical, args.alloc_conf_given, out);
        save_snapshot(out, args.snapshot_out, format_from_path(args.snapshot_out));
      }
      if (!args.html.empty() || !args.perfetto.empty()) {
        const MemoryTimeline t = observe_memory_timeline(*snapshot, again);
        if (!args.html.empty()) {
          write_output_file(args.html, replay_html(r, t, title, notes.get()), "page");
        }
        if (!args.perfetto.empty()) {
          write_output_file(args.perfetto, perfetto_json({}, t, title) + "\n", "trace");
        }
      }
      return args.check && !identical ? 1 : 0;
    };
  });
}

}  // namespace vramsim::cli
