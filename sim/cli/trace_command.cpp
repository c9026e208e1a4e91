// `vramsim trace`: the user's own script, run on the CPU with real PyTorch deciding every allocation and free
// (traces/tracer), then replayed through the allocator model and explained as `predict` explains a step.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "sim/cli/commands.h"
#include "sim/cli/prediction_report.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/html_report.h"
#include "sim/predict/perfetto_trace.h"
#include "sim/trace/traced_run.h"
#include "sim/trace/tracer_process.h"
#include "traces/trace_io.h"

namespace vramsim::cli {
namespace {

constexpr std::string_view kDefaultGpu = "H100-80GB";

const ReportText kTraceText{
    "allocated bytes of the allocator model where the traced program entered each phase",
    "peaks of the allocator model within each step of the traced program"};

struct TraceArgs {
  std::string gpu;
  std::string capacity;
  std::string alloc_conf;
  std::string python;
  std::string out;
  std::string load;
  std::string label;
  std::string html;
  std::string perfetto;
  std::int64_t cublas_workspace_bytes = -1;
  int timeout_s = 0;
  bool json = false;
  std::string script;
  std::vector<std::string> script_and_args;
};

std::vector<std::string>& passthrough_args() {
  static std::vector<std::string> args;
  return args;
}

std::string markers_of(const std::string& trace_path) { return trace_path + ".markers.json"; }

// A private folder for the tracer's files, removed when the command ends.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/vramsim-trace-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      throw InputError(fmt::format("vramsim trace: cannot make a scratch folder {}", pattern));
    }
    m_path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

RunDevice trace_device(const TraceArgs& a) {
  RunDevice d;
  if (!a.capacity.empty()) {
    d.capacity_bytes = parse_size(a.capacity, "--capacity");
    if (d.capacity_bytes == 0) {
      throw InputError("--capacity: must be positive");
    }
  } else {
    d.gpu = a.gpu.empty() ? std::string(kDefaultGpu) : a.gpu;
    (void)gpu_memory(d.gpu);  // unknown names fail before any work
  }
  if (!a.alloc_conf.empty()) {
    d.alloc_conf = a.alloc_conf;
  } else {
    // The script's PyTorch would read these from this environment (c10/core/AllocatorConfig.cpp).
    d.alloc_conf_environment =
        alloc_conf_environment(std::getenv("PYTORCH_ALLOC_CONF"), std::getenv("PYTORCH_CUDA_ALLOC_CONF"));
  }
  return d;
}

SimulatedGpu simulated_gpu(const RunDevice& device, std::int64_t workspace_bytes) {
  const GpuMemory g = gpu_memory(device.gpu.empty() ? kDefaultGpu : device.gpu);
  SimulatedGpu out;
  out.name = g.name;
  out.compute_capability = g.compute_capability;
  out.total_memory_bytes =
      device.gpu.empty() ? static_cast<std::int64_t>(device.capacity_bytes) : g.total_bytes;
  // One source for the workspace size: the GPU's default or CUBLAS_WORKSPACE_CONFIG from the environment
  // the script would run in (the tracer sees the same variable), unless --cublas-workspace-bytes says.
  if (workspace_bytes >= 0) {
    out.cublas_workspace_bytes = workspace_bytes;
  } else {
    const char* config = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    out.cublas_workspace_bytes =
        cublas_workspace_bytes(g.compute_capability, config != nullptr ? config : "");
  }
  return out;
}

TracedRun trace_script(const TraceArgs& a, const RunDevice& device, const ScratchDir& scratch) {
  TracerInvocation t;
  t.pythons = a.python.empty() ? default_pythons() : std::vector<std::string>{a.python};
  t.package_dir = default_tracer_dir();
  t.script = a.script_and_args.front();
  t.script_args.assign(a.script_and_args.begin() + 1, a.script_and_args.end());
  t.out_vtrace = scratch.path() + "/trace.vtrace";
  const SimulatedGpu g = simulated_gpu(device, a.cublas_workspace_bytes);
  t.gpu_name = g.name;
  t.compute_capability = g.compute_capability;
  t.total_memory_bytes = g.total_memory_bytes;
  t.cublas_workspace_bytes = g.cublas_workspace_bytes;
  if (!std::filesystem::is_regular_file(t.script)) {
    throw InputError(fmt::format("{}: no such file", t.script));
  }
  if (a.timeout_s < 0 || a.timeout_s > 7 * 24 * 3600) {
    throw InputError(fmt::format("--timeout: must be in 0..604800 seconds (0: none), got {}", a.timeout_s));
  }
  t.timeout_s = a.timeout_s;
  (void)run_tracer(t);
  TracedRun run;
  try {
    run = load_traced_run(t.out_vtrace, markers_of(t.out_vtrace));
  } catch (const InputError& e) {
    // The scratch folder is gone when the message is read: name what it held instead.
    std::string message = e.what();
    const std::string folder = scratch.path() + "/";
    for (std::size_t at = 0; (at = message.find(folder, at)) != std::string::npos;) {
      message.replace(at, folder.size(), "the tracer's output ");
    }
    throw InputError(fmt::format("{}: {}", t.script, message));
  }
  run.label = t.script;
  return run;
}

void save_outputs(const TracedRun& run, const std::string& out, const std::string& markers_src) {
  Snapshot trace = run.trace;
  trace.source = out;
  save_snapshot(trace, out, format_from_path(out));
  if (!markers_src.empty() && std::filesystem::exists(markers_src)) {
    std::error_code ec;
    std::filesystem::copy_file(markers_src, markers_of(out),
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      throw InputError(fmt::format("{}: cannot write: {}", markers_of(out), ec.message()));
    }
  }
}

std::string info_string(const nlohmann::ordered_json& info, const char* key) {
  return info.contains(key) && info[key].is_string() ? info[key].get<std::string>() : std::string("?");
}

void print_header(const TracedRun& run, const Prediction& p) {
  const nlohmann::ordered_json& info = run.info;
  fmt::print("script           {} ({} operators on PyTorch {}, {} allocations, {} allocator requests)\n",
             run.label, p.ops, info_string(info, "torch_version"), p.tensors, p.requests);
  std::string notes = fmt::format("{} step(s)", p.phases_step);
  if (info.contains("sdpa_backends") && info["sdpa_backends"].is_object()) {
    for (auto it = info["sdpa_backends"].begin(); it != info["sdpa_backends"].end(); ++it) {
      notes += fmt::format("; SDPA {} x{}", it.key(), it.value().dump());
    }
  }
  if (info.contains("autocast_casts") && info["autocast_casts"].is_number() && info["autocast_casts"] != 0) {
    notes += fmt::format("; {} autocast casts", info["autocast_casts"].dump());
  }
  if (info.contains("made_up_values") && info["made_up_values"].is_number() && info["made_up_values"] != 0) {
    notes += fmt::format("; {} tensor values read (Tensor.item() and the like return 0 on the simulated GPU)",
                         info["made_up_values"].dump());
  }
  fmt::print("traced           {}\n", notes);
  if (info.contains("notes") && info["notes"].is_array()) {
    for (const auto& n : info["notes"]) {
      if (n.is_string()) {
        fmt::print("note             {}\n", n.get<std::string>());
      }
    }
  }
}

int run_trace(const TraceArgs& a, CommandResult* result) {
  if (!a.gpu.empty() && !a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give only one of them");
  }
  if (a.load.empty() == a.script_and_args.empty()) {
    throw InputError(a.load.empty()
                         ? "trace: name the script to run (SCRIPT.py [-- ARGS...]) or --load a trace"
                         : "--load: give either a script or --load, not both");
  }
  const RunDevice device = trace_device(a);
  std::optional<ScratchDir> scratch;
  TracedRun run;
  std::string markers_src;
  if (!a.load.empty()) {
    markers_src = markers_of(a.load);
    run = load_traced_run(a.load, markers_src);
  } else {
    scratch.emplace();
    run = trace_script(a, device, *scratch);
    markers_src = markers_of(scratch->path() + "/trace.vtrace");
  }
  if (!a.label.empty()) {
    run.label = a.label;
  }
  const auto shared_run = std::make_shared<const TracedRun>(std::move(run));
  const auto shared = std::make_shared<const Prediction>(analyze_traced_run(*shared_run, device));
  const Prediction& p = *shared;
  if (!a.out.empty()) {
    save_outputs(*shared_run, a.out, markers_src);
  }
  const std::string title = "vramsim trace " + shared_run->label;
  const std::optional<std::string> alloc_conf = device.alloc_conf;
  const std::optional<AllocConfEnvironment> environment = device.alloc_conf_environment;
  const auto timeline = [shared_run, shared, alloc_conf, environment] {
    return observe_run(shared_run->workload, *shared, alloc_conf, environment);
  };
  if (!a.html.empty() || !a.perfetto.empty()) {
    const MemoryTimeline t = timeline();
    if (!a.html.empty()) {
      write_output_file(a.html, html_report(p, t, title), "page");
    }
    if (!a.perfetto.empty()) {
      write_output_file(a.perfetto, perfetto_json({}, t, title) + "\n", "trace");
    }
  }
  nlohmann::ordered_json j;
  if (a.json || result != nullptr) {
    j = prediction_json(p, kTraceText);
    j["script"] = shared_run->label;
    j["tracer"] = shared_run->info;
  }
  if (result != nullptr) {
    result->json = std::move(j);
    result->html = [shared, timeline, title] { return html_report(*shared, timeline(), title); };
    result->perfetto = [timeline, title] { return perfetto_json({}, timeline(), title) + "\n"; };
    result->text = [shared_run, shared] {
      return capture_stdout([&] {
        print_header(*shared_run, *shared);
        print_prediction(*shared, kTraceText);
      });
    };
  } else if (a.json) {
    fmt::print("{}\n", json_text(j));
  } else {
    const TracedRun& run = *shared_run;
    print_header(run, p);
    print_prediction(p, kTraceText);
  }
  return 0;
}

}  // namespace

