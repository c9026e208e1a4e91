// `sweep --shard K/N` on N machines and `vramsim merge` of the parts give the single-machine output byte for
// byte (text, JSON and the per-step CSV); shards that do not belong together are one-line errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace vramsim {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("cli: sweep --shard and merge reproduce the single run byte for byte", "[compare]") {
  // Five policies over three shards: shard 1 runs policies 0 and 3, shard 2 runs 1 and 4, shard 3 runs 2.
  const std::string base =
      "sweep --model gpt2 --capacity 8GiB --seq uniform:64..192 --batch 2 --steps 4 --seed 7 "
      "--policies pytorch,pytorch-expandable,no-cache,buddy,offline-optimal";
  int status = -1;
  const std::string single_text = test::run_cli(base, &status);
  REQUIRE(status == 0);
  const std::string single_json = test::run_cli(base + " --json", &status);
  (void)test::run_cli(base + " --csv vramsim_test_sweep_single.csv", &status);
  REQUIRE(status == 0);
  std::vector<std::string> files;
  for (int k = 1; k <= 3; ++k) {
    const std::string file = "vramsim_test_sweep_shard_" + std::to_string(k) + ".json";
    std::ofstream(file) << test::run_cli(base + " --shard " + std::to_string(k) + "/3", &status);
    CHECK(status == 0);
    files.push_back(file);
  }
  CHECK(test::run_cli("merge " + files[2] + " " + files[0] + " " + files[1], &status) == single_text);
  CHECK(status == 0);
  CHECK(test::run_cli("merge --json " + files[1] + " " + files[2] + " " + files[0], &status) == single_json);
  (void)test::run_cli(
      "merge --csv vramsim_test_sweep_merged.csv " + files[0] + " " + files[1] + " " + files[2], &status);
  CHECK(status == 0);
  const std::string single_csv = read("vramsim_test_sweep_single.csv");
  CHECK(single_csv.size() > 100);  // a header and 5 policies x 4 steps of rows
  CHECK(read("vramsim_test_sweep_merged.csv") == single_csv);

  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1], &status),
             Catch::Contains("vramsim: error: merge: shard 3 of 3 is missing"));
  CHECK(status == 2);
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[0] + " " + files[1] + " " + files[2], &status),
             Catch::Contains("shard 1 of 3 given twice"));
  const std::string other = "vramsim_test_sweep_shard_other.json";
  std::string reseeded = base;
  reseeded.replace(reseeded.find("--seed 7"), 8, "--seed 8");  // other shapes: another sweep
  std::ofstream(other) << test::run_cli(reseeded + " --shard 3/3");
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1] + " " + other, &status),
             Catch::Contains("a shard of another sweep"));
  CHECK(status == 2);
  // A part that leaves out one of its policies (shard 3 runs policy 2 only).
  const std::string emptied = "vramsim_test_sweep_shard_emptied.json";
  {
    nlohmann::json j = nlohmann::json::parse(read(files[2]));
    j["results"] = nlohmann::json::array();
    std::ofstream(emptied) << j.dump();
  }
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1] + " " + emptied, &status),
             Catch::Contains("vramsim: error: merge: policy 3 of 5 is in no shard"));
  CHECK(status == 2);
  files.push_back(emptied);
  CHECK_THAT(test::run_cli(base + " --shard 4/3", &status), Catch::Contains("--shard: '4/3' is not K/N"));
  CHECK(status == 2);
  files.push_back(other);
  files.emplace_back("vramsim_test_sweep_single.csv");
  files.emplace_back("vramsim_test_sweep_merged.csv");
  for (const std::string& f : files) {
    std::remove(f.c_str());
  }
}

}  // namespace
}  // namespace vramsim
