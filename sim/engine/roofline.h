// Op durations from a roofline over the GPU table: an op is limited either by arithmetic or by DRAM traffic,
// whichever takes longer, plus a fixed launch overhead:
//
//   duration = max(flops / (peak_flops(dtype) * compute_efficiency),
//                  bytes / (bandwidth * memory_efficiency)) + launch_overhead
//
// rounded up to a whole nanosecond. It is an estimate for the timeline's time axis (step time, tokens/s),
// labelled as such in reports; memory results never depend on it.
//
// Note [Default efficiencies] (estimates, to be calibrated against measured step times):
//   compute_efficiency 0.70: large cuBLAS GEMMs reach ~70-85% of dense tensor-core peak on A100/H100, smaller
//     and skinny ones (attention heads, LoRA, small batch) less; 0.70 sits between.
//   memory_efficiency 0.80: elementwise, norm and copy kernels stream at ~80-90% of peak DRAM bandwidth
//     (STREAM-like copies on A100-80GB move ~1.7-1.8 of 2.0 TB/s).
#pragma once

#include <string_view>

#include "sim/core/types.h"
#include "sim/engine/gpu_table.h"

namespace vramsim {

struct RooflineConfig {
  double compute_efficiency = 0.70;  // fraction of peak FLOP/s reached; in (0, 1]
  double memory_efficiency = 0.80;   // fraction of peak bandwidth reached; in (0, 1]
  bool include_launch_overhead = true;
};

// What one kernel does. pre: flops >= 0, bytes >= 0.
struct OpWork {
  double flops = 0;                          // floating-point operations (a multiply-add counts 2)
  double bytes = 0;                          // DRAM bytes read + written
  ComputeDType dtype = ComputeDType::kFp32;  // compute precision: picks the FLOP/s ceiling
};

class Roofline {
 public:
  // Throws InputError if an efficiency is outside (0, 1].
  explicit Roofline(const GpuSpec& gpu, RooflineConfig config = {});
  // `gpu_name` as given to --gpu: resolved through find_gpu() (aliases, case-insensitive).
  static Roofline for_gpu(std::string_view gpu_name, RooflineConfig config = {});

  TimeNs duration_ns(const OpWork& work) const;
  double compute_time_s(const OpWork& work) const;
  double memory_time_s(const OpWork& work) const;
  bool memory_bound(const OpWork& work) const { return memory_time_s(work) > compute_time_s(work); }

  const GpuSpec& gpu() const { return *m_gpu; }
  const RooflineConfig& config() const { return m_config; }

 private:
  const GpuSpec* m_gpu;  // a row of gpu_table() or a caller-owned spec that outlives this object
  RooflineConfig m_config;
};

}  // namespace vramsim
