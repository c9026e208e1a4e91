// Op durations from a roofline over the GPU table: an op is limited either by arithmetic or by DRAM traffic,
// whichever takes longer, plus a fixed launch overhead:
//
//   duration = max(flops / (peak_flops(dtype) * compute_efficiency),
//                  bytes / (bandwidth * memory_efficiency)) + launch_overhead
//
// rounded up to a whole nanosecond. It is an estimate for the timeline's time axis (step time, tokens/s),
// labelled as such in reports; memory results never depend on it.
//
// Note [Default efficiencies] (calibrated on public training throughput; docs/time-model.md):
//   compute_efficiency 0.83 and memory_efficiency 0.70 minimise the squared log error of predicted tokens/s
//   per GPU over the four "fit" rows of tests/data/throughput/measurements.json: torchtitan's Llama 2 13B
//   and 70B runs with FSDP2 on 64 A100 80GB (docs/performance.md: 13B batch 2 without checkpointing 2,162
//   WPS, with selective op checkpointing 1,904; 70B batch 1 selective op 355, batch 2 full 353). The search
//   (tools/calibrate_clock.py) is a grid, C by 0.01 and M by 0.05, every point predicted by vramsim itself;
//   the fit rows end within 2.6 %. On the rows it did not see, the largest error is 15.7 % on the A100 the
//   table describes (torchtitan's Llama 3 8B and 70B within 2 %; Megatron's GPT 1.7B-18.4B of Narayanan et
//   al. 2021 Table 1, 10-16 % under) and +37 % on torchtitan's 500 W, 96 GB H100, a slower part than the
//   table's H100 SXM5. The kernel launch gap (gpu_table.cpp) and the host's time per op (--host-op-us) are
//   not calibrated: these runs are device-bound, so they do not constrain them.
//   Before the calibration the defaults were estimates, 0.70 and 0.80: 5.6-10.8 % under on the fit rows.
#pragma once

#include <string_view>

#include "sim/core/types.h"
#include "sim/engine/gpu_table.h"

namespace vramsim {

struct RooflineConfig {
  double compute_efficiency = 0.83;  // fraction of peak FLOP/s reached; in (0, 1]
  double memory_efficiency = 0.70;   // fraction of peak bandwidth reached; in (0, 1]
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
