// vramsim-replay's command line (kernels/replay/replay_cli.h), run in-process: option errors, trace errors,
// the no-GPU answer, and the fake backends' report.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "kernels/replay/replay_cli.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CliRun run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "vramsim-replay");
  std::vector<const char*> argv;
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  std::ostringstream out;
  std::ostringstream err;
  CliRun r;
  r.exit_code = vramsim::hw::replay_main(static_cast<int>(argv.size()), argv.data(), out, err,
                                         vramsim::hw::no_cuda_hooks());
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string sample(const std::string& name) {
  return (vramsim::test::source_dir() / "traces" / "samples" / name).string();
}

std::string write_trace(const std::string& name, const std::string& body) {
  const fs::path dir = fs::temp_directory_path() / ("vramsim_hw_cli_tests." + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << body;
  return p.string();
}

}  // namespace

TEST_CASE("vramsim-replay rejects bad options with one line and exit 64", "[quick][hw_replay]") {
  const std::string trace = sample("MAGMA27_memory_snapshot.pickle");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{trace, "--backend", "cudamalloc"}, "--backend: unknown backend 'cudamalloc' (known: cuda-malloc, "},
      {{trace, "--backend", "cuda-malloc", "--policy", "pytorch"}, "backend cuda-malloc has no policy"},
      {{trace, "--backend", "fake", "--alloc-conf", "expandable_segments:True"},
       "backend fake has no policy"},
      {{trace, "--backend", "fake-model", "--policy", "nope"}, "unknown policy 'nope'"},
      {{trace, "--backend", "fake-model", "--alloc-conf", "max_split_size_mb:2"}, "--alloc-conf"},
      {{trace, "--backend", "fake", "--no-rows"}, "--no-rows: only with --json"},
      {{trace, "--device", "-1"}, "--device"},
      {{trace, "--frobnicate"}, "--frobnicate"},
      {{}, "TRACE is required"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const CliRun r = run_cli(c.args);
    REQUIRE(r.exit_code == vramsim::hw::kExitUsage);
    REQUIRE_THAT(r.err, Catch::StartsWith("vramsim-replay: ") && Catch::Contains(c.message));
    REQUIRE(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    REQUIRE(r.out.empty());
  }
}

TEST_CASE("vramsim-replay reports unreadable and contradictory traces with exit 65", "[quick][hw_replay]") {
  const CliRun missing = run_cli({"/nonexistent/trace.pickle", "--backend", "fake"});
  REQUIRE(missing.exit_code == vramsim::hw::kExitBadTrace);
  REQUIRE_THAT(missing.err, Catch::Contains("/nonexistent/trace.pickle"));

  const std::string bad = write_trace("bad.vtrace",
                                      "vramsim-trace 1\n"
                                      "0 alloc 0x1000 100 0 0\n"
                                      "0 free_requested 0x2000 100 0 0\n");
  const CliRun r = run_cli({bad, "--backend", "fake"});
  REQUIRE(r.exit_code == vramsim::hw::kExitBadTrace);
  REQUIRE_THAT(r.err, Catch::Contains("bad.vtrace: device_traces[0][1]: free_requested of 0x2000, which was "
                                      "never allocated"));
}

TEST_CASE("vramsim-replay without a GPU says so in one line and exits 2", "[quick][hw_replay]") {
  const std::string backend = GENERATE(as<std::string>{}, "cuda-malloc", "async-pool", "model");
  const CliRun r = run_cli({sample("MAGMA27_memory_snapshot.pickle"), "--backend", backend});
  REQUIRE(r.exit_code == vramsim::hw::kExitNoDevice);
  REQUIRE_THAT(r.err, Catch::StartsWith("vramsim-replay: no CUDA device: "));
  REQUIRE(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("vramsim-replay --backend fake labels its report FAKE", "[quick][hw_replay]") {
  const CliRun text = run_cli({sample("MAGMA27_memory_snapshot.pickle"), "--backend", "fake"});
  REQUIRE(text.exit_code == 0);
  REQUIRE_THAT(text.out, Catch::Contains("FAKE: no GPU was used"));
  REQUIRE_THAT(text.out, Catch::Contains("1721 allocs, 1719 frees"));
  REQUIRE_THAT(text.out, Catch::Contains("2 frees of blocks from before the trace"));

  const CliRun json = run_cli(
      {sample("kkaitlyn111_memory_ctx128_forward.pickle"), "--backend", "fake-model", "--json", "--verify"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["fake"] == true);
  REQUIRE(j["backend"] == "fake-model");
  REQUIRE(j["policy"] == "pytorch");
  REQUIRE(j["alloc_conf_origin"] == "recorded allocator_settings");
  REQUIRE(j["plan"]["allocs"] == 2058);
  REQUIRE(j["events_replayed"] == 2058 + 1155);
  REQUIRE(j["max_abs_difference_bytes"] == 0);
  REQUIRE(j["rows"].size() == j["measurements"]);
  REQUIRE(j["rows"].back()["kind"] == "end");
  REQUIRE(j["verify"]["allocations"] == 1155);
  REQUIRE(j["peak_measured_in_use_bytes"] == j["peak_model_reserved_bytes"]);

  const CliRun no_rows =
      run_cli({sample("MAGMA27_memory_snapshot.pickle"), "--backend", "fake", "--json", "--no-rows"});
  REQUIRE(no_rows.exit_code == 0);
  REQUIRE_FALSE(nlohmann::json::parse(no_rows.out).contains("rows"));
}

TEST_CASE("vramsim-replay --help lists the backends and policies", "[quick][hw_replay]") {
  const CliRun r = run_cli({"--help"});
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("async-pool") && Catch::Contains("fake-model") &&
                          Catch::Contains("pytorch-expandable"));
}
