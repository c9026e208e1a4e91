// `vramsim plan` (sim/plan/plan.h): the grid it searches, counted by hand; the pruning rules (micro-batch,
// model states worked by hand from parameter counts, parallel layouts); the decision path's order; FSDP2 and
// tensor/pipeline layouts whose commands predict accepts; determinism over threads; refused configurations;
// bad input; shards merged byte for byte.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "run_cli.h"
#include "sim/core/error.h"
#include "sim/plan/plan.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

PlanRequest gpt2(const std::string& gpu, std::int64_t global_batch, std::int64_t seq) {
  PlanRequest r;
  r.model = "gpt2";
  r.gpu = gpu;
  r.global_batch = global_batch;
  r.seq = seq;
  r.threads = 2;
  return r;
}

bool same_settings_but_micro(const PlanConfig& a, const PlanConfig& b) {
  return a.precision == b.precision && a.checkpointing == b.checkpointing && a.zero == b.zero &&
         a.fsdp == b.fsdp && a.tp == b.tp && a.pp == b.pp && a.ep == b.ep && a.optimizer == b.optimizer &&
         a.adapters == b.adapters && a.offload == b.offload && a.compile == b.compile;
}

// A Llama config.json written next to the tests (the plan names it by path, as a user would).
std::string write_llama(const std::string& file, std::int64_t hidden, std::int64_t ffn, std::int64_t layers,
                        std::int64_t heads, std::int64_t kv_heads, std::int64_t vocab, std::int64_t context) {
  std::ofstream(file)
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": " << hidden
      << ", \"intermediate_size\": " << ffn << ", \"num_hidden_layers\": " << layers
      << ", \"num_attention_heads\": " << heads << ", \"num_key_value_heads\": " << kv_heads
      << ", \"vocab_size\": " << vocab << ", \"max_position_embeddings\": " << context
      << ", \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false}\n";
  return file;
}

// Every predicted configuration holds at least its model states (the bound is a lower bound).
void check_states_below_peaks(const PlanResult& p) {
  for (const PlanEvaluation& e : p.grid) {
    if (e.evaluated && e.error.empty()) {
      CHECK(e.model_states_bytes <= e.peak_reserved_bytes);
    }
  }
}

}  // namespace

// One H100, global batch 16: the grid is 2 precisions (amp-bf16, bf16) x 5 micro-batches (the divisors of 16)
// x 3 checkpointing modes x 2 optimizers = 60 configurations, all of which fit GPT-2 small at 256 tokens; the
// decision path is the fp32 baseline alone (it fits), one more prediction. Exhaustive: every configuration
// predicted (the bounded search's own test is test_plan_search.cpp).
TEST_CASE("plan: the grid, the best and the Pareto front on a GPU everything fits", "[predict]") {
  PlanRequest r = gpt2("h100", 16, 256);
  r.exhaustive = true;
  const PlanResult p = plan(r);
  CHECK(p.grid.size() == 60);
  CHECK(p.configurations_pruned == 0);
  CHECK(p.configurations_evaluated == 61);
  REQUIRE(p.decision_path.size() == 1);
  CHECK(p.decision_path[0].lever == "baseline");
  CHECK(p.decision_path[0].result.fits);
  REQUIRE(p.best.has_value());
  for (const PlanEvaluation& e : p.grid) {
    CHECK(e.fits);
    CHECK(e.tokens_per_s <= p.grid[*p.best].tokens_per_s);
  }
  // The front: memory and speed both increase along it, and nothing in the grid beats a point on both.
  REQUIRE_FALSE(p.pareto.empty());
  for (std::size_t k = 1; k < p.pareto.size(); ++k) {
    CHECK(p.grid[p.pareto[k]].needed_bytes >= p.grid[p.pareto[k - 1]].needed_bytes);
    CHECK(p.grid[p.pareto[k]].tokens_per_s > p.grid[p.pareto[k - 1]].tokens_per_s);
  }
  for (std::size_t i : p.pareto) {
    for (const PlanEvaluation& e : p.grid) {
      CHECK_FALSE((e.needed_bytes < p.grid[i].needed_bytes && e.tokens_per_s > p.grid[i].tokens_per_s));
    }
  }
  CHECK(p.pareto.back() == *p.best);
}

// A T4 (16 GB) and GPT-2 at 32 x 1024: the large micro-batches do not fit. A configuration is skipped for its
// micro-batch only when a smaller micro-batch of the same settings was predicted and did not fit, and for
// throughput only when a larger micro-batch of the same settings was predicted and fits or the tokens/s of a
// predicted configuration with the same settings but checkpointing (or itself) at the largest micro-batch are
// below the best's; the decision path tries the levers in the seeds' order and stops at the first
// configuration that fits.
TEST_CASE("plan: pruning by micro-batch and the decision path on a tight GPU", "[predict]") {
  const PlanResult p = plan(gpt2("t4", 32, 1024));
  CHECK(p.grid.size() == 2 * 6 * 3 * 2);  // divisors of 32: 1, 2, 4, 8, 16, 32
  CHECK(p.configurations_pruned > 0);
  for (std::size_t i = 0; i < p.grid.size(); ++i) {
    if (p.grid[i].evaluated) {
      continue;
    }
    const PlanConfig& c = p.grid[i].config;
    INFO(describe(c) << ": " << p.grid[i].skipped);
    // GPT-2's model states fit a T4 many times over; no parallel layout on one GPU
    REQUIRE((p.grid[i].skipped == "micro-batch" || p.grid[i].skipped == "throughput"));
    bool reason = false;
    for (const PlanEvaluation& e : p.grid) {
      if (!e.evaluated) {
        continue;
      }
      if (p.grid[i].skipped == "micro-batch") {
        reason = reason ||
                 (!e.fits && same_settings_but_micro(e.config, c) && e.config.micro_batch < c.micro_batch);
        continue;
      }
      PlanConfig fastest = c;  // the family's bound: no checkpointing, the largest micro-batch
      fastest.checkpointing = "none";
      reason = reason ||
               (e.fits && same_settings_but_micro(e.config, c) && e.config.micro_batch > c.micro_batch) ||
               (e.config.micro_batch == 32 && e.tokens_per_s <= p.grid[*p.best].tokens_per_s &&
                (same_settings_but_micro(e.config, c) || same_settings_but_micro(e.config, fastest)));
    }
    CHECK(reason);
  }
  REQUIRE(p.decision_path.size() >= 2);
  CHECK(p.decision_path.front().lever == "baseline");
  CHECK_FALSE(p.decision_path.front().result.fits);
  CHECK(p.decision_path.back().result.fits);
  const std::vector<std::string> order = {"baseline",
                                          "mixed precision",
                                          "micro-batch with accumulation",
                                          "activation checkpointing",
                                          "ZeRO stage / FSDP",
                                          "parallel layout",
                                          "8-bit optimizer"};
  std::size_t last = 0;
  for (const PlanStep& s : p.decision_path) {
    const auto at = static_cast<std::size_t>(std::find(order.begin(), order.end(), s.lever) - order.begin());
    REQUIRE(at < order.size());
    CHECK(at >= last);
    last = at;
  }
  REQUIRE(p.best.has_value());
  CHECK(p.grid[*p.best].needed_bytes <= p.limit_bytes);
}

