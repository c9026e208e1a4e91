// vramsim-gpu-probe: what one real GPU says about the facts the simulator models.
//
//   * the device: name, compute capability, SMs, total / free memory (cudaMemGetInfo), driver and runtime
//   * the VMM granularity of pinned device memory (cuMemGetAllocationGranularity, minimum and recommended):
//     the page size expandable segments map in
//   * cudaMalloc of 2 MiB, 20 MiB and 1 GiB (the allocator's small-segment size, its large-segment size, and
//   a
//     big one): how much device memory each really takes (the drop in cudaMemGetInfo free), then every byte
//     is written with a pattern and read back
//
// Usage: vramsim-gpu-probe [--json] [--device N]
// Exit status: 0 ok, 1 a CUDA call failed, 2 no CUDA device, 3 memory did not read back what was written,
// 64 bad arguments.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion, not by linking libcuda, so the program
// starts (and says "no CUDA device") on machines without a driver.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/driver_api.h"
#include "kernels/touch_kernels.h"

namespace {

using vramsim::gpu::cu_result_text;
using vramsim::gpu::cuda_error_text;
using vramsim::gpu::CudaError;
using vramsim::gpu::driver_function;

constexpr int kExitCudaError = 1;
constexpr int kExitNoDevice = 2;
constexpr int kExitVerifyFailed = 3;
constexpr int kExitUsage = 64;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kProbeSizes[] = {2 * kMiB, 20 * kMiB, 1024 * kMiB};

struct Options {
  bool json = false;
  int device = 0;
};

struct AllocationProbe {
  std::size_t requested_bytes = 0;
  long long used_delta_bytes = 0;  // drop in cudaMemGetInfo free across the cudaMalloc
  float fill_ms = 0.0f;
  vramsim::gpu::VerifyResult verify;
};

struct Report {
  int device = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  int driver_version = 0;
  int runtime_version = 0;
  std::size_t granularity_minimum = 0;
  std::size_t granularity_recommended = 0;
  std::string granularity_error;  // why the granularity is unknown, "" when known
  std::vector<AllocationProbe> allocations;
  long long used_delta_after_release = 0;  // free at start - free after every probe buffer was freed
};

// A cudaMalloc'ed buffer, freed on scope exit (also when a later CUDA call throws).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : m_bytes(bytes) { SIM_CUDA_CHECK(cudaMalloc(&m_ptr, bytes)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : m_ptr(other.m_ptr), m_bytes(other.m_bytes) {
    other.m_ptr = nullptr;
  }
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (m_ptr != nullptr) {
      cudaFree(m_ptr);
      m_ptr = nullptr;
    }
  }
  void* get() const { return m_ptr; }
  std::size_t bytes() const { return m_bytes; }

 private:
  void* m_ptr = nullptr;
  std::size_t m_bytes = 0;
};

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::string size_text(long long bytes) {
  const double b = static_cast<double>(bytes < 0 ? -bytes : bytes);
  const char* sign = bytes < 0 ? "-" : "";
  char buf[64];
  if (b >= 1024.0 * kMiB) {
    std::snprintf(buf, sizeof(buf), "%s%.2f GiB", sign, b / (1024.0 * kMiB));
  } else if (b >= kMiB) {
    std::snprintf(buf, sizeof(buf), "%s%.2f MiB", sign, b / kMiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%s%.0f bytes", sign, b);
  }
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void probe_granularity(Report& report) {
  const auto get_granularity = driver_function<decltype(&cuMemGetAllocationGranularity)>(
      "cuMemGetAllocationGranularity", report.granularity_error);
  if (get_granularity == nullptr) {
    return;
  }
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = report.device;
  CUresult r = get_granularity(&report.granularity_minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) {
    r = get_granularity(&report.granularity_recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  }
  if (r != CUDA_SUCCESS) {
    report.granularity_error = "cuMemGetAllocationGranularity failed: " + cu_result_text(r);
  }
}

std::size_t free_device_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  SIM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

Report run_probe(int device) {
  Report report;
  report.device = device;
  SIM_CUDA_CHECK(cudaSetDevice(device));
  SIM_CUDA_CHECK(cudaFree(nullptr));  // create the context now, so its memory is not counted below
  cudaDeviceProp prop;
  SIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  report.name = prop.name;
  report.cc_major = prop.major;
  report.cc_minor = prop.minor;
  report.multiprocessors = prop.multiProcessorCount;
  SIM_CUDA_CHECK(cudaDriverGetVersion(&report.driver_version));
  SIM_CUDA_CHECK(cudaRuntimeGetVersion(&report.runtime_version));
  SIM_CUDA_CHECK(cudaMemGetInfo(&report.free_bytes, &report.total_bytes));
  probe_granularity(report);

  // Load the kernels' module before measuring (lazy loading would otherwise allocate during the first touch).
  {
    DeviceBuffer warmup(4096);
    vramsim::gpu::fill_pattern(warmup.get(), warmup.bytes(), 0);
    vramsim::gpu::verify_pattern(warmup.get(), warmup.bytes(), 0);
  }
  SIM_CUDA_CHECK(cudaDeviceSynchronize());

  cudaEvent_t start;
  cudaEvent_t stop;
  SIM_CUDA_CHECK(cudaEventCreate(&start));
  SIM_CUDA_CHECK(cudaEventCreate(&stop));
  const std::size_t free_at_start = free_device_bytes();
  std::vector<DeviceBuffer> buffers;  // kept until the end: each delta is one more allocation on top
  std::uint32_t seed = 1;
  for (const std::size_t bytes : kProbeSizes) {
    AllocationProbe probe;
    probe.requested_bytes = bytes;
    const std::size_t before = free_device_bytes();
    buffers.emplace_back(bytes);
    const std::size_t after = free_device_bytes();
    probe.used_delta_bytes = static_cast<long long>(before) - static_cast<long long>(after);
    SIM_CUDA_CHECK(cudaEventRecord(start));
    vramsim::gpu::fill_pattern(buffers.back().get(), bytes, seed);
    SIM_CUDA_CHECK(cudaEventRecord(stop));
    SIM_CUDA_CHECK(cudaEventSynchronize(stop));
    SIM_CUDA_CHECK(cudaEventElapsedTime(&probe.fill_ms, start, stop));
    probe.verify = vramsim::gpu::verify_pattern(buffers.back().get(), bytes, seed);
    report.allocations.push_back(probe);
    ++seed;
  }
  // The first buffer again, after the others were written: nothing may have aliased it.
  const vramsim::gpu::VerifyResult again =
      vramsim::gpu::verify_pattern(buffers.front().get(), kProbeSizes[0], 1);
  report.allocations.front().verify.mismatches += again.mismatches;
  buffers.clear();
  SIM_CUDA_CHECK(cudaDeviceSynchronize());
  report.used_delta_after_release =
      static_cast<long long>(free_at_start) - static_cast<long long>(free_device_bytes());
  SIM_CUDA_CHECK(cudaEventDestroy(start));
  SIM_CUDA_CHECK(cudaEventDestroy(stop));
  return report;
}

bool all_verified(const Report& r) {
  for (const AllocationProbe& a : r.allocations) {
    if (a.verify.mismatches != 0) {
      return false;
    }
  }
  return true;
}

double gbps(std::size_t bytes, float ms) { return ms > 0.0f ? static_cast<double>(bytes) / (ms * 1e6) : 0.0; }

void print_text(const Report& r) {
  std::printf("device %d: %s (compute capability %d.%d, %d SMs)\n", r.device, r.name.c_str(), r.cc_major,
              r.cc_minor, r.multiprocessors);
  std::printf("  CUDA driver %s, runtime %s\n", version_text(r.driver_version).c_str(),
              version_text(r.runtime_version).c_str());
  std::printf("  memory: total %s (%zu bytes), free %s (%zu bytes)\n", size_text(r.total_bytes).c_str(),
              r.total_bytes, size_text(r.free_bytes).c_str(), r.free_bytes);
  if (r.granularity_error.empty()) {
    std::printf("  VMM granularity, pinned device memory: minimum %s, recommended %s\n",
                size_text(r.granularity_minimum).c_str(), size_text(r.granularity_recommended).c_str());
  } else {
    std::printf("  VMM granularity: unknown (%s)\n", r.granularity_error.c_str());
  }
  for (const AllocationProbe& a : r.allocations) {
    std::printf("  cudaMalloc(%s): device memory used %s%s (%lld bytes); fill %.3f ms (%.1f GB/s); %s\n",
                size_text(static_cast<long long>(a.requested_bytes)).c_str(),
                a.used_delta_bytes >= 0 ? "+" : "", size_text(a.used_delta_bytes).c_str(), a.used_delta_bytes,
                a.fill_ms, gbps(a.requested_bytes, a.fill_ms),
                a.verify.mismatches == 0
                    ? "read back ok"
                    : ("READ BACK FAILED: " + std::to_string(a.verify.mismatches) +
                       " bytes differ, first at offset " + std::to_string(a.verify.first_mismatch))
                          .c_str());
  }
  std::printf("  after cudaFree of all three: device memory used %s%s relative to before them\n",
              r.used_delta_after_release >= 0 ? "+" : "", size_text(r.used_delta_after_release).c_str());
}

void print_json(const Report& r) {
  std::printf("{\n  \"ok\": %s,\n", all_verified(r) ? "true" : "false");
  std::printf(
      "  \"device\": {\"index\": %d, \"name\": %s, \"compute_capability\": \"%d.%d\", "
      "\"multiprocessors\": %d, \"total_bytes\": %zu, \"free_bytes\": %zu},\n",
      r.device, json_string(r.name).c_str(), r.cc_major, r.cc_minor, r.multiprocessors, r.total_bytes,
      r.free_bytes);
  std::printf("  \"driver_version\": \"%s\",\n  \"runtime_version\": \"%s\",\n",
              version_text(r.driver_version).c_str(), version_text(r.runtime_version).c_str());
  if (r.granularity_error.empty()) {
    std::printf("  \"vmm_granularity\": {\"minimum_bytes\": %zu, \"recommended_bytes\": %zu},\n",
                r.granularity_minimum, r.granularity_recommended);
  } else {
    std::printf("  \"vmm_granularity\": {\"error\": %s},\n", json_string(r.granularity_error).c_str());
  }
  std::printf("  \"allocations\": [\n");
  for (std::size_t i = 0; i < r.allocations.size(); ++i) {
    const AllocationProbe& a = r.allocations[i];
    std::printf(
        "    {\"requested_bytes\": %zu, \"used_delta_bytes\": %lld, \"fill_ms\": %.4f, \"fill_gbps\": %.2f, "
        "\"mismatches\": %llu}%s\n",
        a.requested_bytes, a.used_delta_bytes, static_cast<double>(a.fill_ms),
        gbps(a.requested_bytes, a.fill_ms), static_cast<unsigned long long>(a.verify.mismatches),
        i + 1 < r.allocations.size() ? "," : "");
  }
  std::printf("  ],\n  \"used_delta_bytes_after_release\": %lld\n}\n", r.used_delta_after_release);
}

void print_failure(const Options& options, const char* error, const std::string& detail) {
  std::fprintf(stderr, "vramsim-gpu-probe: %s: %s\n", error, detail.c_str());
  if (options.json) {
    std::printf("{\"ok\": false, \"error\": %s, \"detail\": %s}\n", json_string(error).c_str(),
                json_string(detail).c_str());
  }
}

int usage(const char* problem) {
  if (problem != nullptr) {
    std::fprintf(stderr, "vramsim-gpu-probe: %s\n", problem);
  }
  std::fprintf(problem != nullptr ? stderr : stdout,
               "usage: vramsim-gpu-probe [--json] [--device N]\n"
               "Prints the GPU's memory facts the simulator relies on (see kernels/README.md).\n");
  return problem != nullptr ? kExitUsage : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--device" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || v < 0 || v > 1024) {
        return usage("--device expects a device index");
      }
      options.device = static_cast<int>(v);
    } else if (arg == "--help" || arg == "-h") {
      return usage(nullptr);
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    print_failure(options, "no CUDA device",
                  status != cudaSuccess ? "cudaGetDeviceCount failed: " + cuda_error_text(status)
                                        : std::string("cudaGetDeviceCount found 0 devices"));
    return kExitNoDevice;
  }
  if (options.device >= count) {
    print_failure(
        options, "no CUDA device",
        "--device " + std::to_string(options.device) + ": only " + std::to_string(count) + " device(s)");
    return kExitNoDevice;
  }
  try {
    const Report report = run_probe(options.device);
    options.json ? print_json(report) : print_text(report);
    if (!all_verified(report)) {
      std::fprintf(stderr, "vramsim-gpu-probe: device memory did not read back what was written\n");
      return kExitVerifyFailed;
    }
  } catch (const CudaError& e) {
    print_failure(options, "CUDA error", e.what());
    return kExitCudaError;
  }
  return 0;
}
