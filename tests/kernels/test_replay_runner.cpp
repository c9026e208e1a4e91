// The hardware replay's runner and backends on the fake device (kernels/replay/fake_device.h): the host code
// the GPU runs use, checked against hand-computed device usage.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "kernels/replay/backends.h"
#include "kernels/replay/fake_device.h"
#include "kernels/replay/replay_plan.h"
#include "kernels/replay/replay_runner.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/registry.h"
#include "test_paths.h"
#include "traces/trace_io.h"

namespace {

using vramsim::Bytes;
using vramsim::kMiB;
using vramsim::hw::DirectMallocBackend;
using vramsim::hw::FakeDevice;
using vramsim::hw::ModelBackend;
using vramsim::hw::ReplayPlan;
using vramsim::hw::ReplayRow;
using vramsim::hw::ReplayRunResult;
using vramsim::hw::run_replay;

ReplayPlan plan_of(const std::string& events) {
  return vramsim::hw::build_replay_plan(vramsim::read_vtrace("vramsim-trace 1\n" + events, "hand.vtrace"));
}

ReplayPlan sample_plan(const std::string& name) {
  return vramsim::hw::load_replay_plan((vramsim::test::source_dir() / "traces" / "samples" / name).string());
}

std::unique_ptr<DirectMallocBackend> fake_cuda_malloc(Bytes granularity = 2 * kMiB,
                                                      Bytes capacity = FakeDevice::kUnlimited) {
  return std::make_unique<DirectMallocBackend>("fake", std::make_unique<FakeDevice>(granularity, capacity));
}

std::unique_ptr<ModelBackend> fake_model(const std::string& policy, const std::string& conf = "",
                                         Bytes granularity = 2 * kMiB, const ReplayPlan* plan = nullptr) {
  return std::make_unique<ModelBackend>(
      "fake-model", std::make_unique<FakeDevice>(granularity), policy,
      vramsim::parse_alloc_conf(conf, "test"),
      plan != nullptr ? vramsim::hw::request_sequence(*plan) : vramsim::RequestSequence{});
}

// 1 MiB, 3 MiB and 512 B allocations, the 3 MiB one freed, then 2 MiB.
const char* const kSmallTrace =
    "0 alloc 0x100000 1048576 0 0\n"
    "0 alloc 0x400000 3145728 0 0\n"
    "0 alloc 0x900000 512 0 0\n"
    "0 free_requested 0x400000 3145728 0 0\n"
    "0 free_completed 0x400000 3145728 0 0\n"
    "0 alloc 0xa00000 2097152 0 0\n";

}  // namespace

TEST_CASE("cuda-malloc on a 2 MiB-granular device uses more than the requested bytes, as computed by hand",
          "[quick][hw_replay]") {
  const ReplayPlan plan = plan_of(kSmallTrace);
  auto backend = fake_cuda_malloc();
  const ReplayRunResult r = run_replay(plan, *backend);
  // After each op: requested (= cudaMalloc sizes) and device use (each rounded up to 2 MiB).
  //   alloc 1 MiB     req 1 MiB           use 2 MiB   diff 1 MiB
  //   alloc 3 MiB     req 4 MiB           use 6 MiB   diff 2 MiB
  //   alloc 512 B     req 4 MiB + 512     use 8 MiB   diff 4 MiB - 512
  //   free 3 MiB      req 1 MiB + 512     use 4 MiB   diff 3 MiB - 512
  //   alloc 2 MiB     req 3 MiB + 512     use 6 MiB   diff 3 MiB - 512
  REQUIRE(r.rows.size() == 6);  // every op is a cudaMalloc / cudaFree, plus the final row
  const std::int64_t M = static_cast<std::int64_t>(kMiB);
  const std::int64_t expected_diff[] = {M, 2 * M, 4 * M - 512, 3 * M - 512, 3 * M - 512, 3 * M - 512};
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    CAPTURE(i);
    REQUIRE(r.rows[i].difference_bytes() == expected_diff[i]);
    REQUIRE(r.rows[i].reserved_bytes == r.rows[i].live_requested_bytes);
  }
  REQUIRE(r.peak_in_use_bytes == 8 * M);
  REQUIRE(r.peak_reserved_bytes == 4 * kMiB + 512);
  REQUIRE(r.peak_live_requested_bytes == 4 * kMiB + 512);
  REQUIRE(r.max_abs_difference_bytes == 4 * M - 512);
  REQUIRE(r.max_difference_row.op_index == 2);
  REQUIRE(r.final_row.final);
  REQUIRE(r.final_row.in_use_bytes == 6 * M);
  REQUIRE(r.allocs == 4);
  REQUIRE(r.frees == 1);
  REQUIRE(r.segment_events == 5);
  REQUIRE(r.fake);

  // The same trace on a device that rounds to 512 bytes only: the difference is what that rounding adds.
  auto fine = fake_cuda_malloc(512);
  REQUIRE(run_replay(plan, *fine).max_abs_difference_bytes == 0);
}

