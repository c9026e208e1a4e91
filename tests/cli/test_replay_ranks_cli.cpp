// `vramsim replay rank0 rank1 ...` (or a folder): every rank of one job, and the maximum over them (issue
// 43), on traces written here by hand. Expected peaks by hand from the caching allocator's rules
// (spec/pytorch-caching-allocator.md; CUDACachingAllocator.cpp round_size and get_allocation_size): a request
// is rounded up to a multiple of 512; up to 1 MiB it comes from a 2 MiB small-pool segment, from 1 MiB to 10
// MiB from a 20 MiB large-pool segment.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

using namespace vramsim::test;
namespace fs = std::filesystem;

namespace {

// 1,000,000 B: rounded to 1,954 x 512 = 1,000,448 B allocated, one 2,097,152 B segment.
constexpr const char* kSmall =
    "vramsim-trace 1\n"
    "0 segment_alloc 0x7f0000000000 2097152 0 1000\n"
    "0 alloc 0x7f0000000000 1000000 0 2000\n"
    "0 free_requested 0x7f0000000000 1000000 0 3000\n"
    "0 free_completed 0x7f0000000000 1000000 0 3000\n";
// 3 MiB = 3,145,728 B (a multiple of 512): one 20 MiB = 20,971,520 B segment.
constexpr const char* kLarge =
    "vramsim-trace 1\n"
    "0 segment_alloc 0x7f0000000000 20971520 0 1000\n"
    "0 alloc 0x7f0000000000 3145728 0 2000\n";

}  // namespace

TEST_CASE("issue 43: replay of every rank of a job, and the maximum over ranks", "[cli][replay]") {
  const fs::path dir = scratch("ranks");
  fs::remove_all(dir);
  fs::create_directories(dir);
  // rank10 after rank2: a folder's files in natural order
  std::ofstream(dir / "rank2.vtrace") << kSmall;
  std::ofstream(dir / "rank10.vtrace") << kLarge;
  std::ofstream(dir / "notes.txt") << "not a trace";

  const CliRun folder = run_vramsim("replay " + dir.string() + " --json");
  REQUIRE(folder.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(folder.out);
  REQUIRE(j.at("ranks").size() == 2);
  CHECK(j["ranks"][0]["file"] == (dir / "rank2.vtrace").string());
  CHECK(j["ranks"][0]["peak_allocated_bytes"] == 1000448);
  CHECK(j["ranks"][0]["peak_reserved_bytes"] == 2097152);
  CHECK(j["ranks"][1]["file"] == (dir / "rank10.vtrace").string());
  CHECK(j["ranks"][1]["peak_allocated_bytes"] == 3145728);
  CHECK(j["ranks"][1]["peak_reserved_bytes"] == 20971520);
  CHECK(j["max"]["peak_reserved_bytes"] == 20971520);
  CHECK(j["max"]["peak_reserved_rank"] == 1);
  CHECK(j["max"]["peak_allocated_rank"] == 1);

  // the same files named one by one, in the order given; each rank as its own replay reports it
  const CliRun listed = run_vramsim("replay " + (dir / "rank10.vtrace").string() + " " +
                                    (dir / "rank2.vtrace").string() + " --json");
  const nlohmann::json k = nlohmann::json::parse(listed.out);
  CHECK(k["max"]["peak_reserved_rank"] == 0);
  const CliRun alone = run_vramsim("replay " + (dir / "rank10.vtrace").string() + " --json");
  nlohmann::json one = nlohmann::json::parse(alone.out);
  nlohmann::json as_rank = k["ranks"][0];
  as_rank.erase("rank");
  CHECK(as_rank == one);

  const CliRun text = run_vramsim("replay " + dir.string() + " --check");
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("max over 2 ranks: allocated 3.00 MiB (rank 1), reserved 20.00 MiB (rank 1)") !=
        std::string::npos);
  CHECK(text.out.find("identical") != std::string::npos);

  // what needs one file, and an empty folder: one line, exit 2
  const CliRun html = run_vramsim("replay " + dir.string() + " --html x.html");
  CHECK(html.exit_code == 2);
  CHECK(html.err == "vramsim: error: --html: one file only (replay the rank's file alone)\n");
  fs::create_directories(dir / "empty");
  const CliRun empty = run_vramsim("replay " + (dir / "empty").string());
  CHECK(empty.exit_code == 2);
  CHECK(empty.err == "vramsim: error: " + (dir / "empty").string() +
                         ": a folder with no .pickle, .json or .vtrace file\n");
}

