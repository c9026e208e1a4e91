// `vramsim replay` of traces with private pools and explicit empty_cache events (issue 43). The two samples
// under traces/samples/pools/ are PyTorch tests written as the caching allocator would record them (their
// headers say which and how the block offsets were worked by hand); --check then says whether the model makes
// the same cudaMalloc/cudaFree calls and places every allocation where the recording says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

using namespace vramsim::test;

namespace {

constexpr const char* kHead = "vramsim-trace 1\n";

nlohmann::json replay_json(const std::string& file) {
  const CliRun run = run_vramsim("replay --check --json " + file);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  return nlohmann::json::parse(run.out);
}

}  // namespace

TEST_CASE("issue 43: test_mempool_limited_memory_with_allocator replays identically",
          "[cli][replay][pools]") {
  const nlohmann::json j = replay_json(sample("pools/mempool_use_on_oom.vtrace"));
  CHECK(j["check"]["identical"] == true);
  CHECK(j["check"]["first_divergence"].is_null());
  CHECK(j["check"]["ooms_recorded"] == 2);  // c and d: the test's two assertRaises(OutOfMemoryError)
  CHECK(j["num_ooms"] == 2);
  // a (40 MiB) in pool_do_not_use and b (40 MiB) in pool_use: 80 MiB, all the test allows
  CHECK(j["peak_reserved_bytes"] == 83886080);
  REQUIRE(j["private_pools"].size() == 2);
  CHECK(j["private_pools"][0]["pool_id"] == nlohmann::json::array({0, 1}));
  CHECK(j["private_pools"][0]["released"] == true);  // both MemPools deleted: their emptyCache freed them
  CHECK(j["private_pools"][1]["released"] == true);
  CHECK(j.contains("warnings") == false);  // explicit empty_cache events: nothing to guess
}

TEST_CASE("issue 43: test_graph_memory_stats_and_use_result_after_destroy_graph case 3 replays identically",
          "[cli][replay][pools]") {
  const nlohmann::json j = replay_json(sample("pools/graph_capture.vtrace"));
  CHECK(j["check"]["identical"] == true);
  // a's 20 MiB segment + the holders' 2 MiB small segment + the graph pool's 20 MiB segment
  CHECK(j["peak_reserved_bytes"] == 20971520 + 2097152 + 20971520);
  // a, both 8-byte holders, and at most three 1,049,088-byte tensors of the capture live at once
  CHECK(j["peak_requested_bytes"] == 4 * 1049088 + 16);
  REQUIRE(j["private_pools"].size() == 1);
  CHECK(j["private_pools"][0]["pool_id"] == nlohmann::json::array({1, 0}));
  CHECK(j["private_pools"][0]["use_count"] == 0);  // the graph was deleted
  CHECK(j["private_pools"][0]["segments"] == 1);   // b still lives in it
  CHECK(j["private_pools"][0]["released"] == false);
}

TEST_CASE("issue 43: pool events that PyTorch refuses are one-line errors naming the event",
          "[cli][replay][pools]") {
  struct Bad {
    const char* name;
    std::string body;
    const char* message;
  };
  const Bad cases[] = {
      {"end_without_begin", "0 pool_end 0 1 0 0\n",
       "device_traces[0][0]: pool_end: endAllocatePool: not currently recording to mempool_id (0, 1)"},
      {"begin_twice", "0 pool_begin 0 1 0 0\n0 pool_begin 0 1 0 0\n",
       "device_traces[0][1]: pool_begin: beginAllocateToPool: already recording to mempool_id (0, 1)"},
      {"release_unheld", "0 pool_release 0 3 0 0\n",
       "device_traces[0][0]: pool_release: releasePool: mempool (0, 3) is not held by anyone"},
      {"flag", "0 pool_create 0 1 0 0\n0 pool_use_on_oom 0 1 2 0\n",
       "device_traces[0][1]: pool_use_on_oom: pool_use_on_oom: the stream field holds the flag, 0 or 1; got "
       "2"},
      {"default_pool", "0 pool_create 0 0 0 0\n",
       "device_traces[0][0]: pool_create: createOrIncrefPool: mempool id (0, 0) names the default pools"},
  };
  for (const Bad& c : cases) {
    INFO(c.name);
    const auto file = write_file(std::string("pools_") + c.name + ".vtrace", std::string(kHead) + c.body);
    const CliRun run = run_vramsim("replay " + file.string());
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err.find(file.string() + ": " + c.message) != std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
  // A pool id that is not a number is the reader's error, with its line.
  const auto file = write_file("pools_bad_id.vtrace", std::string(kHead) + "0 pool_begin 0 x 0 0\n");
  const CliRun run = run_vramsim("replay " + file.string());
  CHECK(run.exit_code == 2);
  CHECK(run.err.find(file.string() + ": line 2: bad size \"x\"") != std::string::npos);
}

TEST_CASE(
    "issue 43: a cudaFree burst before an alloc is an OOM retry, with a warning, and empty_cache says "
    "otherwise",
    "[cli][replay][pools]") {
  // A 20 MiB segment is freed by the caller; then a burst of segment_free and a new segment for an alloc.
  const std::string prefix = std::string(kHead) +
                             "0 segment_alloc 0x7f0000000000 20971520 0 0\n"
                             "0 alloc 0x7f0000000000 3145728 0 0\n"
                             "0 free_requested 0x7f0000000000 3145728 0 0\n"
                             "0 free_completed 0x7f0000000000 3145728 0 0\n";
  const std::string tail =
      "0 segment_free 0x7f0000000000 20971520 0 0\n"
      "0 segment_alloc 0x7f0001400000 31457280 0 0\n"
      "0 alloc 0x7f0001400000 31457280 0 0\n";
  const auto implicit = write_file("pools_implicit.vtrace", prefix + tail);
  const CliRun guessed = run_vramsim("replay --check " + implicit.string());
  REQUIRE(guessed.exit_code == 0);
  CHECK(guessed.err.find(
            "vramsim: warning: " + implicit.string() +
            ": 1 burst of segment_free/segment_unmap right before an alloc was read as that alloc's "
            "OOM retry") != std::string::npos);
  CHECK(guessed.out.find("1 alloc retries") != std::string::npos);

  const auto explicit_ec = write_file("pools_explicit.vtrace", prefix + "0 empty_cache 0 0 0 0\n" + tail);
  const CliRun told = run_vramsim("replay --check " + explicit_ec.string());
  REQUIRE(told.exit_code == 0);
  CHECK(told.err.empty());
  CHECK(told.out.find("0 alloc retries") != std::string::npos);  // the cudaFree was empty_cache's
  CHECK(told.out.find("IDENTICAL") != std::string::npos);
}

TEST_CASE("issue 43: pool events survive vtrace -> json -> vtrace", "[cli][replay][pools]") {
  const auto json = scratch("pools_round.json");
  const auto back = scratch("pools_round.vtrace");
  REQUIRE(
      run_vramsim("convert " + sample("pools/mempool_use_on_oom.vtrace") + " " + json.string()).exit_code ==
      0);
  REQUIRE(run_vramsim("convert " + json.string() + " " + back.string()).exit_code == 0);
  const nlohmann::json a = replay_json(sample("pools/mempool_use_on_oom.vtrace"));
  const nlohmann::json b = replay_json(back.string());
  CHECK(a["check"] == b["check"]);
  CHECK(a["private_pools"] == b["private_pools"]);
}
