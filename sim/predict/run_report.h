// From a run's workload to the report `predict` and `trace` print: the workload drives the caching allocator
// model on the device (run_policy, sim/simulate/policy_run.h), and every figure — peaks, the bill at the
// peak, phases, per-step peaks, fragmentation, the verdict — is observed on the model's own state after each
// request (PolicyRunOptions::on_request), at the run's phase markers. Nothing is re-counted from request
// sizes.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/alloc_conf_environment.h"
#include "sim/alloc/workload.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_prediction.h"
#include "sim/replay/memory_timeline.h"

namespace vramsim {

struct RunDevice {
  std::string gpu;           // GPU table name; empty = capacity_bytes
  Bytes capacity_bytes = 0;  // --capacity (no CUDA context counted)
  std::optional<std::string> alloc_conf;
  ContextOptions context;                             // --module-loading, --cuda-context
  TorchVersion torch_version = kNewestModelledTorch;  // whose allocator rules parse alloc_conf and run
  // Without alloc_conf: the environment's PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF, read as PyTorch reads
  // them (alloc_conf_environment.h), where the run is a script PyTorch would run in this environment (trace).
  std::optional<AllocConfEnvironment> alloc_conf_environment = std::nullopt;
  // Held outside the allocator besides the CUDA context: the NCCL communicators' buffers (nccl_groups.h),
  // allocated before the step's peak, so the allocator may reserve that much less.
  std::int64_t nccl_bytes = 0;
};

// The allocator settings of `device`: --alloc-conf, else its environment, else the defaults. Throws
// InputError.
CachingConfig run_alloc_config(const RunDevice& device);

// The name and decoder layer of the tensor an allocation request made (for "largest live tensors"); without
// it the request's op label and layer are used.
using TensorNamer = std::function<LiveTensor(std::size_t alloc_request_index)>;

// Runs `workload` through the caching allocator model on the device (its total less the CUDA context and
// NCCL; a second time without the limit when it runs out of memory, for what the run needs) and explains it
// at the workload's markers. Sets everything in Prediction except model_name, ops and timing; `tensors` is
// the number of allocations, `requests` the number of requests. Throws InputError.
Prediction explain_run(const Workload& workload, const RunDevice& device, const TensorNamer& name_of = {});

// The allocator model over `workload` on the device explain_run() gave `p`, for the pictures (--html,
// --perfetto). Throws InputError.
MemoryTimeline observe_run(const Workload& workload, const Prediction& p,
                           const std::optional<std::string>& alloc_conf,
                           const std::optional<AllocConfEnvironment>& environment = std::nullopt,
                           TorchVersion torch_version = kNewestModelledTorch);

}  // namespace vramsim