TEST_CASE("plan: the result does not depend on the number of threads", "[predict]") {
  PlanRequest one = gpt2("t4", 8, 1024);
  one.threads = 1;
  PlanRequest two = one;
  two.threads = 2;
  const PlanResult a = plan(one);
  const PlanResult b = plan(two);
  REQUIRE(a.grid.size() == b.grid.size());
  for (std::size_t i = 0; i < a.grid.size(); ++i) {
    CHECK(a.grid[i].evaluated == b.grid[i].evaluated);
    CHECK(a.grid[i].needed_bytes == b.grid[i].needed_bytes);
    CHECK(a.grid[i].tokens_per_s == b.grid[i].tokens_per_s);
  }
  CHECK(a.best == b.best);
  CHECK(a.pareto == b.pareto);
}

// The CS336 staff code has no nn.Linear for PEFT to wrap: every LoRA configuration is refused with the
// simulator's message, counted, and the search goes on.
TEST_CASE("plan: refused configurations are reported and the search goes on", "[predict]") {
  PlanRequest r;
  r.model = "cs336-small";
  r.gpu = "h100";
  r.global_batch = 2;
  r.seq = 128;
  r.allow = {"lora"};
  const PlanResult p = plan(r);
  CHECK(p.grid.size() ==
        2 * 2 * 3 * 2 * 2);      // precisions x divisors of 2 x checkpointing x optimizers x adapters
  CHECK(p.errors == 2 * 3 * 2);  // the LoRA groups, one prediction each (then skipped)
  REQUIRE(p.best.has_value());
  CHECK(p.grid[*p.best].config.adapters.empty());
}

TEST_CASE("plan: bad requests are one-line errors", "[quick][predict]") {
  PlanRequest r = gpt2("h100", 7, 128);
  r.gpus = 2;
  CHECK_THROWS_WITH(plan(r), Catch::Contains("--global-batch: 7 sequences do not divide over 2 GPUs"));
  r = gpt2("h100", 8, 128);
  r.allow = {"fp8"};
  CHECK_THROWS_WITH(plan(r), Catch::Contains("--allow: unknown lever 'fp8'"));
  r = gpt2("", 8, 128);
  CHECK_THROWS_AS(plan(r), InputError);
}

TEST_CASE("cli: plan --json and --csv", "[predict]") {
  const std::string csv = "vramsim_test_plan.csv";
  int status = -1;
  const nlohmann::json j = nlohmann::json::parse(
      test::run_cli("plan --model gpt2 --gpu h100 --global-batch 4 --seq 128 --json --csv " + csv, &status));
  CHECK(status == 0);
  for (const char* key : {"best", "decision_path", "pareto", "configurations_evaluated", "time_model_error",
                          "tied_with_best"}) {
    CHECK(j.contains(key));
  }
  CHECK(j["time_model_error"].get<double>() == 0.16);  // time_model_error.h
  for (const auto& tied : j["tied_with_best"]) {       // each within 16 % of the best's step time
    CHECK(tied["tied_with_best"].get<bool>());
    CHECK(tied["tokens_per_s"].get<double>() * 1.16 >= j["best"]["tokens_per_s"].get<double>());
  }
  for (const char* key : {"command", "fits", "peak_reserved_bytes", "headroom_bytes", "tokens_per_s"}) {
    CHECK(j["best"].contains(key));
  }
  CHECK(j["best"]["command"].get<std::string>().rfind("vramsim predict --model gpt2 --gpu h100", 0) == 0);
  std::ifstream f(csv);
  int lines = 0;
  for (std::string line; std::getline(f, line);) {
    if (lines == 0) {
      CHECK_THAT(line, Catch::Contains(",tokens_per_s,tied_with_best,command"));
    }
    ++lines;
  }
  std::remove(csv.c_str());
  CHECK(lines == 1 + 2 * 3 * 3 * 2);  // header + precisions x divisors of 4 x checkpointing x optimizers
  CHECK_THAT(test::run_cli("plan --model gpt2 --gpu h100 --global-batch 3 --gpus 2 --seq 128", &status),
             Catch::Contains("vramsim: error: --global-batch"));
  CHECK(status == 2);
}

// `plan --shard K/N` on N machines and `vramsim merge` of the parts give the single-machine output byte for
// byte, text and JSON; shards that do not belong together are one-line errors.
TEST_CASE("cli: plan --shard and merge reproduce the single run byte for byte", "[predict]") {
  const std::string base = "plan --model gpt2 --gpu t4 --global-batch 8 --seq 1024";
  int status = -1;
  const std::string single_text = test::run_cli(base, &status);
  REQUIRE(status == 0);
  const std::string single_json = test::run_cli(base + " --json", &status);
  std::vector<std::string> files;
  for (int k = 1; k <= 3; ++k) {
    const std::string file = "vramsim_test_shard_" + std::to_string(k) + ".json";
    std::ofstream(file) << test::run_cli(base + " --shard " + std::to_string(k) + "/3", &status);
    CHECK(status == 0);
    files.push_back(file);
  }
  CHECK(test::run_cli("merge " + files[2] + " " + files[0] + " " + files[1], &status) == single_text);
  CHECK(status == 0);
  CHECK(test::run_cli("merge --json " + files[1] + " " + files[2] + " " + files[0], &status) == single_json);
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1], &status),
             Catch::Contains("vramsim: error: merge: shard 3 of 3 is missing"));
  CHECK(status == 2);
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[0] + " " + files[1] + " " + files[2], &status),
             Catch::Contains("shard 1 of 3 given twice"));
  const std::string other = "vramsim_test_shard_other.json";
  std::ofstream(other) << test::run_cli("plan --model gpt2 --gpu t4 --global-batch 8 --seq 512 --shard 3/3");
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1] + " " + other, &status),
             Catch::Contains("a shard of another plan"));
  CHECK_THAT(test::run_cli(base + " --shard 0/3", &status), Catch::Contains("--shard: '0/3' is not K/N"));
  CHECK(status == 2);
  files.push_back(other);
  for (const std::string& f : files) {
    std::remove(f.c_str());
  }
}

