// The GPU table: sane rows, lookups by name / alias / PyTorch device name, dtype fallbacks, errors.
#include <catch2/catch.hpp>

#include <string>

#include "sim/core/error.h"
#include "sim/engine/gpu_table.h"

using namespace vramsim;

TEST_CASE("gpu table: every row is plausible", "[quick][engine]") {
  REQUIRE(gpu_table().size() == 9);
  for (const GpuSpec& gpu : gpu_table()) {
    INFO(gpu.name);
    // The runtime's total is a little below the nominal size: 1-6% goes to ECC and the driver.
    CHECK(gpu.total_memory_bytes < gpu.nominal_memory_bytes);
    CHECK(gpu.total_memory_bytes > gpu.nominal_memory_bytes / 100 * 90);
    CHECK(gpu.memory_bytes_per_s > 100e9);
    CHECK(gpu.launch_overhead_ns > 0);
    for (ComputeDType d : {ComputeDType::kFp32, ComputeDType::kTf32, ComputeDType::kFp16, ComputeDType::kBf16,
                           ComputeDType::kFp8}) {
      CHECK(gpu.peak_flops_per_s(d) >= gpu.fp32_flops_per_s);
    }
    CHECK(find_gpu(gpu.name).name == gpu.name);  // canonical names resolve to themselves
  }
}

TEST_CASE("gpu table: datasheet figures", "[quick][engine]") {
  const GpuSpec& a100 = find_gpu("A100-80GB");
  CHECK(a100.nominal_memory_bytes == 85'899'345'920ULL);  // 81,920 MiB
  CHECK(a100.total_memory_bytes == 85'100'068'864ULL);    // deviceQuery: 81,158 MiB
  CHECK(a100.peak_flops_per_s(ComputeDType::kBf16) == 312e12);
  CHECK(a100.peak_flops_per_s(ComputeDType::kTf32) == 156e12);
  CHECK(a100.memory_bytes_per_s == 2039e9);
  CHECK(find_gpu("A100-40GB").memory_bytes_per_s == 1555e9);
  const GpuSpec& h100 = find_gpu("H100-80GB");
  CHECK(h100.peak_flops_per_s(ComputeDType::kBf16) == Approx(989.4e12));
  CHECK(h100.peak_flops_per_s(ComputeDType::kFp8) == Approx(1978.9e12));
  CHECK(find_gpu("H200-141GB").memory_bytes_per_s == 4.8e12);
  CHECK(find_gpu("H200-141GB").peak_flops_per_s(ComputeDType::kBf16) ==
        h100.peak_flops_per_s(ComputeDType::kBf16));
}

TEST_CASE("gpu table: missing hardware paths fall back", "[quick][engine]") {
  const GpuSpec& v100 = find_gpu("V100-32GB");
  CHECK(v100.peak_flops_per_s(ComputeDType::kTf32) == v100.fp32_flops_per_s);  // no TF32 before Ampere
  CHECK(v100.peak_flops_per_s(ComputeDType::kBf16) == v100.fp32_flops_per_s);  // no BF16 tensor cores
  CHECK(v100.peak_flops_per_s(ComputeDType::kFp8) == 125e12);                  // FP8 upcast to FP16
  const GpuSpec& t4 = find_gpu("T4");
  CHECK(t4.peak_flops_per_s(ComputeDType::kFp16) == 65e12);
  CHECK(t4.peak_flops_per_s(ComputeDType::kBf16) == Approx(8.1e12));
  CHECK(find_gpu("A100-80GB").peak_flops_per_s(ComputeDType::kFp8) == 312e12);  // Ampere has no FP8
}

TEST_CASE("gpu table: lookup is case-insensitive and knows aliases and PyTorch device names",
          "[quick][engine]") {
  CHECK(find_gpu("a100").name == "A100-80GB");
  CHECK(find_gpu("a100-40gb").name == "A100-40GB");
  CHECK(find_gpu("A100 40GB").name == "A100-40GB");
  CHECK(find_gpu("NVIDIA A100-SXM4-80GB").name == "A100-80GB");
  CHECK(find_gpu("NVIDIA A100-SXM4-40GB").name == "A100-40GB");
  CHECK(find_gpu("h100").name == "H100-80GB");
  CHECK(find_gpu("H100-SXM5").name == "H100-80GB");
  CHECK(find_gpu("NVIDIA H100 80GB HBM3").name == "H100-80GB");
  CHECK(find_gpu("NVIDIA H200").name == "H200-141GB");
  CHECK(find_gpu("NVIDIA L4").name == "L4");
  CHECK(find_gpu("l4").name == "L4");
  CHECK(find_gpu("NVIDIA GeForce RTX 4090").name == "RTX-4090");
  CHECK(find_gpu("rtx4090").name == "RTX-4090");
  CHECK(find_gpu("4090").name == "RTX-4090");
  CHECK(find_gpu("v100").name == "V100-16GB");
  CHECK(find_gpu("Tesla V100-SXM2-32GB").name == "V100-32GB");
  CHECK(find_gpu("Tesla T4").name == "T4");
  CHECK(find_gpu("t4").name == "T4");
}

TEST_CASE("gpu table: unknown names are input errors that list the known GPUs", "[quick][engine]") {
  for (const std::string name : {"b200", "", "nvidia", "A100-120GB", "t"}) {
    INFO("'" << name << "'");
    CHECK_THROWS_AS(find_gpu(name), InputError);
  }
  CHECK_THROWS_WITH(find_gpu("B200"), Catch::Contains("--gpu: unknown GPU 'B200'") &&
                                          Catch::Contains("A100-40GB") && Catch::Contains("H200-141GB") &&
                                          Catch::Contains("T4") && Catch::Contains("a100"));
}

TEST_CASE("gpu table: dtype names", "[quick][engine]") {
  CHECK(parse_compute_dtype("bf16") == ComputeDType::kBf16);
  CHECK(parse_compute_dtype("BFloat16") == ComputeDType::kBf16);
  CHECK(parse_compute_dtype("float16") == ComputeDType::kFp16);
  CHECK(parse_compute_dtype("half") == ComputeDType::kFp16);
  CHECK(parse_compute_dtype("FP32") == ComputeDType::kFp32);
  CHECK(parse_compute_dtype("tf32") == ComputeDType::kTf32);
  CHECK(parse_compute_dtype("fp8") == ComputeDType::kFp8);
  for (ComputeDType d : {ComputeDType::kFp32, ComputeDType::kTf32, ComputeDType::kFp16, ComputeDType::kBf16,
                         ComputeDType::kFp8}) {
    CHECK(parse_compute_dtype(compute_dtype_name(d)) == d);
  }
  CHECK_THROWS_WITH(parse_compute_dtype("int8"), Catch::Contains("'int8'") && Catch::Contains("bf16"));
}
