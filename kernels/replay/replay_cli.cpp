#include "kernels/replay/replay_cli.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include "kernels/replay/backends.h"
#include "kernels/replay/replay_plan.h"
#include "kernels/replay/replay_report.h"
#include "kernels/replay/replay_runner.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/registry.h"
#include "sim/core/error.h"
#include "sim/replay/trace_replay.h"
#include "traces/trace_io.h"

namespace vramsim::hw {
namespace {

struct CliOptions {
  std::string trace;
  std::string backend = "cuda-malloc";
  std::string policy = "pytorch";
  std::string alloc_conf;
  int device = 0;
  int trace_device = -1;
  bool verify = false;
  bool json = false;
  bool no_rows = false;
};

std::string footer() {
  std::string text = "\nBackends:\n";
  for (const BackendInfo& b : backend_table()) {
    text += fmt::format("  {:<12} {}\n", b.name, b.summary);
  }
  text += "\nPolicies (--policy, backends model and fake-model):\n";
  for (const PolicyEntry& p : policy_registry()) {
    text += fmt::format("  {:<20} {}\n", p.name, p.summary);
  }
  text +=
      "\nExit status: 0 ok, 1 replay failed, 2 no CUDA device, 3 --verify mismatches, 64 bad arguments, "
      "65 bad trace.\nSee kernels/README.md.\n";
  return text;
}

}  // namespace

CudaHooks no_cuda_hooks() {
  const auto refuse = [] {
    return NoCudaDevice(
        "this vramsim-replay was built without CUDA (SIM_WITH_CUDA=OFF, or AUTO found no nvcc); only "
        "the fake backends (fake, fake-model) run");
  };
  return CudaHooks{
      [refuse](int, const std::vector<StreamId>&) -> std::unique_ptr<IReplayDevice> { throw refuse(); },
      [refuse](int, const std::vector<StreamId>&) -> std::unique_ptr<IReplayBackend> { throw refuse(); }};
}

int replay_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                const CudaHooks& cuda) {
  CliOptions o;
  CLI::App app{
      "vramsim-replay: execute a trace's allocations and frees on a real GPU (or a labelled fake device) and "
      "compare the device memory in use with the allocator's own account",
      "vramsim-replay"};
  app.add_option("TRACE", o.trace,
                 "trace: .pickle / .json snapshot, or .vtrace (vramsim predict --trace-out)")
      ->required();
  app.add_option("--backend", o.backend, "cuda-malloc | async-pool | model | fake | fake-model")
      ->capture_default_str();
  CLI::Option* policy_opt =
      app.add_option("--policy", o.policy, "allocator policy for model / fake-model")->capture_default_str();
  CLI::Option* conf_opt = app.add_option(
      "--alloc-conf", o.alloc_conf,
      "policy settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the trace's recorded allocator_settings)");
  app.add_option("--device", o.device, "CUDA device index")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  app.add_option("--trace-device", o.trace_device,
                 "which device's trace to replay (default: the first with events)")
      ->check(CLI::Range(0, 1023));
  app.add_flag("--verify", o.verify,
               "before each free, check that the allocation still holds what was written");
  app.add_flag("--json", o.json, "one JSON object on stdout");
  app.add_flag("--no-rows", o.no_rows, "with --json: leave out the per-measurement rows");
  app.footer(footer());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err << "vramsim-replay: " << e.what() << " (see --help)\n";
    return kExitUsage;
  }

  BackendRequest request;
  ReplaySetup setup;
  try {
    const BackendInfo& info = find_backend(o.backend);
    if (!info.takes_policy && (policy_opt->count() > 0 || conf_opt->count() > 0)) {
      throw InputError(fmt::format(
          "--policy / --alloc-conf: backend {} has no policy (use model or fake-model)", info.name));
    }
    if (o.no_rows && !o.json) {
      throw InputError("--no-rows: only with --json");
    }
    if (info.takes_policy) {
      find_policy(o.policy);
      if (conf_opt->count() > 0) {
        parse_alloc_conf(o.alloc_conf, "--alloc-conf");  // option errors before the trace is read
      }
    }
    request.backend = o.backend;
    request.device = o.device;
    request.policy = o.policy;
    setup.backend_summary = info.summary;
    setup.verify = o.verify;
    if (info.takes_policy) {
      setup.policy = o.policy;
    }
  } catch (const InputError& e) {
    err << "vramsim-replay: " << e.what() << "\n";
    return kExitUsage;
  }

  ReplayPlan plan;
  try {
    const Snapshot snapshot = load_snapshot(o.trace);
    plan = build_replay_plan(snapshot, o.trace_device);
    if (!setup.policy.empty()) {
      ReplayOptions settings;  // the policy's settings as `vramsim replay` picks them
      if (conf_opt->count() > 0) {
        settings.alloc_conf = o.alloc_conf;
      }
      request.config = resolve_config(snapshot, settings, setup.alloc_conf_origin);
      setup.alloc_conf = request.config.text;
    }
  } catch (const InputError& e) {
    err << "vramsim-replay: " << e.what() << "\n";
    return kExitBadTrace;
  }
  request.streams = plan.streams;
  if (!setup.policy.empty() && find_policy(setup.policy).needs_plan) {
    request.sequence = request_sequence(plan);
  }

  ReplayRunResult result;
  try {
    const std::unique_ptr<IReplayBackend> backend = make_backend(request, cuda);
    RunOptions run;
    run.verify = o.verify;
    run.keep_rows = o.json && !o.no_rows;
    result = run_replay(plan, *backend, run);
  } catch (const NoCudaDevice& e) {
    err << "vramsim-replay: no CUDA device: " << e.what() << "\n";
    return kExitNoDevice;
  } catch (const InputError& e) {
    err << "vramsim-replay: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "vramsim-replay: " << e.what() << "\n";
    return kExitReplayFailed;
  }

  if (o.json) {
    out << replay_json(plan, setup, result, !o.no_rows).dump(2) << "\n";
  } else {
    print_replay_text(out, plan, setup, result);
  }
  if (o.verify && result.verify_mismatches != 0) {
    err << fmt::format(
        "vramsim-replay: {} bytes lost their pattern before their free: allocations overlapped\n",
        result.verify_mismatches);
    return kExitVerifyFailed;
  }
  return kExitOk;
}

}  // namespace vramsim::hw