namespace {

// Worked by hand: hidden 8192, MLP 28672, 4 layers, 64 heads, 8 key/value heads (head_dim 128), vocabulary
// 262144. Embeddings and lm_head 2 x 262144 x 8192 = 4,294,967,296; per layer q and o 2 x 8192^2 =
// 134,217,728, k and v 2 x 8192 x 1024 = 16,777,216, MLP 3 x 8192 x 28672 = 704,643,072, two norms 16,384:
// 855,654,400, x 4 = 3,422,617,600; the final norm 8,192. Psi = 7,717,593,088 parameters.
constexpr std::int64_t kBigPsi = 7'717'593'088;
// Per tensor-parallel rank of 4: everything but the 73,728 norm weights split 4 ways (the vocabulary is a
// multiple of 128 x 4, so Megatron pads nothing; 8 key/value heads split 2 per rank).
constexpr std::int64_t kBigPsiTp4 = (kBigPsi - 73'728) / 4 + 73'728;  // 1,929,453,568

PlanRequest big_model_on_four_l4s() {
  PlanRequest r;
  r.model = write_llama("vramsim_test_plan_big.json", 8192, 28672, 4, 64, 8, 262144, 4096);
  r.gpu = "l4";
  r.gpus = 4;
  r.global_batch = 4;
  r.seq = 256;
  r.threads = 2;
  return r;
}

PlanConfig config(const std::string& precision, int zero, const std::string& fsdp, int tp,
                  const std::string& optimizer) {
  PlanConfig c;
  c.precision = precision;
  c.zero = zero;
  c.fsdp = fsdp;
  c.tp = tp;
  c.optimizer = optimizer;
  return c;
}

}  // namespace

// plan.h's bound by hand, bytes per parameter p = g = 2 (bf16) or 4 (amp-bf16), o = 12 (AdamW + fp32 master
// weights under bf16), 8 (AdamW) or 2 (adamw-8bit), over 4 data-parallel ranks.
TEST_CASE("plan: the model states lower bound worked by hand", "[quick][predict]") {
  const PlanRequest r = big_model_on_four_l4s();
  CHECK(model_states_lower_bound(r, config("amp-bf16", 0, "", 1, "adamw")) == 16 * kBigPsi);  // DDP
  CHECK(model_states_lower_bound(r, config("bf16", 1, "", 1, "adamw-8bit")) ==
        4 * kBigPsi + 2 * kBigPsi / 4);  // ZeRO-1: 34,729,168,896
  CHECK(model_states_lower_bound(r, config("bf16", 2, "", 1, "adamw-8bit")) ==
        2 * kBigPsi + 4 * kBigPsi / 4);  // ZeRO-2: 23,152,779,264
  CHECK(model_states_lower_bound(r, config("bf16", 3, "", 1, "adamw-8bit")) == 6 * kBigPsi / 4);
  CHECK(model_states_lower_bound(r, config("amp-bf16", 0, "fsdp2", 1, "adamw")) == 16 * kBigPsi / 4);
  CHECK(model_states_lower_bound(r, config("bf16", 0, "", 4, "adamw-8bit")) == 6 * kBigPsiTp4);  // DDP, TP 4
  CHECK(kBigPsiTp4 == 1'929'453'568);
  // 16 GPUs at tp 4 x pp 2 (2 replicas): a stage holds at least half of a rank's 1,929,453,568 parameters,
  // 964,726,784. ZeRO-1, amp-bf16, AdamW: (4 + 4) x 964,726,784 + 8 x 964,726,784 / 2 = 7,717,814,272 +
  // 3,858,907,136; FSDP2, bf16, AdamW: (2 + 2 + 12) x 964,726,784 / 2; DDP at tp 4 x pp 4 (1 replica), bf16,
  // adamw-8bit: (2 + 2 + 2) x 1,929,453,568 / 4 = 6 x 482,363,392.
  PlanRequest sixteen = r;
  sixteen.gpus = 16;
  PlanConfig staged = config("amp-bf16", 1, "", 4, "adamw");
  staged.pp = 2;
  CHECK(model_states_lower_bound(sixteen, staged) == 11'576'721'408);
  staged = config("bf16", 0, "fsdp2", 4, "adamw");
  staged.pp = 2;
  CHECK(model_states_lower_bound(sixteen, staged) == 7'717'814'272);
  staged = config("bf16", 0, "", 4, "adamw-8bit");
  staged.pp = 4;
  CHECK(model_states_lower_bound(sixteen, staged) == 2'894'180'352);
  PlanConfig lora = config("bf16", 0, "", 1, "adamw");
  lora.adapters = "lora";
  CHECK(model_states_lower_bound(r, lora) == 0);  // no bound with adapters
  std::remove(r.model.c_str());
}

// 4 x L4 (23,612,293,120 B each; limit 90 % = 21,251,063,808 B). By hand from the bound above: no
// configuration without full sharding or tensor parallelism fits (the least, ZeRO-2 with bf16 and
// adamw-8bit, is 23,152,779,264 B), and none with AdamW (16 bytes per parameter, 30,870,372,352 B per rank
// however the 4 GPUs share them). So those groups are skipped unpredicted, everything that fits is ZeRO-3,
// FSDP2 or tensor parallel with the 8-bit optimizer, and the decision path needs the 8-bit optimizer after
// the sharding and layout levers.
TEST_CASE("plan: only full sharding or tensor parallelism with an 8-bit optimizer fits, by hand",
          "[predict]") {
  const PlanRequest r = big_model_on_four_l4s();
  const PlanResult p = plan(r);
  CHECK(p.limit_bytes == 21'251'063'808);
  CHECK(p.pruned_model_states > 0);
  int fitting = 0;
  for (const PlanEvaluation& e : p.grid) {
    const PlanConfig& c = e.config;
    const bool full = c.zero == 3 || c.fsdp == "fsdp2" || c.tp > 1;
    if (c.optimizer == "adamw" || !full) {
      CHECK(e.skipped == "model states");
      CHECK(e.model_states_bytes > p.limit_bytes);
    }
    if (e.fits) {
      ++fitting;
      CHECK(full);
      CHECK(c.optimizer == "adamw-8bit");
    }
  }
  CHECK(fitting > 0);
  check_states_below_peaks(p);
  // The pruning is sound: every configuration skipped for its model states, predicted all the same, does not
  // fit (an OOM, or more than the limit with the CUDA context).
  int skipped = 0;
  for (const PlanEvaluation& e : p.grid) {
    if (e.skipped != "model states") {
      continue;
    }
    ++skipped;
    INFO(describe(e.config));
    const Prediction q = predict(make_request(predict_args(r, e.config)));
    const std::int64_t needed =
        std::max(q.peak_reserved_bytes, q.peak_allocated_needed_bytes) + q.cuda_context_bytes;
    CHECK((q.num_ooms > 0 || needed > p.limit_bytes));
  }
  CHECK(skipped == p.pruned_model_states);
  REQUIRE(p.best.has_value());
  std::vector<std::string> levers;
  for (const PlanStep& s : p.decision_path) {
    levers.push_back(s.lever);
  }
  CHECK(std::find(levers.begin(), levers.end(), "ZeRO stage / FSDP") != levers.end());
  CHECK(std::find(levers.begin(), levers.end(), "parallel layout") != levers.end());
  CHECK(p.decision_path.back().lever == "8-bit optimizer");
  CHECK(p.decision_path.back().result.fits);
  std::remove(r.model.c_str());
}

// 8 x L4 and a model whose output layer dominates: vocabulary 262144, hidden 512, 2 layers, 8 heads, at
// 32768 tokens. One sequence's logits in fp32 are 32768 x 262144 x 4 B = 32 GiB, more than an L4 holds
// (21.99 GiB), whatever the sharding: only tensor parallelism, which splits the vocabulary (4 GiB at tp 8),
// can fit it. The best configuration's command runs through `vramsim predict` unchanged and predicts the
// same.
TEST_CASE("plan: only tensor parallelism fits a large vocabulary, and predict accepts its command",
          "[predict]") {
  PlanRequest r;
  r.model = write_llama("vramsim_test_plan_vocab.json", 512, 2048, 2, 8, 8, 262144, 32768);
  r.gpu = "l4";
  r.gpus = 8;
  r.global_batch = 8;
  r.seq = 32768;
  r.threads = 2;
  const PlanResult p = plan(r);
  for (const PlanEvaluation& e : p.grid) {
    if (e.config.tp == 1) {
      CHECK_FALSE(e.fits);
    }
  }
  check_states_below_peaks(p);
  REQUIRE(p.best.has_value());
  const PlanEvaluation& best = p.grid[*p.best];
  CHECK(best.config.tp > 1);
  REQUIRE_FALSE(p.decision_path.empty());
  CHECK(p.decision_path.back().lever == "parallel layout");
  CHECK(p.decision_path.back().result.fits);
  const std::string command = predict_command(r, best.config);
  CHECK_THAT(command, Catch::Contains(" --tp " + std::to_string(best.config.tp) + " --sequence-parallel"));
  int status = -1;
  const nlohmann::json j = nlohmann::json::parse(
      test::run_cli(command.substr(std::string("vramsim ").size()) + " --json", &status));
  CHECK(status == 0);
  CHECK(j["fits"] == true);
  CHECK(j["tensor_parallel"] == best.config.tp);
  CHECK(j["peak_reserved_bytes"] == best.peak_reserved_bytes);
  std::remove(r.model.c_str());
}

// 16 GPUs, 4 per node, a 4-layer model with 8 heads: tensor parallel 1, 2, 4 (the node), then tp 4 with 2
// and 4 pipeline stages. By hand, per precision x checkpointing x optimizer (12), with the global batch of 16
// over 16, 8, 4, 2 and 1 data-parallel ranks (local batch 1, 2, 4, 8, 16: 1, 2, 3, 4, 5 micro-batch sizes):
// DDP every layout, 1 + 2 + 3 + 4 + 5 = 15; ZeRO-1 and FSDP2 the layouts with more than one replica, 10
// each; ZeRO-2 and ZeRO-3 also no pipeline (DeepSpeed's PipelineEngine refuses them), 1 + 2 + 3 = 6 each:
// 47, and 12 x 47 = 564 configurations.
TEST_CASE("plan: the parallel layouts and their grid, counted by hand", "[predict]") {
  PlanRequest r;
  r.model = write_llama("vramsim_test_plan_small.json", 256, 1024, 4, 8, 8, 32768, 1024);
  r.gpu = "h100";
  r.gpus = 16;
  r.gpus_per_node = 4;
  r.global_batch = 16;
  r.seq = 256;
  r.threads = 2;
  const PlanResult p = plan(r);
  CHECK(p.grid.size() == 564);
  std::set<std::pair<int, int>> layouts;
  for (std::size_t i = 0; i < p.grid.size(); ++i) {
    const PlanConfig& c = p.grid[i].config;
    layouts.insert({c.tp, c.pp});
    CHECK(c.micro_batch * c.grad_accumulation * data_parallel_degree(r, c) == r.global_batch);
    if (c.pp > 1) {
      CHECK(c.zero <= 1);
    }
    if (data_parallel_degree(r, c) == 1) {
      CHECK((c.zero == 0 && c.fsdp.empty()));
    }
    if (p.grid[i].skipped == "layout") {  // the same settings fit with a smaller layout
      bool smaller_fits = false;
      for (const PlanEvaluation& e : p.grid) {
        smaller_fits =
            smaller_fits ||
            (e.fits && e.config.precision == c.precision && e.config.checkpointing == c.checkpointing &&
             e.config.zero == c.zero && e.config.fsdp == c.fsdp && e.config.optimizer == c.optimizer &&
             e.config.tp * e.config.pp < c.tp * c.pp);
      }
      CHECK(smaller_fits);
    }
  }
  CHECK(layouts == std::set<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {4, 2}, {4, 4}});
  CHECK(p.pruned_layout > 0);
  // A pipeline configuration's command: predict simulates every stage of it.
  const auto pipeline = std::find_if(p.grid.begin(), p.grid.end(), [](const PlanEvaluation& e) {
    return e.config.pp == 4 && e.config.micro_batch == 2;
  });
  REQUIRE(pipeline != p.grid.end());
  const std::string command = predict_command(r, pipeline->config);
  CHECK_THAT(command, Catch::Contains("--gpus 16 --tp 4 --sequence-parallel --pp 4"));
  int status = -1;
  CHECK_THAT(test::run_cli(command.substr(std::string("vramsim ").size()), &status),
             Catch::Contains("pipeline         4 stages, 1f1b schedule, 8 micro-batches"));
  CHECK(status == 0);
  std::remove(r.model.c_str());
}

// The layout rules of Note [Parallel layouts] one by one, each model's layouts worked out by hand.
TEST_CASE("plan: the parallel layouts of odd shapes, by hand", "[quick][predict]") {
  PlanRequest r;
  r.gpu = "h100";
  r.global_batch = 48;
  r.seq = 256;
  using Layouts = std::vector<std::pair<int, int>>;
  // 8 heads, 8 key/value heads, MLP 1024, 4 layers; 16 GPUs, 4 a node: tp 2 and 4 (the node), then tp 4 with
  // pp 2 and 4 (the divisors of 16 / 4 that divide 4 layers).
  r.model = write_llama("vramsim_test_plan_layouts_a.json", 256, 1024, 4, 8, 8, 32768, 1024);
  r.gpus = 16;
  r.gpus_per_node = 4;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {2, 1}, {4, 1}, {4, 2}, {4, 4}});
  // 24 GPUs, 8 a node; 24 heads but 6 key/value heads: 6 % 4 != 0 stops tp at 2 (Megatron divides the
  // key/value groups over the ranks), though 4 divides the heads and the GPUs; pp over 24 / 2 = 12 that
  // divides 6 layers: 2, 3 and 6 (not 4 or 12).
  std::remove(r.model.c_str());
  r.model = write_llama("vramsim_test_plan_layouts_b.json", 384, 1536, 6, 24, 6, 32768, 1024);
  r.gpus = 24;
  r.gpus_per_node = 8;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {2, 1}, {2, 2}, {2, 3}, {2, 6}});
  // The same at 255 tokens: the sequence does not split in two (sequence parallelism), so no tp; pp over 24
  // GPUs that divides 6 layers: 2, 3, 6.
  r.seq = 255;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {1, 2}, {1, 3}, {1, 6}});
  r.seq = 256;
  // 6 GPUs: 4 does not divide them, so tp 2, then pp 3 (the divisors of 6 / 2 = 3 that divide 6 layers).
  r.gpus = 6;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {2, 1}, {2, 3}});
  // An MLP of 1,020 hidden units: 1,020 % 8 != 0 stops tp at 4 on 8 GPUs; pp 2 over the 2 left.
  std::remove(r.model.c_str());
  r.model = write_llama("vramsim_test_plan_layouts_c.json", 256, 1020, 4, 8, 8, 32768, 1024);
  r.gpus = 8;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {2, 1}, {4, 1}, {4, 2}});
  // 32 heads but 4 key/value heads on 8 GPUs: predict --tp 8 would give each rank one replicated key/value
  // head; Megatron-LM refuses it (4 % 8 != 0), so tp stops at 4 here; pp 2 over the 2 left.
  std::remove(r.model.c_str());
  r.model = write_llama("vramsim_test_plan_layouts_d.json", 512, 2048, 4, 32, 4, 32768, 1024);
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {2, 1}, {4, 1}, {4, 2}});
  // --gpus-per-node 1: no tensor parallelism; pp 2 and 4 over 8 GPUs and 4 layers (8 does not divide 4).
  r.gpus_per_node = 1;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}, {1, 2}, {1, 4}});
  // One GPU: no layout. The CS336 staff code is not transformers': predict has no tp or pp for it.
  r.gpus = 1;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}});
  std::remove(r.model.c_str());
  r.model = "cs336-small";
  r.gpus = 8;
  r.gpus_per_node = 8;
  CHECK(parallel_layouts(r) == Layouts{{1, 1}});
  CHECK(expert_parallel_layouts(r).empty());  // no experts
  // A mixture-of-experts model: no tp/pp layout, expert parallelism 2, 4, ... dividing the GPUs and the
  // experts. tiny-mixtral has 64 experts: on 8 GPUs ep 2, 4, 8; on 6 GPUs only 2 (4 does not divide 6);
  // Mixtral-8x7B's 8 experts on 16 GPUs: 2, 4, 8 (16 does not divide 8).
  r.model = test::test_data("tiny-mixtral.config.json").string();
  CHECK(parallel_layouts(r) == Layouts{{1, 1}});
  CHECK(expert_parallel_layouts(r) == std::vector<int>{2, 4, 8});
  r.gpus = 6;
  CHECK(expert_parallel_layouts(r) == std::vector<int>{2});
  r.model = "mixtral-8x7b";
  r.gpus = 16;
  CHECK(expert_parallel_layouts(r) == std::vector<int>{2, 4, 8});
}

