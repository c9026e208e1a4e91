// The GPU table: sane rows, lookups by name / alias / PyTorch device name, dtype fallbacks, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "sim/core/error.h"
#include "sim/engine/gpu_table.h"

using namespace vramsim;

TEST_CASE("gpu table: every row is plausible", "[quick][engine]") {
  REQUIRE(gpu_table().size() == 31);
  for (const GpuSpec& gpu : gpu_table()) {
    INFO(gpu.name);
    // The runtime's total is a little below the nominal size: 1-6% goes to ECC and the driver. Rows without
    // a published runtime total carry the marketing size and say so in their variant.
    if (std::string(gpu.variant).find("marketing size") != std::string::npos) {
      CHECK(gpu.total_memory_bytes == gpu.nominal_memory_bytes);
    } else {
      CHECK(gpu.total_memory_bytes < gpu.nominal_memory_bytes);
    }
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
  for (const std::string name : {"b400", "", "nvidia", "A100-120GB", "t"}) {
    INFO("'" << name << "'");
    CHECK_THROWS_AS(find_gpu(name), InputError);
  }
  CHECK_THROWS_WITH(find_gpu("B400"), Catch::Contains("--gpu: unknown GPU 'B400'") &&
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

TEST_CASE("gpu table: the GPUs people rent now (issue 36), data-sheet figures", "[quick][engine]") {
  // memory: nominal sizes from the data sheets, read as GiB
  CHECK(find_gpu("NVIDIA L40S").nominal_memory_bytes == 48 * kGiB);
  CHECK(find_gpu("NVIDIA L40S").memory_bytes_per_s == 864e9);
  CHECK(find_gpu("NVIDIA A10G").total_memory_bytes == 22'723 * kMiB);  // "22.19 GiB total capacity"
  CHECK(find_gpu("NVIDIA GeForce RTX 3090").nominal_memory_bytes == 24 * kGiB);
  CHECK(find_gpu("NVIDIA GeForce RTX 5090").nominal_memory_bytes == 32 * kGiB);
  CHECK(find_gpu("NVIDIA GeForce RTX 5090").compute_capability == 120);
  // Runtime totals as PyTorch's OOM messages print them ("GPU 0 has a total capacity of X GiB", two
  // decimals): L40S 44.42 GiB (stepfun-ai/Step-Video-T2V #8), RTX 3090 23.70 GiB (Lightning-AI/lit-llama
  // #137), RTX 5090 31.37 GiB (Wan-Video/Wan2.1 #465), RTX 6000 Ada 44.43 GiB (DINGYANB/MTVCrafter #21)
  const auto gib2 = [](const char* gpu) {
    return std::llround(static_cast<double>(find_gpu(gpu).total_memory_bytes) / kGiB * 100);
  };
  CHECK(gib2("L40S") == 4442);
  CHECK(gib2("RTX-3090") == 2370);
  CHECK(gib2("RTX-5090") == 3137);
  CHECK(gib2("RTX-6000-Ada") == 4443);
  CHECK(find_gpu("NVIDIA RTX A6000").nominal_memory_bytes == 48 * kGiB);
  CHECK(find_gpu("NVIDIA RTX 6000 Ada Generation").nominal_memory_bytes == 48 * kGiB);
  CHECK(find_gpu("NVIDIA H200 NVL").total_memory_bytes == find_gpu("h200").total_memory_bytes);
  CHECK(find_gpu("NVIDIA H20").nominal_memory_bytes == 96 * kGiB);
  CHECK(find_gpu("NVIDIA B200").nominal_memory_bytes == 180 * kGiB);
  CHECK(find_gpu("NVIDIA B200").peak_flops_per_s(ComputeDType::kBf16) == 2250e12);  // 4.5 PF sparse / 2
  CHECK(find_gpu("GB200").nominal_memory_bytes == 186 * kGiB);                      // 13.4 TB / 72
  CHECK(find_gpu("AMD Instinct MI250X").nominal_memory_bytes == 64 * kGiB);         // one GCD of 128 GB
  CHECK(find_gpu("AMD Instinct MI300X").nominal_memory_bytes == 192 * kGiB);
  CHECK(find_gpu("AMD Instinct MI300X").memory_bytes_per_s == 5300e9);
  CHECK(find_gpu("AMD Instinct MI300X").compute_capability == 94);  // gfx942
  CHECK(find_gpu("mi325x").nominal_memory_bytes == 256 * kGiB);
  CHECK(find_gpu("MI325X").memory_bytes_per_s == 6000e9);
  CHECK(find_gpu("rtx4090").name == "RTX-4090");
  CHECK(find_gpu("l4").name == "L4");
}

TEST_CASE("gpu table: H100 PCIe / NVL, A100 PCIe, L40, A10, RTX PRO 6000, B300 / GB300", "[quick][engine]") {
  // PyTorch device names resolve to the rows (torch.cuda.get_device_name as the issues print them)
  CHECK(find_gpu("NVIDIA H100 PCIe").name == "H100-PCIe");
  CHECK(find_gpu("NVIDIA H100 NVL").name == "H100-NVL");
  CHECK(find_gpu("NVIDIA A100-PCIE-40GB").name == "A100-40GB-PCIe");
  CHECK(find_gpu("NVIDIA A100 80GB PCIe").name == "A100-80GB-PCIe");
  CHECK(find_gpu("NVIDIA L40").name == "L40");
  CHECK(find_gpu("NVIDIA A10").name == "A10");
  CHECK(find_gpu("NVIDIA A10G").name == "A10G");  // not the A10
  CHECK(find_gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").name == "RTX-PRO-6000");
  CHECK(find_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition").name == "RTX-PRO-6000");
  CHECK(find_gpu("NVIDIA B300").name == "B300");
  CHECK(find_gpu("gb300").name == "GB300");
  // Runtime totals as the published messages print them (two decimals): H100 NVL 93.00 GiB
  // (ali-vilab/VACE #56), L40 44.40 GiB (QwenLM/Qwen3-VL #2097), A10 21.99 GiB (zai-org/CogVLM #236),
  // RTX PRO 6000 Blackwell 94.97 GiB (antirez/ds4 #431)
  const auto gib2 = [](const char* gpu) {
    return std::llround(static_cast<double>(find_gpu(gpu).total_memory_bytes) / kGiB * 100);
  };
  CHECK(gib2("H100-NVL") == 9300);
  CHECK(gib2("L40") == 4440);
  CHECK(gib2("A10") == 2199);
  CHECK(gib2("RTX-PRO-6000") == 9497);
  // data sheets: bandwidth and compute capability; the PCIe A100s and H100 share their SXM siblings' chips
  CHECK(find_gpu("H100-PCIe").memory_bytes_per_s == 2000e9);
  // no published PCIe reading: the SXM siblings' runtime totals, said so in the variant
  CHECK(find_gpu("H100-PCIe").total_memory_bytes == find_gpu("H100-80GB").total_memory_bytes);
  CHECK(find_gpu("A100-40GB-PCIe").total_memory_bytes == find_gpu("A100-40GB").total_memory_bytes);
  CHECK_THAT(std::string(find_gpu("H100-PCIe").variant), Catch::Contains("runtime total, est."));
  CHECK(find_gpu("H100-PCIe").compute_capability == 90);
  CHECK(find_gpu("H100-NVL").memory_bytes_per_s == 3900e9);
  CHECK(find_gpu("A100-80GB-PCIe").memory_bytes_per_s == 1935e9);
  CHECK(find_gpu("A100-80GB-PCIe").peak_flops_per_s(ComputeDType::kBf16) ==
        find_gpu("A100-80GB").peak_flops_per_s(ComputeDType::kBf16));
  CHECK(find_gpu("A10").sm_count == 72);
  CHECK(find_gpu("RTX-PRO-6000").compute_capability == 120);
  CHECK(find_gpu("RTX-PRO-6000").nominal_memory_bytes == 96 * kGiB);
  CHECK(find_gpu("B300").compute_capability == 103);
  CHECK(find_gpu("GB300").nominal_memory_bytes == 288 * kGiB);
}
