#include "sim/serving/non_torch_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/engine/gpu_table.h"

namespace vramsim {
namespace {

// all_reduce_utils.py's tables, bytes by world size 2, 4, 6, 8 (index tp / 2 - 1); 0: not in the table.
struct AllReduceSizes {
  Bytes custom[4];
  Bytes symm_mem[4];
};
AllReduceSizes all_reduce_sizes(int compute_capability) {
  if (compute_capability == 90) {  // "9.0"
    return {{64 * kMiB, 32 * kMiB, kMiB / 2, kMiB / 4}, {64 * kMiB, 32 * kMiB, 64 * kMiB, 64 * kMiB}};
  }
  if (compute_capability == 100) {  // "10.0"
    return {{2 * kMiB, 2 * kMiB, kMiB, kMiB}, {8 * kMiB, 32 * kMiB, 128 * kMiB, 128 * kMiB}};
  }
  return {{0, 0, 0, 0}, {0, 0, 0, 0}};
}

// The TP group's lines: custom all-reduce, symmetric memory, pynccl's ring, torch's ring (last stage).
void add_tensor_parallel_lines(int tp, const std::string& gpu, bool last_stage,
                               std::vector<NonTorchLine>& lines) {
  const int capability = gpu.empty() ? 0 : find_gpu(gpu).compute_capability;
  const AllReduceSizes sizes = all_reduce_sizes(capability);
  const bool tabled = vllm_custom_all_reduce_supported(tp);
  const Bytes symm = tabled ? sizes.symm_mem[tp / 2 - 1] : 0;
  if (tabled) {
    constexpr Bytes kDefaultMax = 8192 * 1024;  // CustomAllreduce.__init__(max_size=8192 * 1024)
    const Bytes custom = sizes.custom[tp / 2 - 1];
    const Bytes max_size = symm > 0 && custom > 0 ? std::min(kDefaultMax, custom) : kDefaultMax;
    lines.push_back({"custom all-reduce", 2 * max_size, false,
                     "custom_all_reduce.py CustomAllreduce: meta and data buffers of max_size each "
                     "(create_shared_buffer; peers' buffers IPC-mapped, not allocated here)"});
  }
  if (symm > 0) {
    lines.push_back({"symmetric memory", symm, false,
                     "symm_mem.py SymmMemCommunicator: torch_symm_mem.empty(SYMM_MEM_ALL_REDUCE_MAX_SIZES)"});
  }
  const int channels = nccl_ring_channels(gpu);
  if (channels == 0) {
    return;
  }
  const Bytes ring = static_cast<Bytes>(channels) * nccl_ring_channel_bytes();
  lines.push_back({"NCCL ring (pynccl)", ring, false,
                   fmt::format("pynccl.py PyNcclCommunicator warm-up all_reduce: {} channels x 12 MiB "
                               "(NCCL p2p.cc: 10 MiB received + 2 MiB sent)",
                               channels)});
  if (last_stage) {
    lines.push_back({"NCCL ring (torch TP group)", ring, true,
                     fmt::format("the logits all_gather on the TP device group (base_device_communicator.py) "
                                 "creates torch's NCCL communicator: {} channels x 12 MiB",
                                 channels)});
  }
}

}  // namespace

bool vllm_custom_all_reduce_supported(int tp) { return tp == 2 || tp == 4 || tp == 6 || tp == 8; }

std::vector<NonTorchLine> tensor_parallel_non_torch_lines(int tp, const std::string& gpu) {
  return vllm_non_torch_lines(VllmParallelGroups{tp, 1, 1, true}, gpu);
}

std::vector<NonTorchLine> vllm_non_torch_lines(const VllmParallelGroups& groups, const std::string& gpu) {
  std::vector<NonTorchLine> lines;
  const int channels = nccl_ring_channels(gpu);
  const Bytes ring = static_cast<Bytes>(channels) * nccl_ring_channel_bytes();
  if (groups.tp > 1) {
    add_tensor_parallel_lines(groups.tp, gpu, groups.last_stage, lines);
  }
  // The PP and DP groups: a PyNcclCommunicator each (no custom all-reduce), connected by its warm-up.
  const auto group_ring = [&](int size, std::string_view group) {
    if (size > 1 && channels > 0) {
      lines.push_back({fmt::format("NCCL ring (pynccl, {} group)", group), ring, false,
                       fmt::format("parallel_state.py init_model_parallel_group(group_name=\"{}\"): "
                                   "PyNcclCommunicator warm-up all_reduce, {} channels x 12 MiB",
                                   group, channels)});
    }
  };
  group_ring(groups.pp, "pp");
  group_ring(groups.dp, "dp");
  return lines;
}

Bytes non_torch_increase_bytes(const std::vector<NonTorchLine>& lines) {
  Bytes sum = 0;
  for (const NonTorchLine& l : lines) {
    if (l.after_snapshot) {
      sum += l.size_bytes;
    }
  }
  return sum;
}

}  // namespace vramsim