// model_states_lower_bound() is a lower bound of what the simulator holds: at the end of the second step's
// backward, parameters, gradients and optimizer states are all live, so the allocated bytes there (a
// pipeline: its highest stage's peak, at least its mean stage's model states) are at least the bound, for
// every precision, optimizer, sharding and layout the grid has (16 GPUs, 4 a node). A model of 402M
// parameters (hidden 2048, MLP 8192, 4 layers, 16 heads, 8 key/value heads, vocabulary 32768), so that its
// model states dominate what is live there: with ZeRO-1 the bound is within 3 % of the simulator's bytes
// (about 84 MB apart, the cuBLAS workspace and the batch among them), so a bound a few bytes a parameter too
// high fails here.
TEST_CASE("plan: the model states bound is below what the simulator holds", "[predict]") {
  PlanRequest r;
  r.model = write_llama("vramsim_test_plan_bound.json", 2048, 8192, 4, 16, 8, 32768, 1024);
  r.gpu = "h100";
  r.gpus = 16;
  r.gpus_per_node = 4;
  r.global_batch = 32;
  r.seq = 256;
  int checked = 0;
  for (const char* precision : {"amp-bf16", "bf16"}) {
    for (const char* optimizer : {"adamw", "adamw-8bit"}) {
      for (const auto& [zero, fsdp] :
           std::vector<std::pair<int, std::string>>{{0, ""}, {1, ""}, {2, ""}, {3, ""}, {0, "fsdp2"}}) {
        for (const auto& [tp, pp] : parallel_layouts(r)) {
          PlanConfig c = config(precision, zero, fsdp, tp, optimizer);
          c.pp = pp;
          c.grad_accumulation = 2;
          const bool sharded = zero > 0 || !fsdp.empty();
          if ((pp > 1 && zero >= 2) || (sharded && data_parallel_degree(r, c) == 1)) {
            continue;  // not in the grid
          }
          INFO(describe(c));
          const std::int64_t bound = model_states_lower_bound(r, c);
          CHECK(bound > 0);
          const Prediction p = predict(make_request(predict_args(r, c)));
          CHECK(p.num_ooms == 0);
          if (pp > 1) {
            CHECK(bound <= p.peak_allocated_bytes);
          } else {
            REQUIRE(p.phases.after_backward.has_value());
            CHECK(p.phases_step == 2);
            CHECK(bound <= *p.phases.after_backward);
          }
          ++checked;
        }
      }
    }
  }
  CHECK(checked ==
        4 * (5 + 4 + 3 + 3 + 4));  // DDP every layout; ZeRO-1, FSDP2 not at 1 replica; ZeRO-2/3 no pp
  std::remove(r.model.c_str());
}