TEST_CASE("the model backend's device use equals the policy's reserved bytes at every segment event",
          "[quick][hw_replay]") {
  const std::string conf =
      GENERATE(as<std::string>{}, "", "expandable_segments:True", "max_split_size_mb:64");
  CAPTURE(conf);
  const ReplayPlan plan = sample_plan("kkaitlyn111_memory_ctx128_forward.pickle");
  auto backend = fake_model("pytorch", conf);
  const ReplayRunResult r = run_replay(plan, *backend);
  REQUIRE(r.allocs == plan.allocs);
  REQUIRE(r.frees == plan.frees);
  REQUIRE(r.rows.size() == r.measurements);
  REQUIRE(r.rows.size() > 10);
  for (const ReplayRow& row : r.rows) {
    REQUIRE(row.difference_bytes() == 0);  // true by construction of the fake: both count the same calls
    REQUIRE(row.reserved_bytes >= row.live_requested_bytes);
  }
  REQUIRE(r.peak_reserved_bytes >= plan.peak_live_requested_bytes);
  REQUIRE(r.max_abs_difference_bytes == 0);
}

TEST_CASE("the model backend reports a device that takes more than the policy asked for",
          "[quick][hw_replay]") {
  // One 512-byte tensor: the policy cudaMallocs a 2 MiB small-pool segment. A device that takes 20 MiB per
  // cudaMalloc shows up as an 18 MiB difference; the 2 MiB-granular one as none.
  const ReplayPlan plan = plan_of("0 alloc 0x1000 512 0 0\n");
  auto coarse = fake_model("pytorch", "", 20 * kMiB);
  const ReplayRunResult r = run_replay(plan, *coarse);
  REQUIRE(r.peak_reserved_bytes == 2 * kMiB);
  REQUIRE(r.peak_in_use_bytes == static_cast<std::int64_t>(20 * kMiB));
  REQUIRE(r.max_abs_difference_bytes == static_cast<std::int64_t>(18 * kMiB));
  auto exact = fake_model("pytorch");
  REQUIRE(run_replay(plan, *exact).max_abs_difference_bytes == 0);
}

TEST_CASE("every policy in the registry runs on the fake device", "[quick][hw_replay]") {
  const ReplayPlan plan = plan_of(kSmallTrace);
  for (const auto& entry : vramsim::policy_registry()) {
    CAPTURE(entry.name);
    // Offline planners (offline-optimal) get the plan's request sequence first, as vramsim-replay gives it.
    auto backend = fake_model(std::string(entry.name), "", 2 * kMiB, &plan);
    const ReplayRunResult r = run_replay(plan, *backend);  // every block touched inside backed memory
    REQUIRE(r.allocs == 4);
    REQUIRE(r.frees == 1);
    for (const ReplayRow& row : r.rows) {
      // The fake rounds every device call up to 2 MiB, so it never holds less than the policy thinks (a
      // policy may model a finer driver granularity: no-cache's 512 B below 1 MiB shows up here).
      REQUIRE(row.difference_bytes() >= 0);
    }
  }
}

