// GPU memory a process holds outside PyTorch's caching allocator besides the CUDA context (cuda_context.h):
// communication buffers that NCCL and vLLM allocate with the driver's own calls, as bill lines. Each line
// says where its size comes from and when it is allocated, because vLLM's start-up measures only what
// appears between its post-initialisation snapshot and the end of the profile run ("non-torch forward
// increase memory"); what comes before that snapshot is in the process's total (nvidia-smi) but not in the
// increase.
//
// Lines (one rank of `tp` ranks on one node):
//   custom all-reduce  vLLM's CustomAllreduce (vllm/distributed/device_communicators/custom_all_reduce.py,
//                      __init__ with max_size = 8192 * 1024): meta_ptrs = create_shared_buffer(meta_size +
//                      max_size) and buffer_ptrs = create_shared_buffer(max_size), cudaMalloc'd through
//                      CudaRTLibrary at init_worker_distributed_environment, i.e. before the snapshot; 2 x 8
//                      MiB (meta_size, ops.meta_size(), a few KiB, is not counted). TP 2, 4, 6, 8 on one node
//                      only
//                      (_SUPPORTED_WORLD_SIZES).
//   NCCL NVLS          NCCL's NVLink SHARP buffers on NVSwitch GPUs (src/transport/nvls.cc
//   ncclNvlsBufferSetup):
//                      nvlsTotalSize = nChannels x 2 x buffSize x nHeads, buffSize = nvlsChunkSize (128 KiB)
//                      x NCCL_STEPS (8) = 1 MiB, 16 NVLS channels on H100 (NCCL INFO "NVLS comm ... nHeads 8
//                      buffSize 1048576 nvlsPerRankSize 33554432 nvlsTotalSize 268435456"), nHeads = the
//                      ranks. Set up at the first NVLS collective: the profile run's all-reduce, after the
//                      snapshot.
// NCCL's ring and tree connection buffers (NCCL_BUFFSIZE 4 MiB per channel and peer for the Simple protocol,
// plus LL and LL128) depend on the channel count NCCL's topology search picks and are not modelled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

struct NonTorchLine {
  std::string name;  // "custom all-reduce", "NCCL NVLS"
  Bytes size_bytes = 0;
  bool after_snapshot = false;  // allocated during vLLM's profile run (in its non-torch increase)
  std::string source;           // file and function it follows
};

// vLLM's custom all-reduce supports these world sizes (custom_all_reduce.py _SUPPORTED_WORLD_SIZES).
bool vllm_custom_all_reduce_supported(int tp);

// The bill for one rank of a tensor-parallel group of `tp` GPUs on one node; `nvswitch`: the GPUs share an
// NVSwitch with NVLink SHARP (H100/H200 SXM), where NCCL sets up NVLS buffers. Empty for tp 1.
std::vector<NonTorchLine> tensor_parallel_non_torch_lines(int tp, bool nvswitch);

// The sum of the lines allocated after vLLM's post-initialisation snapshot.
Bytes non_torch_increase_bytes(const std::vector<NonTorchLine>& lines);

}  // namespace vramsim
