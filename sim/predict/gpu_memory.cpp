#include "sim/predict/gpu_memory.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/engine/gpu_table.h"

namespace vramsim {

GpuMemory gpu_memory(std::string_view name, const ContextOptions& context) {
  const GpuSpec& g = find_gpu(name);
  const CudaContextFigure figure = cuda_context(g.name, context.module_loading);
  GpuMemory m{
      std::string(g.name), static_cast<std::int64_t>(g.total_memory_bytes),
      static_cast<std::int64_t>(figure.size_bytes), g.compute_capability,
      fmt::format("{} module loading, {}", module_loading_name(context.module_loading), figure.source)};
  if (context.context_bytes) {
    if (*context.context_bytes >= m.total_bytes) {
      throw InputError(fmt::format("--cuda-context: {} bytes is not less than the {} bytes of the {}",
                                   *context.context_bytes, m.total_bytes, m.name));
    }
    m.context_bytes = *context.context_bytes;
    m.context_source = "--cuda-context";
  }
  return m;
}

std::int64_t cublas_workspace_bytes(int compute_capability, std::string_view config) {
  const int major = compute_capability / 10;
  const std::int64_t fallback = major >= 9 && major <= 12 ? std::int64_t{4096} * 8 * 1024
                                                          : std::int64_t{4096} * 1024 * 2 + 16 * 1024 * 8;
  if (config.empty()) {
    return fallback;
  }
  constexpr std::uint64_t kLimit = std::uint64_t{64} << 30;
  std::uint64_t total = 0;
  bool any = false;
  // ":SIZE:COUNT" pairs, as std::regex(":([0-9]+):([0-9]+)") finds them left to right. Numbers saturate at
  // just over the limit, so that any absurd one is reported rather than wrapped.
  const auto number = [&](std::size_t& at) {
    std::uint64_t v = 0;
    const std::size_t from = at;
    while (at < config.size() && config[at] >= '0' && config[at] <= '9') {
      v = std::min<std::uint64_t>(v * 10 + static_cast<std::uint64_t>(config[at++] - '0'), kLimit + 1);
    }
    return at > from ? std::optional<std::uint64_t>(v) : std::nullopt;
  };
  for (std::size_t i = 0; i < config.size(); ++i) {
    if (config[i] != ':') {
      continue;
    }
    std::size_t j = i + 1;
    const std::optional<std::uint64_t> size = number(j);
    if (!size || j >= config.size() || config[j] != ':') {
      continue;
    }
    std::size_t k = j + 1;
    const std::optional<std::uint64_t> count = number(k);
    if (!count) {
      continue;
    }
    if (*size > kLimit / 1024 || *count > kLimit || (*count > 0 && *size * 1024 > kLimit / *count) ||
        total + *size * 1024 * *count > kLimit) {
      throw InputError(
          fmt::format("--cublas-workspace-config: '{}' asks for more than 64 GiB per handle", config));
    }
    total += *size * 1024 * *count;
    any = true;
    i = k - 1;
  }
  return any ? static_cast<std::int64_t>(total) : fallback;
}

GpuMemory device_memory(std::string_view gpu, std::uint64_t capacity_bytes, const ContextOptions& context) {
  if (!gpu.empty()) {
    return gpu_memory(gpu, context);
  }
  if (capacity_bytes == 0) {
    throw InputError("--capacity: must be positive (or name a GPU with --gpu)");
  }
  return {"", static_cast<std::int64_t>(capacity_bytes), 0, 0, ""};
}

double predicted_memory_fraction(std::optional<double> fraction, const GpuMemory& d) {
  if (fraction && *fraction == 0.0) {
    throw InputError(
        fmt::format("--alloc-conf: per_process_memory_fraction 0 leaves nothing of {} bytes: every "
                    "cudaMalloc would be refused",
                    d.total_bytes));
  }
  return fraction.value_or(0.0);
}

std::int64_t allocator_limit_bytes(const GpuMemory& d, double fraction) {
  const std::int64_t capacity = d.total_bytes - d.context_bytes;
  if (!(fraction > 0.0)) {
    return capacity;
  }
  const auto allowed = static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(d.total_bytes)));
  return std::min(capacity, allowed);
}

}  // namespace vramsim