// Note [Probing with fewer micro-batches] (plan.cpp): a configuration's memory does not fall when it has
// more micro-batches, so a probe that does not fit rules the configuration out. Checked on a small model for
// each scheme the probe is used with.
TEST_CASE("plan: memory does not fall with more micro-batches (the probe's premise)", "[predict]") {
  const std::string model = write_llama("vramsim_test_plan_probe.json", 256, 1024, 4, 8, 8, 32768, 1024);
  const auto needed = [&](int gpus, int tp, int pp, std::optional<int> zero, bool fsdp2, int micro_batches) {
    RequestArgs a;
    a.model = model;
    a.gpu = "h100";
    a.seq = 256;
    a.precision = "bf16";
    a.world_size = gpus;
    a.tp = tp;
    a.sequence_parallel = tp > 1;
    a.pp = pp;
    a.zero = zero;
    if (fsdp2) {
      a.fsdp = "full-shard";
      a.fsdp2 = true;
    }
    a.grad_accumulation = micro_batches;
    const Prediction p = predict(make_request(a));
    return std::max(p.peak_reserved_bytes, p.peak_allocated_needed_bytes);
  };
  CHECK(needed(2, 1, 1, std::nullopt, false, 2) <= needed(2, 1, 1, std::nullopt, false, 6));  // DDP
  CHECK(needed(2, 1, 1, 2, false, 2) <= needed(2, 1, 1, 2, false, 6));                        // ZeRO-2
  CHECK(needed(2, 1, 1, 3, false, 2) <= needed(2, 1, 1, 3, false, 6));                        // ZeRO-3
  CHECK(needed(2, 1, 1, std::nullopt, true, 2) <= needed(2, 1, 1, std::nullopt, true, 6));    // FSDP2
  CHECK(needed(4, 2, 1, std::nullopt, false, 2) <= needed(4, 2, 1, std::nullopt, false, 6));  // TP 2
  CHECK(needed(4, 1, 2, 1, false, 3) <= needed(4, 1, 2, 1, false, 8));                        // PP 2
  CHECK(needed(8, 2, 4, std::nullopt, true, 5) <= needed(8, 2, 4, std::nullopt, true, 12));   // 3-D
  std::remove(model.c_str());
}

