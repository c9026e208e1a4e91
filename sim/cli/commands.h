// The vramsim subcommands. Each registers its options on a CLI11 app and runs after parsing; user errors
// are thrown as InputError and turned into a one-line message and exit status 2 by main().
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/cli/command_result.h"
#include "sim/plan/plan.h"
#include "sim/predict/step_prediction.h"

namespace vramsim::cli {

// Registers `replay` on `app`; `run` is set to the action to execute when it was chosen. Each registration
// starts from the command's defaults (an app may be built and parsed many times in one process: cli_app.h).
// Commands given a `result` fill it with what they computed instead of printing it (cli_app.h).
void add_replay_command(CLI::App& app, std::function<int()>& run, CommandResult* result = nullptr);
void add_convert_command(CLI::App& app, std::function<int()>& run);
void add_predict_command(CLI::App& app, std::function<int()>& run, CommandResult* result = nullptr);
void add_fit_command(CLI::App& app, std::function<int()>& run);
void add_plan_command(CLI::App& app, std::function<int()>& run);
void add_merge_command(CLI::App& app, std::function<int()>& run);
// plan's report (text, or --json; --csv writes every configuration), shared with merge.
int print_plan(const PlanRequest& request, const PlanResult& result, bool json, const std::string& csv);
void add_compare_command(CLI::App& app, std::function<int()>& run);
void add_sweep_command(CLI::App& app, std::function<int()>& run);
// --shard "K/N" -> (K - 1, N); throws InputError unless 1 <= K <= N.
std::pair<int, int> parse_shard(const std::string& text);
// True when `part` is a `vramsim sweep --shard` output (merge's files).
bool is_sweep_shard(const nlohmann::json& part);
// The shards of one sweep (`parts`, parsed from the files `names`, in any order) merged and printed as the
// sweep on one machine prints them, byte for byte. Throws InputError naming the file when they do not fit.
int merge_sweep_shards(const std::vector<nlohmann::json>& parts, const std::vector<std::string>& names,
                       bool json, const std::string& csv);
void add_trace_command(CLI::App& app, std::function<int()>& run, CommandResult* result = nullptr);
// `vramsim techniques`: the registry of techniques.h.
void add_techniques_command(CLI::App& app, std::function<int()>& run);
// The GPU `vramsim trace` shows a script (what torch.cuda reports to it) for its --gpu (default H100-80GB) or
// --capacity, and --cublas-workspace-bytes (-1: PyTorch's default for the GPU, or $CUBLAS_WORKSPACE_CONFIG).
// The Python package's simulate() gives its tracer the same. Throws InputError as trace would.
struct SimulatedGpu {
  std::string name;
  int compute_capability = 0;  // major * 10 + minor
  std::int64_t total_memory_bytes = 0;
  std::int64_t cublas_workspace_bytes = 0;
};
SimulatedGpu trace_simulated_gpu(const std::string& gpu, const std::string& capacity,
                                 std::int64_t workspace_bytes);
// The arguments after `vramsim trace SCRIPT.py --`, which main() keeps away from the option parser.
void set_trace_script_args(std::vector<std::string> args);
// `vramsim trace`'s own options are the ones before the script; throws InputError naming an unknown one
// there.
void check_trace_options(const std::vector<std::string>& args);

// `j` as the --json output prints it. Text that is not valid UTF-8 (a file path with byte 0xFF) comes out as
// U+FFFD rather than making dump() throw: the output is always valid JSON.
template <typename Json>
std::string json_text(const Json& j) {
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

// The model, device and training flags of predict, fit, compare and sweep (predict_command.cpp). `alloc_conf`
// receives --alloc-conf; copy it into `a` when the option was given.
void add_request_options(CLI::App* cmd, RequestArgs& a, std::string& alloc_conf);
// --torch-version X.Y (sim/alloc/torch_version.h) of replay and of the request options, into `text`; parse it
// with parse_torch_version(text, "--torch-version").
void add_torch_version_option(CLI::App* cmd, std::string& text);

// The device compare and sweep run every policy on (compare_command.cpp): --gpu's memory less its CUDA
// context, or --capacity, or unlimited. Throws InputError on an unknown GPU or a bad/zero --capacity.
struct AllocatorDevice {
  Bytes capacity_bytes = Bytes{1} << 60;
  std::string gpu_name;            // "" unless --gpu
  std::int64_t context_bytes = 0;  // --gpu only
};
AllocatorDevice allocator_device(const RequestArgs& a);

}  // namespace vramsim::cli