TEST_CASE("a policy that hands out memory no device call backs is caught before it is written",
          "[quick][hw_replay]") {
  // vmm-stitch maps existing physical chunks at a second address, which IDeviceMemory::map (new physical
  // memory) cannot express: its stitched block lies in reserved, unmapped address space.
  const ReplayPlan plan = plan_of(
      "0 alloc 0x1000000 31457280 0 0\n"
      "0 alloc 0x3000000 31457280 0 0\n"
      "0 alloc 0x5000000 31457280 0 0\n"
      "0 alloc 0x7000000 31457280 0 0\n"
      "0 free_requested 0x1000000 31457280 0 0\n"
      "0 free_completed 0x1000000 31457280 0 0\n"
      "0 free_requested 0x5000000 31457280 0 0\n"
      "0 free_completed 0x5000000 31457280 0 0\n"
      "0 alloc 0x9000000 62914560 0 0\n");
  auto backend = fake_model("vmm-stitch");
  REQUIRE_THROWS_WITH(run_replay(plan, *backend),
                      Catch::Contains("device_traces[0][8]: alloc of 62914560 bytes") &&
                          Catch::Contains("outside every live allocation and mapping"));
}

TEST_CASE("a failing device call is reported with the trace event it served", "[quick][hw_replay]") {
  const ReplayPlan plan = plan_of(kSmallTrace);
  auto small = fake_cuda_malloc(2 * kMiB, 6 * kMiB);  // the 512-byte alloc needs a third 2 MiB page: 8 MiB
  REQUIRE_THROWS_WITH(run_replay(plan, *small),
                      Catch::Contains("hand.vtrace: device_traces[0][2]: alloc of 512 bytes on stream 0") &&
                          Catch::Contains("out of device memory"));
}

TEST_CASE("the fake device checks every call it is given", "[quick][hw_replay]") {
  FakeDevice d;
  const Bytes base = d.reserve(64 * kMiB, vramsim::PoolKind::kLarge, 0);
  REQUIRE(d.map(base, 20 * kMiB));
  REQUIRE(d.map(base + 20 * kMiB, 20 * kMiB));
  REQUIRE(d.mem_in_use_bytes() == static_cast<std::int64_t>(40 * kMiB));
  d.touch(base + 10 * kMiB, 20 * kMiB, 0, 1);  // across the two mappings: they are contiguous
  d.unmap(base + 20 * kMiB, 20 * kMiB);
  REQUIRE(d.mapped_bytes() == 20 * kMiB);
  REQUIRE_THROWS_WITH(d.touch(base + 10 * kMiB, 20 * kMiB, 0, 1), Catch::Contains("outside every live"));
  REQUIRE_THROWS_WITH(d.map(base + 10 * kMiB, 2 * kMiB), Catch::Contains("overlaps mapped pages"));
  REQUIRE_THROWS_WITH(d.release_reservation(base, 64 * kMiB), Catch::Contains("still mapped"));
  d.unmap(base, 20 * kMiB);
  d.release_reservation(base, 64 * kMiB);
  REQUIRE_THROWS_WITH(d.map(base, 2 * kMiB), Catch::Contains("outside every reservation"));

  const auto a = d.malloc(3 * kMiB, vramsim::PoolKind::kLarge, 0);
  REQUIRE(a.has_value());
  REQUIRE(d.mem_in_use_bytes() == static_cast<std::int64_t>(4 * kMiB));
  REQUIRE_THROWS_WITH(d.touch(*a + kMiB, 3 * kMiB, 0, 1), Catch::Contains("outside every live"));
  REQUIRE_THROWS_WITH(d.free(*a + 512, 3 * kMiB), Catch::Contains("not a live allocation"));
  d.free(*a, 3 * kMiB);
  REQUIRE(d.mem_in_use_bytes() == 0);
}
