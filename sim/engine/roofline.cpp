#include "sim/engine/roofline.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {
void check_efficiency(double value, std::string_view what) {
  if (!(value > 0.0 && value <= 1.0)) {  // also rejects NaN
    throw InputError(fmt::format("roofline: {} must be in (0, 1], got {}", what, value));
  }
}
}  // namespace

Roofline::Roofline(const GpuSpec& gpu, RooflineConfig config) : m_gpu(&gpu), m_config(config) {
  check_efficiency(config.compute_efficiency, "compute_efficiency");
  check_efficiency(config.memory_efficiency, "memory_efficiency");
}

Roofline Roofline::for_gpu(std::string_view gpu_name, RooflineConfig config) {
  return Roofline(find_gpu(gpu_name), config);
}

double Roofline::compute_time_s(const OpWork& work) const {
  SIM_ASSERT(work.flops >= 0);
  return work.flops / (m_gpu->peak_flops_per_s(work.dtype) * m_config.compute_efficiency);
}

double Roofline::memory_time_s(const OpWork& work) const {
  SIM_ASSERT(work.bytes >= 0);
  return work.bytes / (m_gpu->memory_bytes_per_s * m_config.memory_efficiency);
}

TimeNs Roofline::duration_ns(const OpWork& work) const {
  const double seconds = std::max(compute_time_s(work), memory_time_s(work));
  // Input, not a bug: --batch and --seq in range can still ask for a kernel of 10^20 FLOPs.
  if (!(std::isfinite(seconds) && seconds < 1e9)) {
    throw InputError(
        fmt::format("{}: an op would run for {:.3g} s, more than the 1e9 s (~30 years) the time "
                    "axis models: lower --batch or --seq",
                    m_gpu->name, seconds));
  }
  const auto body_ns = static_cast<TimeNs>(std::ceil(seconds * 1e9));
  return body_ns + (m_config.include_launch_overhead ? m_gpu->launch_overhead_ns : 0);
}

}  // namespace vramsim
