// Note [CUDA context figures]
// Measured figures (a PyTorch process, `total - free` or nvidia-smi, after its first CUDA operation):
//   A100 lazy 479 MiB: Stas Bekman, ml-engineering, training/performance/README.md, "Preloaded CUDA kernels
//     memory usage": 0.47 GiB after torch.ones(1).cuda() with PyTorch 2.1.1+cu121 on an A100 80GB, less the
//     2 MiB segment of the tensor; A100 eager 942 MiB: the same page, CUDA_MODULE_LOADING=EAGER, 0.92 GiB.
//   H100 lazy 534 MiB: meta-pytorch/torchcomms PR #777, "on H100, each primary context costs ~534 MiB"
//     (CUDA 12).
//   H200 lazy 520 MiB: kvcache-ai/Mooncake PR #3973, "~520 MiB on H200" (CUDA 12.9).
//   V100 eager 1343 MiB: huggingface/transformers docs, model_memory_anatomy.md: "GPU memory occupied:
//     1343 MB ... the kernels alone take up 1.3GB" (Tesla V100-SXM2-16GB, CUDA 11.2, PyTorch ~1.10).
// Estimates: a bare lazy context reserves about 2 KiB x SMs x max threads per SM (the local-memory
// reservation, forums.developer.nvidia.com/t/local-memory-management/289339: "MAX_THREADS_PER_SM x SMs x
// LOCAL_MEM_PER_THREAD"; it fits the H100's 534 and the RTX 6000 Ada's measured 426 MiB,
// unslothai/unsloth-zoo PR #1053, and an RTX 3090's bare context of 256 MiB held before any kernel ran,
// invoke-ai/InvokeAI issue #9413, torch 2.7.1+cu128, against the rule's 246 MiB), plus ~50 MiB of PyTorch's
// first kernels (the A100's 479 MiB after torch.ones against its 432 MiB bare reservation). Eager loading
// without a measurement: 1 GiB, inside the 0.6-1.8 GiB that eager-era PyTorch processes measure
// (ml-engineering; pytorch/pytorch #107667: ">1000MB" before CUDA 11.7).
#include "sim/predict/cuda_context.h"