TEST_CASE("plan: FSDP2 and parallel layouts in the Trainer, torchtitan and Megatron settings",
          "[quick][predict]") {
  PlanRequest r = gpt2("h100", 512, 4096);
  r.model = "llama-2-70b";
  r.gpus = 64;
  PlanConfig c = config("amp-bf16", 0, "fsdp2", 1, "adamw");
  c.checkpointing = "full";
  c.micro_batch = 1;
  c.grad_accumulation = 8;
  CHECK(describe(c) == "amp-bf16, micro-batch 1 x 8 accumulation, checkpointing full, FSDP2, adamw");
  CHECK_THAT(trainer_settings(r, c),
             Catch::Contains("fsdp=\"full_shard auto_wrap\", fsdp_config={\"version\": 2}"));
  CHECK_THAT(predict_command(r, c), Catch::EndsWith("--gpus 64 --fsdp full-shard --fsdp2"));
  c.tp = 8;
  c.pp = 4;
  c.grad_accumulation = 256;  // 512 sequences over 2 replicas, 1 at a time
  CHECK(describe(c) ==
        "amp-bf16, micro-batch 1 x 256 accumulation, checkpointing full, FSDP2, TP 8 + SP, PP 4, adamw");
  CHECK_THAT(
      trainer_settings(r, c),
      Catch::Contains("torchtitan --parallelism.tensor_parallel_degree 8 "
                      "--parallelism.pipeline_parallel_degree 4 --parallelism.data_parallel_shard_degree 2 "
                      "--training.global_batch_size 512 --training.seq_len 4096 --training.local_batch_size "
                      "256 --parallelism.pipeline_parallel_microbatch_size 1"));
  c.fsdp.clear();
  c.zero = 1;
  CHECK_THAT(trainer_settings(r, c),
             Catch::Contains("Megatron-LM --tensor-model-parallel-size 8 --sequence-parallel "
                             "--pipeline-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 512 "
                             "--seq-length 4096 --use-distributed-optimizer"));
  CHECK_THAT(predict_command(r, c),
             Catch::Contains("--grad-accumulation 256 --gpus 64 --tp 8 --sequence-parallel --pp 4 --zero 1"));
  c.pp = 1;
  c.zero = 2;
  c.grad_accumulation = 64;  // 512 sequences over 8 replicas
  CHECK_THAT(trainer_settings(r, c),
             Catch::Contains("Megatron-DeepSpeed --tensor-model-parallel-size 8 --sequence-parallel "
                             "--pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 512 "
                             "--seq-length 4096 --recompute-granularity full --recompute-method uniform "
                             "--deepspeed --no-pipeline-parallel --zero-stage 2 --deepspeed_config "
                             "ds_config.json, ds_config.json with {\"zero_optimization\": {\"stage\": 2}}"));
}

// The shards of a plan with FSDP2, tensor and pipeline layouts, every reason to skip and probes merge into
// the single run's output, text, JSON and CSV, byte for byte: the 7.7B-parameter model of the bound above on
// 8 x L4, 4 a node (layouts tp 1, 2, 4 and tp 4 x pp 2).
TEST_CASE("cli: plan --shard and merge with FSDP2 and parallel layouts", "[predict]") {
  const std::string model = write_llama("vramsim_test_plan_shards.json", 8192, 28672, 4, 64, 8, 262144, 4096);
  const std::string base =
      "plan --model " + model + " --gpu l4 --gpus 8 --gpus-per-node 4 --global-batch 8 --seq 256 --threads 2";
  int status = -1;
  const std::string single_csv = "vramsim_test_plan_single.csv";
  const std::string single_text = test::run_cli(base + " --csv " + single_csv, &status);
  REQUIRE(status == 0);
  const std::string single_json = test::run_cli(base + " --json", &status);
  std::vector<std::string> files;
  for (int k = 1; k <= 3; ++k) {
    const std::string file = "vramsim_test_plan_layout_shard_" + std::to_string(k) + ".json";
    std::ofstream(file) << test::run_cli(base + " --shard " + std::to_string(k) + "/3", &status);
    CHECK(status == 0);
    files.push_back(file);
  }
  const std::string merged_csv = "vramsim_test_plan_merged.csv";
  CHECK(test::run_cli("merge --csv " + merged_csv + " " + files[1] + " " + files[0] + " " + files[2],
                      &status) == single_text);
  CHECK(test::run_cli("merge --json " + files[2] + " " + files[1] + " " + files[0], &status) == single_json);
  const auto read = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  CHECK(read(merged_csv) == read(single_csv));
  // FSDP2 rows, tp 4 x pp 2 rows (ep and cp 1), each reason to skip, and a pipeline probe of pp + 1 = 3
  // micro-batches that did not fit (evaluated, not skipped, probe 3, fits 0)
  CHECK_THAT(read(single_csv), Catch::Contains(",fsdp2,") && Catch::Contains(",4,2,1,1,adamw") &&
                                   Catch::Contains(",model states,") && Catch::Contains(",micro-batch,") &&
                                   Catch::Contains(",layout,") && Catch::Contains(",1,,3,0,"));
  CHECK_THAT(single_text, Catch::Contains("over by at least"));
  files.insert(files.end(), {model, single_csv, merged_csv});
  for (const std::string& f : files) {
    std::remove(f.c_str());
  }
}

