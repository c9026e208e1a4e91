// `vramsim fit --vary`: a value it does not know is one line on stderr and exit status 2, and the line names
// every question fit answers (sim/cli/fit_command.cpp: batch, seq; vLLM's max-model-len, max-num-seqs,
// gpu-memory-utilization and tp with --kv-cache paged; SGLang's mem-fraction-static), so a user who asked
// for SGLang's question without --serving-engine sglang learns where it is.
#include <catch2/catch.hpp>

#include <string>

#include "cli_test_util.h"

using namespace vramsim::test;

TEST_CASE("fit: an unknown --vary names every question, exit 2", "[quick][cli]") {
  const std::string expected =
      "vramsim: error: --vary: unknown value '{}' (expected batch or seq; max-model-len, max-num-seqs, "
      "gpu-memory-utilization or tp with --kv-cache paged; mem-fraction-static with --serving-engine "
      "sglang)\n";
  const std::string base = "fit --model gpt2 --gpu h100 --seq 64 --vary ";
  for (const std::string value : {"bogus", "-1", "0", "mem-fraction-static", "BATCH"}) {
    INFO(value);
    const CliRun run = run_vramsim(base + "'" + value + "'");
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    std::string line = expected;
    line.replace(line.find("{}"), 2, value);
    CHECK(run.err == line);
  }
}
