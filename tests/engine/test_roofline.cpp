// Roofline op durations, checked on hand-computed examples.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/engine/roofline.h"

using namespace vramsim;

TEST_CASE("roofline: a compute-bound GEMM on A100-80GB, by hand", "[quick][engine]") {
  // bf16 GEMM, M = N = K = 4096, default efficiencies (compute 0.83, memory 0.70: Note [Default
  // efficiencies]), launch overhead 4 us.
  //   flops = 2 * 4096^3                       = 137,438,953,472
  //   bytes = 3 matrices * 4096^2 * 2 B        = 100,663,296
  //   compute: 137,438,953,472 / (312e12 * 0.83 = 258.96e12 FLOP/s)  = 530,734.30 ns
  //   memory:  100,663,296     / (2039e9 * 0.70 = 1427.3e9 B/s)      =  70,527.08 ns
  //   duration = ceil(530,734.30) + 4,000 = 534,735 ns (compute-bound)
  const Roofline roofline = Roofline::for_gpu("a100");
  const OpWork gemm{2.0 * 4096 * 4096 * 4096, 3.0 * 4096 * 4096 * 2, ComputeDType::kBf16};
  CHECK(roofline.compute_time_s(gemm) == Approx(530'734.30e-9).epsilon(1e-7));
  CHECK(roofline.memory_time_s(gemm) == Approx(70'527.08e-9).epsilon(1e-7));
  CHECK_FALSE(roofline.memory_bound(gemm));
  CHECK(roofline.duration_ns(gemm) == 534'735);
}

TEST_CASE("roofline: a memory-bound elementwise add on A100-80GB, by hand", "[quick][engine]") {
  // c = a + b over 2^28 bf16 elements: 2 reads + 1 write of 2 B each, one FLOP per element.
  //   bytes = 3 * 2 * 2^28 = 1,610,612,736   -> / 1427.3e9 B/s = 1,128,433.22 ns
  //   flops = 2^28 = 268,435,456             -> / 258.96e12    =     1,036.59 ns
  //   duration = ceil(1,128,433.22) + 4,000 = 1,132,434 ns (memory-bound)
  const Roofline roofline = Roofline::for_gpu("A100-80GB");
  const OpWork add{268'435'456.0, 1'610'612'736.0, ComputeDType::kBf16};
  CHECK(roofline.memory_bound(add));
  CHECK(roofline.duration_ns(add) == 1'132'434);
}

TEST_CASE("roofline: dtype, efficiency and launch-overhead knobs", "[quick][engine]") {
  const OpWork gemm{2.0 * 4096 * 4096 * 4096, 0, ComputeDType::kFp8};
  // H100 at 100% efficiency, FP8 dense 1978.9e12: 137,438,953,472 / 1978.9e12 = 69,452.20 ns -> 69,453.
  RooflineConfig ideal;
  ideal.compute_efficiency = 1.0;
  ideal.memory_efficiency = 1.0;
  ideal.include_launch_overhead = false;
  CHECK(Roofline::for_gpu("h100", ideal).duration_ns(gemm) == 69'453);
  // An empty op costs exactly the launch overhead.
  CHECK(Roofline::for_gpu("t4").duration_ns(OpWork{}) == find_gpu("t4").launch_overhead_ns);
  CHECK(Roofline::for_gpu("t4", ideal).duration_ns(OpWork{}) == 0);
  // FP32 on a GPU without TF32 runs at the CUDA-core rate whatever the requested dtype says.
  const OpWork tf32{1e12, 0, ComputeDType::kTf32};
  const OpWork fp32{1e12, 0, ComputeDType::kFp32};
  CHECK(Roofline::for_gpu("v100").duration_ns(tf32) == Roofline::for_gpu("v100").duration_ns(fp32));
  CHECK(Roofline::for_gpu("a100").duration_ns(tf32) < Roofline::for_gpu("a100").duration_ns(fp32));
}

TEST_CASE("roofline: bad configuration and unknown GPUs are input errors", "[quick][engine]") {
  RooflineConfig bad;
  bad.compute_efficiency = 0.0;
  CHECK_THROWS_AS(Roofline::for_gpu("a100", bad), InputError);
  bad.compute_efficiency = 1.5;
  CHECK_THROWS_WITH(Roofline::for_gpu("a100", bad), Catch::Contains("compute_efficiency"));
  RooflineConfig bad_memory;
  bad_memory.memory_efficiency = -0.1;
  CHECK_THROWS_WITH(Roofline::for_gpu("a100", bad_memory), Catch::Contains("memory_efficiency"));
  CHECK_THROWS_AS(Roofline::for_gpu("mi355x"), InputError);
}