TEST_CASE("issue 43: compare over every rank of a job gives each policy's largest peak and its rank",
          "[cli][compare]") {
  const fs::path dir = scratch("compare_ranks");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "rank0.vtrace") << kSmall;
  std::ofstream(dir / "rank1.vtrace") << kLarge;

  const CliRun run = run_vramsim("compare " + dir.string() + " --policies pytorch --json");
  REQUIRE(run.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(run.out);
  REQUIRE(j.at("ranks").size() == 2);
  CHECK(j["ranks"][0]["file"] == (dir / "rank0.vtrace").string());
  // The caching allocator on each rank alone (header comment): 2 MiB and 20 MiB reserved.
  CHECK(j["ranks"][0]["policies"][0]["peak_reserved_bytes"] == 2097152);
  CHECK(j["ranks"][1]["policies"][0]["peak_reserved_bytes"] == 20971520);
  REQUIRE(j.at("max").size() == 1);
  CHECK(j["max"][0]["policy"] == "pytorch");
  CHECK(j["max"][0]["peak_reserved_bytes"] == 20971520);
  CHECK(j["max"][0]["peak_reserved_rank"] == 1);
  CHECK(j["max"][0]["peak_allocated_bytes"] == 3145728);
  CHECK(j["max"][0]["peak_allocated_rank"] == 1);

  // Each rank's row is what `compare FILE` reports for it alone.
  const CliRun alone =
      run_vramsim("compare " + (dir / "rank1.vtrace").string() + " --policies pytorch --json");
  REQUIRE(alone.exit_code == 0);
  CHECK(nlohmann::json::parse(alone.out)["policies"][0] == j["ranks"][1]["policies"][0]);

  const CliRun html = run_vramsim("compare " + dir.string() + " --html x.html");
  CHECK(html.exit_code == 2);
  CHECK(html.err == "vramsim: error: --html: one file only (compare the rank's file alone)\n");
}

TEST_CASE("replay reports a recording's annotations and where the reserved peak falls among them",
          "[cli][replay]") {
  // A 4 MiB request in a 20 MiB segment at t=1000 ns (the reserved peak: nothing later grows it), inside
  // record_function "outer" > "inner" (opened at 900 and 950; "done" closed before); user_metadata "step 1"
  // in force; one annotate entry; compile_context on one event (a compiled frame's "0/0"; "N/A", what
  // PyTorch writes outside torch.compile, is not counted).
  const fs::path dir = scratch("annotations");
  fs::create_directories(dir);
  std::ofstream(dir / "a.vtrace") << "vramsim-trace 1\n"
                                     "0 segment_alloc 0x7f0000000000 20971520 0 1000 meta=step%201\n"
                                     "0 alloc 0x7f0000000000 4194304 0 1000 meta=step%201 ctx=0/0\n"
                                     "0 annotate 0x7f0000000000 4194304 0 1100 meta=kept\n"
                                     "0 free_requested 0x7f0000000000 4194304 0 1200 meta=step%202\n"
                                     "0 free_completed 0x7f0000000000 4194304 0 1200\n"
                                     "annotation 0 800 name=done stage=START\n"
                                     "annotation 0 850 name=done stage=END\n"
                                     "annotation 0 900 name=outer stage=START\n"
                                     "annotation 0 950 name=inner stage=START\n"
                                     "annotation 0 1150 name=inner stage=END\n";
  const CliRun json_run = run_vramsim("replay " + (dir / "a.vtrace").string() + " --json");
  REQUIRE(json_run.exit_code == 0);
  const nlohmann::json n = nlohmann::json::parse(json_run.out).at("annotations");
  CHECK(n["record_function_marks"] == 5);
  CHECK(n["annotate_entries"] == 1);
  CHECK(n["events_with_user_metadata"] == 3);
  CHECK(n["distinct_user_metadata"] == 3);  // "step 1", "step 2", "kept"
  CHECK(n["events_with_compile_context"] == 1);
  CHECK(n["open_ranges_at_reserved_peak"] == nlohmann::json::array({"outer", "inner"}));
  CHECK(n["user_metadata_at_reserved_peak"] == "step 1");

  const CliRun text = run_vramsim("replay " + (dir / "a.vtrace").string());
  CHECK(
      text.out.find("annotations      5 record_function marks, 1 annotate entries, user_metadata on 3 events "
                    "(3 distinct), compile_context on 1; at the reserved peak inside \"outer\" > \"inner\", "
                    "user_metadata \"step 1\"\n") != std::string::npos);
  // --html: the same in an Annotations section, with every annotate entry.
  const fs::path page = dir / "a.html";
  REQUIRE(run_vramsim("replay " + (dir / "a.vtrace").string() + " --html " + page.string()).exit_code == 0);
  std::ifstream in(page);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(html.find("<h2>Annotations</h2>") != std::string::npos);
  CHECK(html.find("<td>outer &gt; inner</td>") != std::string::npos);
  CHECK(html.find("<tr><td>2</td><td>0x7f0000000000</td><td>kept</td></tr>") != std::string::npos);
  // A recording without any: no line.
  std::ofstream(dir / "plain.vtrace") << kSmall;
  CHECK(run_vramsim("replay " + (dir / "plain.vtrace").string()).out.find("\nannotations ") ==
        std::string::npos);
}
