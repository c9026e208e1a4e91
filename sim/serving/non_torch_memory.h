// GPU memory a process holds outside PyTorch's caching allocator besides the CUDA context (cuda_context.h):
// the communication buffers vLLM and NCCL allocate with the driver's own calls at tensor parallelism >= 2,
// as bill lines. Each line says where its size comes from and when it is allocated, because vLLM V1 measures
// only what appears after its post-initialisation snapshot (Worker.init_device: MemorySnapshot() taken right
// after init_worker_distributed_environment): "non-torch forward increase memory" is after_profile.non_torch
// - init_snapshot.non_torch (vllm/utils memory_profiling, diff_from_create). What comes before that snapshot
// is in the process's total (nvidia-smi) but not in the increase, and not in the KV cache's budget.
//
// Lines for one rank of `tp` ranks on one node, vLLM 0.19 (the defaults: VLLM_ALLREDUCE_USE_SYMM_MEM on,
// custom all-reduce on, NCCL_CUMEM_ENABLE left to NCCL since vllm#24141):
//   custom all-reduce   CustomAllreduce.__init__ / _complete_init (vllm/distributed/device_communicators/
//                       custom_all_reduce.py): meta_ptrs = create_shared_buffer(meta_size + max_size) and
//                       buffer_ptrs = create_shared_buffer(max_size), each cudaMalloc'd on this GPU
//                       (allocate_shared_buffer_and_handle); max_size = min(8 MiB,
//                       CUSTOM_ALL_REDUCE_MAX_SIZES [capability][tp]) when the symmetric-memory communicator
//                       is on (all_reduce_utils.py: 9.0: 64, 32, 0.5, 0.25 MiB at 2, 4, 6, 8 ranks; 10.0: 2,
//                       2, 1, 1 MiB). The peers' buffers are opened with cudaIpcOpenMemHandle: a mapping of
//                       memory that lives on the peer, not an allocation on this GPU, so they do not lower
//                       this GPU's free memory. meta_size (a few KiB of flags) is not counted. Before the
//                       snapshot. World sizes 2, 4, 6, 8 only (_SUPPORTED_WORLD_SIZES).
//   symmetric memory    SymmMemCommunicator (symm_mem.py): torch_symm_mem.empty(max_size) with max_size =
//                       SYMM_MEM_ALL_REDUCE_MAX_SIZES[capability][tp] (9.0: 64, 32, 64, 64 MiB; 10.0: 8, 32,
//                       128, 128 MiB), torch's CUDASymmetricMemoryAllocator (cuMemCreate, outside the caching
//                       allocator). Before the snapshot. Capabilities 9.0 and 10.0 only.
//   NCCL ring (pynccl)  PyNcclCommunicator.__init__'s warm-up all_reduce connects the TP group's ring (NCCL
//                       connects at first use, NCCL_RUNTIME_CONNECT): per channel the receiving side's
//                       buffers on this GPU, Simple NCCL_BUFFSIZE 4 MiB (DEFAULT_BUFFSIZE) + LL 512 KiB
//                       (DEFAULT_LL_BUFFSIZE: 8 lines x 512 threads x 8 steps x 16 B) + LL128 4,800 KiB
//                       (DEFAULT_LL128_BUFFSIZE: 120 x 640 threads x 8 steps x 8 B) = 9,633,792 B, allocated
//                       through cuMem in 2 MiB granules: 10 MiB, and the sending side's ncclSendMem, 2 MiB
//                       (NCCL issue #1685's ALLOC log on 8 x H100: 10485760- and 2097152-byte buffers):
//                       12 MiB a channel (sim/engine/nccl_buffers.h, shared with training's bill). Before the
//                       snapshot.
//   NCCL ring (torch)   the TP group's torch.distributed ProcessGroupNCCL communicator, created lazily by the
//                       profile run's first logits all_gather (LogitsProcessor._gather_logits ->
//                       DeviceCommunicatorBase.all_gather ->
//                       dist.all_gather_into_tensor(group=device_group)): its ring, the same bytes. After the
//                       snapshot: in the increase.
// The channel count is NCCL's topology search's answer; it is taken from NCCL's own INFO lines where they are
// public: 24 "coll channels" on H100 / H200 SXM nodes (vllm#18567 at 4 x H100, "Channel 00..23" in
// vllm#10453). For other GPUs the NCCL lines are left out (not sized). The rest of a communicator's own
// allocations (device-side channel and work structures, NVLS at 4+ ranks when a collective picks it, kernels
// loaded on first use) is not sized from sources: vLLM 0.19's logged increase at TP 2 and 4 on H100
// (2.06-2.13 GiB) is far above these lines (known miss, docs/serving.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/types.h"
#include "sim/engine/nccl_buffers.h"  // nccl_connection_buffer_bytes, nccl_ring_channels

namespace vramsim {

struct NonTorchLine {
  std::string name;  // "custom all-reduce", "symmetric memory", ...
  Bytes size_bytes = 0;
  bool after_snapshot = false;  // allocated after vLLM's post-initialisation snapshot (in its increase)
  std::string source;           // file and function it follows
};

// vLLM's custom all-reduce supports these world sizes (custom_all_reduce.py _SUPPORTED_WORLD_SIZES).
bool vllm_custom_all_reduce_supported(int tp);

// The bill for one rank of a tensor-parallel group of `tp` GPUs of kind `gpu` (a find_gpu name; empty: no
// GPU-specific lines) on one node, vLLM 0.19. Empty for tp 1.
std::vector<NonTorchLine> tensor_parallel_non_torch_lines(int tp, const std::string& gpu);

// The process groups one vLLM worker belongs to (parallel_state.initialize_model_parallel, all made in
// init_worker_distributed_environment, before the snapshot): the TP group, the PP group of `pp` stages and
// the DP group of `dp` engine replicas. Only the TP group gets the custom all-reduce and symmetric memory
// (cuda_communicator.py CudaCommunicator: `if "tp" not in unique_name: use_custom_allreduce = False;
// use_torch_symm_mem = False`); every group of more than one rank gets a PyNcclCommunicator, whose warm-up
// all_reduce connects its ring: channels x 12 MiB each, before the snapshot. The PP stages' send/recv
// (p2p) connections are made at the first real step, not in the profile run (not on the bill). The torch
// TP-group communicator is created by the logits all_gather, which only the last stage runs.
struct VllmParallelGroups {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  bool last_stage = true;
};
std::vector<NonTorchLine> vllm_non_torch_lines(const VllmParallelGroups& groups, const std::string& gpu);

// The sum of the lines allocated after vLLM's post-initialisation snapshot.
Bytes non_torch_increase_bytes(const std::vector<NonTorchLine>& lines);

}  // namespace vramsim