// The progress bar on a terminal (plan_progress_line): 128 of 550 done fill floor(128 x 20 / 550) = 4 of 20
// cells; 12.3 s for 128 leaves 12.3 x 422 / 128 = 40.55 s, printed to the second.
TEST_CASE("plan's progress line fills its bar in proportion and estimates the time left", "[plan]") {
  CHECK(plan_progress_line(128, 550, 12.3) ==
        "plan [####................] 128 / 550 configurations, 12.3 s, about 41 s left");
  CHECK(plan_progress_line(0, 550, 0.0) == "plan [....................] 0 / 550 configurations, 0.0 s");
  CHECK(plan_progress_line(550, 550, 61.04) ==
        "plan [####################] 550 / 550 configurations, 61.0 s");
  CHECK(plan_progress_line(3, 4, 3.0, 8) == "plan [######..] 3 / 4 configurations, 3.0 s, about 1 s left");
  CHECK(plan_progress_line(0, 0, 0.0, 4) ==
        "plan [####] 0 / 0 configurations, 0.0 s");  // an empty grid is done
}

// Expert parallelism as a layout of a model with experts: the config reaches predict as --ep (torchtitan's
// MoE over FSDP2) and torchtitan's flags. tiny-mixtral (64 experts of 3 x 512 x 256 bf16 weights, 2 layers)
// on 8 GPUs: under FSDP2 without EP (predict's default, transformers' MoE block) a layer's all-gather holds
// all 64 experts (50 MB), with EP 4 its 16 (12.6 MB); the routed activations of 2 x 64 tokens x top-2 = 256
// rows x 256 x 2 B (128 KiB a buffer) are far smaller either way, so EP 4's peak is the lower.
TEST_CASE("plan: expert parallelism as a layout reaches predict and torchtitan's settings", "[predict]") {
  PlanRequest r = gpt2("h100", 16, 64);
  r.model = test::test_data("tiny-mixtral.config.json").string();
  r.gpus = 8;
  PlanConfig c = config("bf16", 0, "fsdp2", 1, "adamw");
  c.micro_batch = 2;
  c.ep = 4;
  CHECK(describe(c) == "bf16, micro-batch 2, no checkpointing, FSDP2, EP 4, adamw");
  CHECK_THAT(predict_command(r, c), Catch::Contains("--ep 4"));
  CHECK_THAT(trainer_settings(r, c), Catch::Contains("torchtitan --parallelism.expert_parallel_degree 4 "
                                                     "--parallelism.data_parallel_shard_degree 8"));
  const RequestArgs a = predict_args(r, c);
  CHECK(a.ep == 4);
  const Prediction ep4 = predict(make_request(a));
  c.ep = 1;
  const Prediction ep1 = predict(make_request(predict_args(r, c)));
  CHECK(ep4.peak_allocated_bytes < ep1.peak_allocated_bytes);
}

// --allow cp (Note [Parallel layouts]): torchtitan's context parallelism over FSDP2 as a lever. The layouts
// by hand, the batch and the model states under it (a context-parallel group shares its sequences; FSDP2
// shards over every GPU: torchtitan's dp_shard_cp mesh), and its commands.
TEST_CASE("plan: context-parallel layouts, their batch, model states and commands", "[predict]") {
  PlanRequest r;
  r.gpu = "h100";
  r.gpus = 8;
  r.global_batch = 16;
  r.seq = 256;
  r.model = write_llama("vramsim_test_plan_cp.json", 256, 1024, 4, 8, 8, 32768, 1024);
  CHECK(context_parallel_layouts(r).empty());  // only with --allow cp
  r.allow = {"cp"};
  // 8 GPUs, 256 tokens: 2 x cp divides 256 for cp 2, 4, 8
  CHECK(context_parallel_layouts(r) == std::vector<int>{2, 4, 8});
  // 24 tokens: 2 x 2 and 2 x 4 divide 24, 2 x 8 = 16 does not
  r.seq = 24;
  CHECK(context_parallel_layouts(r) == std::vector<int>{2, 4});
  // 6 GPUs: 4 does not divide them
  r.seq = 256;
  r.gpus = 6;
  r.global_batch = 12;
  CHECK(context_parallel_layouts(r) == std::vector<int>{2});
  // the tensor/pipeline layouts are unchanged by the lever
  r.gpus = 8;
  r.global_batch = 16;
  const std::vector<std::pair<int, int>> with_cp = parallel_layouts(r);
  r.allow.clear();
  CHECK(parallel_layouts(r) == with_cp);
  r.allow = {"cp"};

  // FSDP2 with cp 4 on 8 GPUs: 8 / 4 = 2 replicas take 16 / 2 = 8 sequences each; FSDP2 shards over all 8.
  PlanConfig c = config("bf16", 0, "fsdp2", 1, "adamw");
  c.cp = 4;
  c.micro_batch = 2;
  c.grad_accumulation = 4;
  CHECK(data_parallel_degree(r, c) == 2);
  CHECK(sharding_degree(r, c) == 8);
  PlanConfig no_cp = c;
  no_cp.cp = 1;
  CHECK(model_states_lower_bound(r, c) == model_states_lower_bound(r, no_cp));
  const std::string command = predict_command(r, c);
  CHECK_THAT(command, Catch::Contains("--gpus 8 --cp 4 --fsdp full-shard --fsdp2"));
  CHECK_THAT(trainer_settings(r, c), Catch::Contains("torchtitan --parallelism.context_parallel_degree 4 "
                                                     "--parallelism.data_parallel_shard_degree 2 "
                                                     "--training.local_batch_size 2 --training.seq_len 256"));
  CHECK_THAT(describe(c), Catch::Contains(", FSDP2, CP 4, adamw"));
  const Prediction p = predict(make_request(predict_args(r, c)));
  CHECK(p.num_ooms == 0);
  REQUIRE(p.phases.after_backward.has_value());
  CHECK(model_states_lower_bound(r, c) <= *p.phases.after_backward);
  int status = -1;
  test::run_cli(command.substr(std::string("vramsim ").size()), &status);
  CHECK(status == 0);

  // In the grid: only FSDP2 groups in bf16 without QLoRA or offload get CP blocks (LoRA's only without tp or
  // pp, as predict models LoRA), and each block's micro-batches divide the replica's local batch
  // (16 / (8 / (tp x cp))).
  r.allow = {"cp", "lora", "offload"};
  r.threads = 1;
  const PlanResult result = plan(r);  // keep_grid: every configuration of the grid, predicted or skipped
  int cp_configs = 0;
  for (const PlanEvaluation& e : result.grid) {
    if (e.config.cp == 1) {
      continue;
    }
    ++cp_configs;
    INFO(describe(e.config) << " " << e.error);
    CHECK(e.error.empty());
    CHECK(e.config.fsdp == "fsdp2");
    CHECK(e.config.precision == "bf16");
    CHECK((e.config.adapters.empty() || (e.config.adapters == "lora" && e.config.tp == 1)));
    CHECK(e.config.offload.empty());
    CHECK(e.config.micro_batch * e.config.grad_accumulation == 16 / (8 / (e.config.tp * e.config.cp)));
  }
  // 3 checkpointing x 2 optimizers FSDP2 bf16 groups; cp 2, 4, 8 alone give local batches 4, 8, 16: 3 + 4 + 5
  // micro-batches (the divisors). Inside tensor parallelism (tp 2, 4, 8 divide the 8 heads): tp 2 with cp 2
  // (8 / 4 = 2 replicas, local batch 8: 4 divisors) and cp 4 (one replica, 16: 5), tp 4 with cp 2 (16: 5);
  // tp 2 x cp 8 and tp 4 x cp 4 are 16 GPUs. tp 8 leaves no pipeline layout (8 / 8 = 1 GPU for pp). The same
  // 3 x 2 groups with LoRA: cp alone, 3 + 4 + 5.
  CHECK(cp_configs == 3 * 2 * (3 + 4 + 5) + 3 * 2 * (4 + 5 + 5) + 3 * 2 * (3 + 4 + 5));
  // LoRA under CP 4 is torchtune's lora_finetune_distributed with context_parallel_dim, and predict runs it
  PlanConfig lora = c;
  lora.adapters = "lora";
  CHECK_THAT(
      trainer_settings(r, lora),
      Catch::Contains("tune run --nproc_per_node 8 lora_finetune_distributed --config <a *_lora config> "
                      "context_parallel_dim=4 data_parallel_shard_dim=2 batch_size=2 "
                      "gradient_accumulation_steps=4 tokenizer.max_seq_len=256"));
  CHECK_THAT(predict_command(r, lora), Catch::Contains("--cp 4") && Catch::Contains("--lora-rank 16"));
  CHECK(predict(make_request(predict_args(r, lora))).num_ooms == 0);
  // a tp 2 x cp 2 configuration runs through predict: CP inside TP + SP, FSDP2 over the 8 / 2 = 4 ranks
  PlanConfig tp_cp = c;
  tp_cp.tp = 2;
  tp_cp.cp = 2;
  tp_cp.micro_batch = 8;
  tp_cp.grad_accumulation = 1;
  CHECK_THAT(predict_command(r, tp_cp), Catch::Contains("--tp 2") && Catch::Contains("--cp 2"));
  CHECK(predict(make_request(predict_args(r, tp_cp))).num_ooms == 0);
  std::remove(r.model.c_str());
}

