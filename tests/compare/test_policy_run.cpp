// One policy over one request sequence: figures by hand from the spec's segment sizes, and the `compare` /
// `sweep` commands end to end.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "run_cli.h"
#include "sim/core/error.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/simulate/policy_run.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

using test::run_cli;

}  // namespace

TEST_CASE("run_policy: two 3 MiB tensors in PyTorch's 20 MiB segment, by hand", "[quick][compare]") {
  // Spec: a large-pool request under 10 MiB gets a kLargeBuffer (20 MiB) segment and is split from it.
  //   alloc A 3 MiB -> segment 20 MiB, A at offset 0; alloc B 3 MiB -> split from the remainder; free A;
  //   alloc C 2 MiB + 1 B -> rounds to 2 MiB + 512, best fit = A's 3 MiB hole; the remainder (1 MiB - 512)
  //   is not > kSmallSize (1 MiB), so should_split says no and C gets the whole 3 MiB block.
  // Peaks: reserved 20 MiB, allocated 6 MiB; fragmentation 1 - 6/20 = 0.7. At the allocated peak (after B)
  // the free bytes are 14 MiB in one block.
  RequestSequence seq;
  const std::size_t a = seq.add_alloc(3 * kMiB, 0);
  seq.add_alloc(3 * kMiB, 0);
  seq.add_free(a);
  seq.add_alloc(2 * kMiB + 1, 0);
  PolicyRunOptions options;
  options.step_ends = {2, 4};
  const PolicyRunResult r = run_policy(find_policy("pytorch"), seq, options);
  CHECK(r.peaks.peak_reserved_bytes == 20 * kMiB);
  CHECK(r.peaks.peak_allocated_bytes == 6 * kMiB);
  CHECK(r.peaks.fragmentation() == Approx(0.7));
  CHECK(r.free_bytes_at_allocated_peak == 14 * kMiB);
  CHECK(r.largest_free_block_at_allocated_peak == 14 * kMiB);
  CHECK(r.num_device_alloc == 1);
  CHECK(r.num_ooms == 0);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].allocated_bytes == 6 * kMiB);
  CHECK(r.steps[1].allocated_bytes == 6 * kMiB);  // B + C's unsplit 3 MiB block
  CHECK(r.steps[1].reserved_bytes == 20 * kMiB);

  // The same requests on a 16 MiB device: every one of them asks for a 20 MiB segment, which never fits, so
  // all three allocations OOM (A's free is skipped).
  options.capacity_bytes = 16 * kMiB;
  const PolicyRunResult small = run_policy(find_policy("pytorch"), seq, options);
  CHECK(small.num_ooms == 3);
  CHECK(small.peaks.peak_reserved_bytes == 0);
  CHECK(small.steps[0].num_ooms == 2);
  CHECK(small.steps[1].num_ooms == 1);
}

TEST_CASE("run_policy: every policy reserves at least the peak live bytes of a real trace",
          "[quick][compare]") {
  // Physical floor, independent of any policy: reserved >= allocated >= the requested bytes alive at once.
  const Snapshot snap = load_snapshot(
      (test::source_dir() / "traces/samples/kkaitlyn111_memory_ctx128_forward.pickle").string());
  const RequestSequence seq = request_sequence_from_trace(snap);
  const Bytes live = peak_live_bytes(seq);
  REQUIRE(live > 0);
  for (const PolicyEntry* p : parse_policy_list("all", "--policies")) {
    INFO(p->name);
    const PolicyRunResult r = run_policy(*p, seq, PolicyRunOptions{});
    CHECK(r.peaks.peak_reserved_bytes >= static_cast<std::int64_t>(live));
    CHECK(r.peaks.peak_allocated_bytes >= static_cast<std::int64_t>(live));
    CHECK(r.free_bytes_at_allocated_peak >= r.largest_free_block_at_allocated_peak);
    CHECK(r.num_ooms == 0);
  }
}

TEST_CASE("parse_policy_list: names, all, unknown and repeated", "[quick][compare]") {
  CHECK(parse_policy_list("all", "--policies").size() == policy_registry().size());
  const auto two = parse_policy_list("no-cache,pytorch", "--policies");
  REQUIRE(two.size() == 2);
  CHECK(two[0]->name == "no-cache");
  CHECK(two[1]->name == "pytorch");
  CHECK_THROWS_WITH(parse_policy_list("pytorch,tlsf", "--policies"),
                    Catch::StartsWith("--policies: unknown policy 'tlsf' (known: pytorch, "));
  CHECK_THROWS_WITH(parse_policy_list("buddy,buddy", "--policies"),
                    "--policies: policy 'buddy' listed twice");
}

