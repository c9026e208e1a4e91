// The mixture-of-experts flags' bad values (sim/parallel/expert_parallel.cpp, request_args.cpp): one line
// naming the flag, its value and the accepted range, exit status 2. --moe-imbalance accepts 1..1e6 (the
// busiest expert's tokens over the mean): NaN, infinities and values past 1e6 were once reported as "not
// >= 1", which they are.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_util.h"

using namespace vramsim::test;

TEST_CASE("moe flags: bad values are one line and exit 2", "[quick][cli]") {
  const std::string base = "predict --model mixtral-8x7b --gpu h100 --batch 1 --seq 128 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--moe-imbalance -1", "--moe-imbalance: -1 is not in 1..1e6"},
      {"--moe-imbalance 0.5", "--moe-imbalance: 0.5 is not in 1..1e6"},
      {"--moe-imbalance nan", "--moe-imbalance: nan is not in 1..1e6"},
      {"--moe-imbalance inf", "--moe-imbalance: inf is not in 1..1e6"},
      {"--moe-imbalance 2e6", "--moe-imbalance: 2000000 is not in 1..1e6"},
      {"--ep 0", "--ep: 0 is not in 1..1024"},
      {"--ep -4", "--ep: -4 is not in 1..1024"},
      {"--ep abc", "--ep: 'abc' is not a whole number"},
      {"--moe-impl deepspeed",
       "--moe-impl: unknown value 'deepspeed' (known: transformers, megatron, torchtitan)"},
      {"--loss torchtitan",
       "--loss: unknown value 'torchtitan' (known: ce, ce-shift-logits, chunked-ce, torchtitan-chunked-ce)"},
      {"--fsdp2-last-layer KEEP", "--fsdp2-last-layer: unknown value 'KEEP' (known: reshard, keep)"},
      {"--moe-impl megatron --tp 2 --sequence-parallel --expert-tensor-parallel 0",
       "--expert-tensor-parallel: 0 is not in 1..1024"},
      {"--moe-impl megatron --tp 2 --sequence-parallel --expert-tensor-parallel 3",
       "--expert-tensor-parallel 3: does not divide the experts' 14336 hidden units"},
      {"--tp 2 --expert-tensor-parallel 2", "--expert-tensor-parallel: Megatron-Core's"},
      {"--moe-impl megatron --tp 2", "--moe-impl megatron: with --tp: Megatron raises \"During training"},
      {"--gpus 4 --tp 2 --ep 2",
       "--ep 2 (Megatron-Core's MoE layer): with --tp: Megatron raises \"When using "
       "expert parallelism and tensor parallelism, sequence parallelism must be used\""},
      {"--tp 2 --sequence-parallel --ep 2",
       "--ep 2: does not apply to 2 rank(s) per pipeline stage (--tp 2 x 1 data-parallel)"},
      {"--tp 2 --sequence-parallel", "--sequence-parallel: transformers' mixture-of-experts"},
      {"--moe-impl torchtitan --compile",
       "--moe-impl torchtitan: with --compile or --float8: torchtitan's compiled MoE blocks"},
      {"--moe-impl torchtitan --tp 2",
       "--moe-impl torchtitan: with --tp: torchtitan shards the sequence between the blocks"},
      {"--gpus 4 --fsdp2 --tp 2 --sequence-parallel --ep 2 --expert-tensor-parallel 4",
       "--expert-tensor-parallel 4: torchtitan asserts \"Currently we only support ETP=TP or ETP=1\""},
      {"--gpus 4 --fsdp2 --tp 2 --sequence-parallel --ep 4 --expert-tensor-parallel 2",
       "--ep 4: does not divide the 2 ranks FSDP2 shards over"},
      {"--moe-impl megatron --tp 4 --sequence-parallel --expert-tensor-parallel 8",
       "--expert-tensor-parallel 8: does not apply to 4 rank(s) per pipeline stage (--tp 4 x 1 "
       "data-parallel)"},
  };
  for (const auto& [flags, message] : cases) {
    INFO(flags);
    const CliRun run = run_vramsim(base + flags);
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err.rfind("vramsim: error: " + message, 0) == 0);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
}
