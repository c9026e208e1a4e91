#include "sim/predict/non_torch_memory.h"

namespace vramsim {

bool vllm_custom_all_reduce_supported(int tp) { return tp == 2 || tp == 4 || tp == 6 || tp == 8; }

std::vector<NonTorchLine> tensor_parallel_non_torch_lines(int tp, bool nvswitch) {
  std::vector<NonTorchLine> lines;
  if (tp <= 1) {
    return lines;
  }
  if (vllm_custom_all_reduce_supported(tp)) {
    constexpr Bytes kMaxSize = 8192 * 1024;  // CustomAllreduce.__init__(max_size=8192 * 1024)
    lines.push_back({"custom all-reduce", 2 * kMaxSize, false,
                     "vllm/distributed/device_communicators/custom_all_reduce.py CustomAllreduce.__init__: "
                     "meta and data buffers of max_size each (create_shared_buffer)"});
  }
  if (nvswitch) {
    constexpr Bytes kNvlsChannels = 16;
    constexpr Bytes kBuffSize = 128 * kKiB * 8;  // nvlsChunkSize x NCCL_STEPS
    lines.push_back({"NCCL NVLS", kNvlsChannels * 2 * kBuffSize * static_cast<Bytes>(tp), true,
                     "NCCL src/transport/nvls.cc ncclNvlsBufferSetup: nChannels x 2 x buffSize x nHeads"});
  }
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