TEST_CASE("cli: compare --json on a real trace and on a generated step", "[quick][compare]") {
  const std::string trace = (test::source_dir() / "traces/samples/MAGMA27_memory_snapshot.pickle").string();
  const nlohmann::json j = nlohmann::json::parse(run_cli("compare --json " + trace));
  REQUIRE(j.contains("peak_live_bytes"));
  REQUIRE(j["policies"].size() == policy_registry().size());
  for (const nlohmann::json& row : j["policies"]) {
    for (const char* key : {"policy", "peak_reserved_bytes", "peak_allocated_bytes", "fragmentation",
                            "num_device_alloc", "num_ooms"}) {
      CHECK(row.contains(key));
    }
    CHECK(row["peak_reserved_bytes"].get<std::int64_t>() >= j["peak_live_bytes"].get<std::int64_t>());
  }
  const nlohmann::json g = nlohmann::json::parse(
      run_cli("compare --json --model gpt2 --batch 2 --seq 128 --policies pytorch,no-cache --capacity 4GiB"));
  REQUIRE(g["policies"].size() == 2);
  CHECK(g["policies"][0]["policy"] == "pytorch");
  CHECK(g["capacity_bytes"] == 4 * kGiB);
  // The native policy on the generated step is what `vramsim predict` reports for the same step.
  const nlohmann::json p =
      nlohmann::json::parse(run_cli("predict --json --model gpt2 --batch 2 --seq 128 --capacity 4GiB"));
  CHECK(g["policies"][0]["peak_reserved_bytes"] == p["peak_reserved_bytes"]);
  CHECK(g["policies"][0]["peak_allocated_bytes"] == p["peak_allocated_bytes"]);

  int status = 0;
  CHECK_THAT(run_cli("compare " + trace + " --policies nope", &status),
             Catch::Contains("vramsim: error: --policies: unknown policy 'nope'"));
  CHECK(status == 2);
  CHECK_THAT(run_cli("compare", &status),
             Catch::Contains("vramsim: error: compare: give a trace FILE or --model"));
  CHECK_THAT(run_cli("compare --list-policies"), Catch::Contains("offline-optimal"));
}

TEST_CASE("cli: sweep writes one CSV row per policy and step, and is deterministic", "[quick][compare]") {
  const std::string args =
      "sweep --model gpt2 --batch list:1,2 --seq uniform:32..256 --steps 6 --seed 3 --policies "
      "pytorch,pytorch-expandable --capacity 16GiB";
  const std::string csv1 = "vramsim_test_sweep1.csv";
  const std::string csv2 = "vramsim_test_sweep2.csv";
  const std::string out1 = run_cli(args + " --csv " + csv1);
  const std::string out2 = run_cli(args + " --csv " + csv2);
  const auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::string a = slurp(csv1);
  CHECK(a == slurp(csv2));
  CHECK(out1.substr(0, out1.find("per-step figures")) == out2.substr(0, out2.find("per-step figures")));
  std::remove(csv1.c_str());
  std::remove(csv2.c_str());
  std::istringstream lines(a);
  std::string line;
  int rows = 0;
  std::getline(lines, line);
  CHECK(line.rfind("policy,step,batch,seq,", 0) == 0);
  while (std::getline(lines, line)) {
    ++rows;
  }
  CHECK(rows == 2 * 6);

  const nlohmann::json j = nlohmann::json::parse(run_cli(args + " --json"));
  REQUIRE(j["policies"].size() == 2);
  for (const nlohmann::json& row : j["policies"]) {
    CHECK(row["oom_probability"] == 0.0);
    CHECK(row["reserved_settles_at_step"].get<int>() >= 1);
    CHECK(row["reserved_settles_at_step"].get<int>() <= 6);
  }
  int status = 0;
  CHECK_THAT(run_cli("sweep --model gpt2 --seq uniform:9..3", &status),
             Catch::Contains("vramsim: error: --seq: empty range 9..3"));
  CHECK(status == 2);
}