#include <array>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {
namespace {

struct Row {
  std::string_view gpu;
  CudaContextFigure lazy;
  CudaContextFigure eager;
};

constexpr std::string_view kEagerEstimate =
    "estimate: eager-loading PyTorch processes measure 0.6-1.8 GiB (ml-engineering; pytorch/pytorch #107667)";

// Lazy estimate for `sms` SMs of `threads` threads: 2 KiB per thread slot + 50 MiB of first kernels.
constexpr Bytes lazy_estimate(Bytes sms, Bytes threads) { return sms * threads * 2 * kKiB + 50 * kMiB; }

constexpr std::string_view kRocmEager =
    "estimate: ROCm has no CUDA_MODULE_LOADING switch; taken as the lazy figure (no measurement)";

constexpr std::string_view kA100Lazy =
    "measured: 0.47 GiB after torch.ones(1).cuda(), A100 80GB, PyTorch 2.1.1+cu121 (ml-engineering)";
constexpr std::string_view kA100Eager =
    "measured: 0.92 GiB with CUDA_MODULE_LOADING=EAGER, A100 80GB, PyTorch 2.1.1+cu121 (ml-engineering)";

const std::array<Row, 31> kRows{{
    {"A100-40GB", {479 * kMiB, true, kA100Lazy}, {942 * kMiB, true, kA100Eager}},
    {"A100-80GB", {479 * kMiB, true, kA100Lazy}, {942 * kMiB, true, kA100Eager}},
    {"H100-80GB",
     {534 * kMiB, true, "measured: ~534 MiB per primary context on H100, CUDA 12 (torchcomms PR #777)"},
     {kGiB, false, kEagerEstimate}},
    {"H200-141GB",
     {520 * kMiB, true, "measured: ~520 MiB on H200, CUDA 12.9 (Mooncake PR #3973)"},
     {kGiB, false, kEagerEstimate}},
    {"L4",
     {lazy_estimate(58, 1536), false, "estimate: 2 KiB x 58 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-4090",
     {lazy_estimate(128, 1536), false, "estimate: 2 KiB x 128 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"V100-32GB",
     {lazy_estimate(80, 2048), false, "estimate: 2 KiB x 80 SMs x 2048 threads + 50 MiB of kernels"},
     {1343 * kMiB, true,
      "measured: 1343 MiB, V100-SXM2-16GB, CUDA 11.2 (transformers docs, model memory anatomy)"}},
    {"V100-16GB",
     {lazy_estimate(80, 2048), false, "estimate: 2 KiB x 80 SMs x 2048 threads + 50 MiB of kernels"},
     {1343 * kMiB, true,
      "measured: 1343 MiB, V100-SXM2-16GB, CUDA 11.2 (transformers docs, model memory anatomy)"}},
    {"T4",
     {lazy_estimate(40, 1024), false, "estimate: 2 KiB x 40 SMs x 1024 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"L40S",
     {lazy_estimate(142, 1536), false, "estimate: 2 KiB x 142 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"A10G",
     {lazy_estimate(80, 1536), false, "estimate: 2 KiB x 80 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-3090",
     {lazy_estimate(82, 1536), false, "estimate: 2 KiB x 82 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-5090",
     {lazy_estimate(170, 1536), false, "estimate: 2 KiB x 170 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-A6000",
     {lazy_estimate(84, 1536), false, "estimate: 2 KiB x 84 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-6000-Ada",
     {426 * kMiB, true, "measured: 426 MiB, RTX 6000 Ada (unslothai/unsloth-zoo PR #1053)"},
     {kGiB, false, kEagerEstimate}},
    {"H200-NVL",
     {520 * kMiB, false, "estimate: the H200 SXM's measured ~520 MiB (same GH100, CUDA 12.9)"},
     {kGiB, false, kEagerEstimate}},
    {"H20",
     {lazy_estimate(78, 2048), false, "estimate: 2 KiB x 78 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"B200",
     {lazy_estimate(148, 2048), false, "estimate: 2 KiB x 148 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"GB200",
     {lazy_estimate(148, 2048), false, "estimate: 2 KiB x 148 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"H100-PCIe",
     {lazy_estimate(114, 2048), false, "estimate: 2 KiB x 114 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"H100-NVL",
     {534 * kMiB, false, "estimate: the H100 SXM's measured ~534 MiB (same GH100, 132 SMs)"},
     {kGiB, false, kEagerEstimate}},
    {"A100-40GB-PCIe",
     {479 * kMiB, false, "estimate: the A100 SXM4's measured 0.47 GiB (same GA100, 108 SMs; ml-engineering)"},
     {942 * kMiB, false, "estimate: the A100 SXM4's measured 0.92 GiB eager (ml-engineering)"}},
    {"A100-80GB-PCIe",
     {479 * kMiB, false, "estimate: the A100 SXM4's measured 0.47 GiB (same GA100, 108 SMs; ml-engineering)"},
     {942 * kMiB, false, "estimate: the A100 SXM4's measured 0.92 GiB eager (ml-engineering)"}},
    {"L40",
     {lazy_estimate(142, 1536), false, "estimate: 2 KiB x 142 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"A10",
     {lazy_estimate(72, 1536), false, "estimate: 2 KiB x 72 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"RTX-PRO-6000",
     {lazy_estimate(188, 1536), false, "estimate: 2 KiB x 188 SMs x 1536 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"B300",
     {lazy_estimate(148, 2048), false, "estimate: 2 KiB x 148 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"GB300",
     {lazy_estimate(148, 2048), false, "estimate: 2 KiB x 148 SMs x 2048 threads + 50 MiB of kernels"},
     {kGiB, false, kEagerEstimate}},
    {"MI250X-GCD",
     {lazy_estimate(110, 2048), false,
      "estimate, no ROCm measurement: the CUDA formula with 110 CUs x 2048 threads + 50 MiB"},
     {lazy_estimate(110, 2048), false, kRocmEager}},
    {"MI300X",
     {lazy_estimate(304, 2048), false,
      "estimate, no ROCm measurement: the CUDA formula with 304 CUs x 2048 threads + 50 MiB"},
     {lazy_estimate(304, 2048), false, kRocmEager}},
    {"MI325X",
     {lazy_estimate(304, 2048), false,
      "estimate, no ROCm measurement: the CUDA formula with 304 CUs x 2048 threads + 50 MiB"},
     {lazy_estimate(304, 2048), false, kRocmEager}},
}};

}  // namespace

CudaContextFigure cuda_context(std::string_view canonical_gpu, ModuleLoading loading) {
  for (const Row& r : kRows) {
    if (r.gpu == canonical_gpu) {
      return loading == ModuleLoading::kLazy ? r.lazy : r.eager;
    }
  }
  throw InputError(fmt::format("--gpu: no CUDA context figure for '{}'", canonical_gpu));
}

ModuleLoading parse_module_loading(std::string_view text, std::string_view option) {
  if (text == "lazy") {
    return ModuleLoading::kLazy;
  }
  if (text == "eager") {
    return ModuleLoading::kEager;
  }
  throw InputError(fmt::format("{}: unknown value '{}' (known: lazy, eager)", option, text));
}

std::string_view module_loading_name(ModuleLoading loading) {
  return loading == ModuleLoading::kLazy ? "lazy" : "eager";
}

}  // namespace vramsim
