// The GPUs vramsim can simulate: memory as the CUDA runtime reports it, peak dense FLOP/s per compute
// dtype, memory bandwidth, kernel launch overhead and the CUDA context's footprint. One row per GPU in
// gpu_table.cpp, with the source of every number next to it.
//
// Units: bytes, FLOP/s (dense, i.e. without 2:4 structured sparsity), bytes/s (decimal: 2.039e12 = 2,039 GB/s
// as datasheets write it), nanoseconds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

// The precision an op computes in (what picks the FLOP/s ceiling), not necessarily its storage dtype.
enum class ComputeDType : std::uint8_t { kFp32, kTf32, kFp16, kBf16, kFp8 };

std::string_view compute_dtype_name(ComputeDType dtype);
// "fp32"/"float32", "tf32", "fp16"/"float16"/"half", "bf16"/"bfloat16", "fp8" (case-insensitive).
// Throws InputError naming the accepted spellings otherwise.
ComputeDType parse_compute_dtype(std::string_view text);

struct GpuSpec {
  std::string_view name;       // canonical, e.g. "A100-80GB"
  std::string_view variant;    // form factor and memory type the numbers are for, e.g. "SXM4, HBM2e"
  Bytes nominal_memory_bytes;  // datasheet capacity, "80 GB" read as 80 GiB (the usual HBM/GDDR sizing)
  Bytes total_memory_bytes;    // cudaMemGetInfo's total (what PyTorch calls "total capacity"); < nominal
  double fp32_flops_per_s;     // CUDA cores, non-tensor
  double tf32_flops_per_s;     // tensor cores; 0 = no TF32 (pre-Ampere)
  double fp16_flops_per_s;     // tensor cores, FP32 accumulate
  double bf16_flops_per_s;     // tensor cores, FP32 accumulate; 0 = no BF16 hardware
  double fp8_flops_per_s;      // tensor cores, FP32 accumulate; 0 = no FP8 hardware
  double memory_bytes_per_s;   // peak DRAM bandwidth
  TimeNs launch_overhead_ns;   // per kernel, device-side gap between back-to-back kernels (estimate)
  int compute_capability;      // major * 10 + minor, e.g. 90 for 9.0 (Hopper)
  int sm_count;                // streaming multiprocessors (cudaDeviceProp::multiProcessorCount)
  int max_threads_per_sm;      // cudaDeviceProp::maxThreadsPerMultiProcessor
  double link_bytes_per_s;     // GPU-to-GPU bandwidth per direction within a node (NVLink, else PCIe)

  // Peak dense FLOP/s for `dtype`, with the fallbacks a framework takes when the hardware lacks a path:
  // TF32 -> FP32 (allow_tf32 has no effect), BF16 -> FP32 (no bf16 tensor cores; optimistic for the
  // emulated kernels), FP8 -> FP16 (FP8 is upcast). Always > 0.
  double peak_flops_per_s(ComputeDType dtype) const;

  // FP8 matmuls run here: compute capability 8.9 or more with FP8 tensor cores. PyTorch's torch._scaled_mm
  // (_scaled_mm_allowed_device: CUDA 8.9+ or ROCm MI300+) and Transformer Engine's check_fp8_support refuse
  // the rest.
  bool runs_float8() const { return compute_capability >= 89 && fp8_flops_per_s > 0; }
};

// Every row, in a fixed order (the order --list-gpus prints).
const std::vector<GpuSpec>& gpu_table();

// Case-insensitive lookup by canonical name, alias ("a100", "h100", "4090", ...) or the device name PyTorch
// prints ("NVIDIA A100-SXM4-80GB", "Tesla T4"); punctuation and spaces are ignored. Throws InputError
// listing the known GPUs when nothing matches.
const GpuSpec& find_gpu(std::string_view name);

// "A100-40GB, A100-80GB, ..." for help texts and errors.
std::string known_gpu_names();

}  // namespace vramsim