SimulatedGpu trace_simulated_gpu(const std::string& gpu, const std::string& capacity,
                                 std::int64_t workspace_bytes) {
  TraceArgs a;
  a.gpu = gpu;
  a.capacity = capacity;
  if (!a.gpu.empty() && !a.capacity.empty()) {
    throw InputError("--gpu / --capacity: give only one of them");
  }
  return simulated_gpu(trace_device(a), workspace_bytes);
}

void set_trace_script_args(std::vector<std::string> args) { passthrough_args() = std::move(args); }

void check_trace_options(const std::vector<std::string>& args) {
  static const std::vector<std::string_view> kWithValue = {
      "--gpu",  "--capacity", "--alloc-conf", "--python", "--out", "--load", "--cublas-workspace-bytes",
      "--html", "--perfetto", "--timeout",    "--label"};
  static const std::vector<std::string_view> kFlags = {"--json", "--help", "-h"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (!arg.starts_with("-")) {
      return;  // the script: what follows is its own
    }
    const std::string_view name = arg.substr(0, arg.find('='));
    if (std::find(kWithValue.begin(), kWithValue.end(), name) != kWithValue.end()) {
      i += arg.find('=') == std::string_view::npos ? 1 : 0;
    } else if (std::find(kFlags.begin(), kFlags.end(), arg) == kFlags.end()) {
      throw InputError(fmt::format("trace: unknown option '{}' (see vramsim trace --help)", arg));
    }
  }
}