// --allow compile with tensor and pipeline layouts: predict compiles with them per decoder layer
// (--compile-scope layer, as torchtitan does; a whole-model --compile with --tp or --pp is refused), so the
// grid keeps the compiled configurations of every layout and predicts them. (ZeRO-3 with compile is refused
// at every layout, tp 1 included: that refusal is predict's, not the layout's.)
TEST_CASE("plan: torch.compile composes with tensor and pipeline layouts", "[predict][composition]") {
  PlanRequest r;
  r.gpu = "h100";
  r.gpus = 4;
  r.global_batch = 8;
  r.seq = 256;
  r.model = write_llama("vramsim_test_plan_compile.json", 256, 1024, 4, 8, 8, 32768, 1024);
  r.allow = {"compile"};
  r.threads = 1;
  const PlanResult result = plan(r);
  int compiled_model_parallel = 0;
  for (const PlanEvaluation& e : result.grid) {
    INFO(describe(e.config) << " " << e.error);
    CHECK((e.error.empty() || (e.config.zero == 3 && e.config.compile)));
    if (e.config.compile && (e.config.tp > 1 || e.config.pp > 1)) {
      CHECK_THAT(predict_command(r, e.config), Catch::Contains("--compile --compile-scope layer"));
      ++compiled_model_parallel;
    }
  }
  CHECK(compiled_model_parallel > 0);  // in the grid (a smaller layout that fits skips them here)
  // and predicted when asked: TP 2 with ZeRO-1, compiled per layer
  PlanConfig tp;
  tp.precision = "bf16";
  tp.micro_batch = 2;
  tp.grad_accumulation = 2;
  tp.optimizer = "adamw";
  tp.zero = 1;
  tp.tp = 2;
  tp.compile = true;
  const Prediction p = predict(make_request(predict_args(r, tp)));
  CHECK(p.num_ooms == 0);
  // without tensor or pipeline parallelism and unsharded, the whole model is compiled
  PlanConfig ddp;
  ddp.precision = "bf16";
  ddp.micro_batch = 2;
  ddp.grad_accumulation = 1;
  ddp.optimizer = "adamw";
  ddp.compile = true;
  CHECK_THAT(predict_command(r, ddp), Catch::EndsWith(" --compile"));
  std::remove(r.model.c_str());
}

// The shards carry every lever of a configuration: the expert-parallel (and context-parallel) degree too,
// which merge once read back as 1. tiny-mixtral on 4 GPUs has EP 2 and 4 layouts (its 64 experts): the merged
// CSV is the single run's, EP rows included.
TEST_CASE("cli: plan --shard and merge keep expert parallelism", "[predict]") {
  const std::string base = "plan --model " + test::test_data("tiny-mixtral.config.json").string() +
                           " --gpu h100 --gpus 4 --global-batch 4 --seq 64 --threads 1";
  int status = -1;
  const std::string single_csv = "vramsim_test_plan_ep_single.csv";
  test::run_cli(base + " --csv " + single_csv, &status);
  REQUIRE(status == 0);
  std::vector<std::string> files;
  for (int k = 1; k <= 2; ++k) {
    const std::string file = "vramsim_test_plan_ep_shard_" + std::to_string(k) + ".json";
    std::ofstream(file) << test::run_cli(base + " --shard " + std::to_string(k) + "/2", &status);
    CHECK(status == 0);
    files.push_back(file);
  }
  const std::string merged_csv = "vramsim_test_plan_ep_merged.csv";
  test::run_cli("merge --csv " + merged_csv + " " + files[0] + " " + files[1], &status);
  CHECK(status == 0);
  const auto read = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string single = read(single_csv);
  // tp, pp, ep, cp = 1, 1, 2, 1 and 1, 1, 4, 1: expert-parallel rows are in the grid
  CHECK_THAT(single, Catch::Contains(",1,1,2,1,") && Catch::Contains(",1,1,4,1,"));
  CHECK(read(merged_csv) == single);
  for (const std::string& f : {single_csv, merged_csv, files[0], files[1]}) {
    std::remove(f.c_str());
  }
}