void add_trace_command(CLI::App& app, std::function<int()>& run, CommandResult* result) {
  static TraceArgs args;
  args = TraceArgs{};
  auto* cmd = app.add_subcommand(
      "trace",
      "Run your own PyTorch script on a simulated GPU (real PyTorch on the CPU decides every allocation and "
      "free), replay it through the allocator model and report as predict does");
  auto* gpu = cmd->add_option("--gpu", args.gpu, "GPU name (default H100-80GB)");
  auto* cap = cmd->add_option("--capacity", args.capacity, "device memory instead of a GPU, e.g. 80GiB");
  gpu->excludes(cap);
  cmd->add_option("--alloc-conf", args.alloc_conf,
                  "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: $PYTORCH_ALLOC_CONF and "
                  "$PYTORCH_CUDA_ALLOC_CONF, read as PyTorch reads them)");
  cmd->add_option(
      "--python", args.python,
      "the Python with PyTorch to run the script (default: $VRAMSIM_PYTHON, python3, /usr/bin/python3)");
  cmd->add_option("--out", args.out, "write the trace (.vtrace / .pickle / .json) and its phase markers");
  cmd->add_option("--load", args.load, "report on a trace written by --out or vramsim_trace.record()");
  cmd->add_option("--label", args.label,
                  "the name the report gives the run (default: the script, or the --load file)");
  cmd->add_option(
      "--html", args.html,
      "write a self-contained page: memory over the run stacked by category, the peak, the segment "
      "map at the peak, the bill");
  cmd->add_option(
      "--perfetto", args.perfetto,
      "write the run as Chrome trace-event JSON (Perfetto, chrome://tracing): allocator counters, "
      "requested bytes per category, cudaMalloc / cudaFree / OOM instants");
  cmd->add_option("--cublas-workspace-bytes", args.cublas_workspace_bytes,
                  "cuBLAS workspace per handle and stream (default: PyTorch's for the GPU, or "
                  "$CUBLAS_WORKSPACE_CONFIG)");
  cmd->add_option("--timeout", args.timeout_s,
                  "stop the script (and every process it started) after this many seconds (default 0: "
                  "never)");
  cmd->add_flag("--json", args.json,
                "machine-readable output (predict --json's keys, plus script and tracer)");
  cmd->add_option("script", args.script, "SCRIPT.py [-- ARGS...]");
  // Everything after the script belongs to it (a leading "--" is optional).
  cmd->prefix_command();
  cmd->callback([&run, cmd, result] {
    std::vector<std::string> rest = cmd->remaining();
    if (!rest.empty() && rest.front() == "--") {
      rest.erase(rest.begin());
    }
    if (!args.script.empty()) {
      args.script_and_args.push_back(args.script);
    }
    args.script_and_args.insert(args.script_and_args.end(), rest.begin(), rest.end());
    args.script_and_args.insert(args.script_and_args.end(), passthrough_args().begin(),
                                passthrough_args().end());
    run = [result] { return run_trace(args, result); };
  });
}

}  // namespace vramsim::cli
