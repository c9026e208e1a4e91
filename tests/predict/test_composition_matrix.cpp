// The composition matrix (issue 35): every pair of techniques in the registry (sim/cli/techniques.h), and
// the common triples, on a small Llama. Each combination is either
//   * predicted, and then what must hold whatever the techniques do holds: the bill adds up to the peak
//     allocated bytes (every tensor alive at that event is in one category), reserved >= allocated, the
//     overhead line is their difference, and a scheme that shards parameters (ZeRO-3, FSDP, FSDP2) keeps no
//     more between steps than DDP with the same other techniques; or
//   * refused in one line that names the option and says why: the real library's own refusal (quoted) or a
//     combination vramsim does not model ("not modelled"). Gaps are counted and listed (WARN), not hidden.
// Adding a technique to the registry adds its row and column here.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sim/cli/commands.h"
#include "sim/cli/techniques.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

using cli::Technique;

std::vector<std::string> split_words(std::string_view flags) {
  std::istringstream in{std::string(flags)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    words.push_back(w);
  }
  return words;
}

// The arguments `vramsim predict` parses for the base job plus these techniques' flags; `gpus` (when not 0)
// replaces the data-parallel techniques' --gpus 2, for layouts of more than two parallel dimensions.
RequestArgs parse(const std::vector<const Technique*>& picked, const char* model = "tiny-llama.config.json",
                  int gpus = 0) {
  std::vector<std::string> words =
      split_words("--model " + test::test_data(model).string() + " --gpu h100 --seq 64 --steps 2");
  std::string offload;  // --offload takes one comma-separated list: techniques' items are joined
  for (const Technique* t : picked) {
    const std::vector<std::string> flags = split_words(t->flags);
    for (std::size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] == "--offload" && i + 1 < flags.size()) {
        offload += (offload.empty() ? "" : ",") + flags[++i];
      } else if (flags[i] == "--gpus" && gpus != 0 && i + 1 < flags.size()) {
        ++i;
      } else {
        words.push_back(flags[i]);
      }
    }
  }
  if (!offload.empty()) {
    words.push_back("--offload");
    words.push_back(offload);
  }
  if (gpus != 0) {
    words.push_back("--gpus");
    words.push_back(std::to_string(gpus));
  }
  RequestArgs args;
  args.batch = 2;
  std::string alloc_conf;
  CLI::App app;
  cli::add_request_options(&app, args, alloc_conf);
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 parses a reversed vector
  app.parse(reversed);
  return args;
}

struct Outcome {
  bool predicted = false;
  std::string refusal;  // the InputError's message
  Prediction prediction;
};

Outcome run(const std::vector<const Technique*>& picked, const char* model = "tiny-llama.config.json",
            int gpus = 0) {
  Outcome o;
  try {
    o.prediction = predict(make_request(parse(picked, model, gpus)));
    o.predicted = true;
  } catch (const InputError& e) {
    o.refusal = e.what();
  }
  return o;
}

std::string label(const std::vector<const Technique*>& picked) {
  std::string s;
  for (const Technique* t : picked) {
    s += (s.empty() ? "" : " + ") + std::string(t->name);
  }
  return s;
}

void check_invariants(const std::vector<const Technique*>& picked, const Prediction& p) {
  INFO(label(picked));
  const MemoryBill& b = p.bill;
  CHECK(p.peak_allocated_bytes > 0);
  CHECK(p.peak_reserved_bytes >= p.peak_allocated_bytes);
  CHECK(b.allocator_overhead == p.peak_reserved_bytes - p.peak_allocated_bytes);
  CHECK(b.parameters + b.gradients + b.optimizer_states + b.activations + b.temporaries + b.inputs +
            b.communication + b.kv_cache + b.allocator_rounding ==
        p.peak_allocated_bytes);
  CHECK(b.parameters >= 0);
  CHECK(b.gradients >= 0);
  CHECK(b.optimizer_states >= 0);
  CHECK(b.activations >= 0);
}

// A one-line refusal that names its option and says whose reason it is.
bool is_gap(const std::string& message) { return message.find("not modelled") != std::string::npos; }
void check_refusal(const std::vector<const Technique*>& picked, const std::string& message) {
  INFO(label(picked) + " -> " + message);
  CHECK(message.rfind("--", 0) == 0);
  CHECK(message.find('\n') == std::string::npos);
  const bool library = message.find('"') != std::string::npos || message.find("refuse") != std::string::npos;
  const bool meaningless = message.find("does not apply") != std::string::npos;
  CHECK((is_gap(message) || library || meaningless));
}

bool shards_parameters(const Technique& t) {
  return t.name == "zero3" || t.name == "fsdp" || t.name == "fsdp2";
}

}  // namespace

TEST_CASE(
    "composition matrix: every pair of techniques is predicted with its invariants or refused with a "
    "reason",
    "[predict][composition]") {
  const std::vector<Technique>& all = cli::techniques();
  REQUIRE(all.size() >= 20);
  std::set<std::string> names;
  for (const Technique& t : all) {
    CHECK(names.insert(std::string(t.name)).second);  // unique names
    CHECK_NOTHROW(parse({&t}));                       // every entry's flags parse
  }
  const Technique* ddp = &all.front();
  REQUIRE(ddp->name == "ddp");
  // (data-parallel scheme, other technique) -> allocated bytes before step 2's forward, for predicted pairs
  std::map<std::pair<std::string, std::string>, std::optional<std::int64_t>> between_steps;
  int predicted = 0;
  std::vector<std::string> refusals;  // by the real library, or meaningless
  std::vector<std::string> gaps;
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      if (all[i].family == all[j].family) {
        continue;  // a job has one data-parallel scheme, one precision, ...
      }
      const std::vector<const Technique*> pair{&all[i], &all[j]};
      Outcome o = run(pair);
      if (o.predicted) {
        ++predicted;
        check_invariants(pair, o.prediction);
      } else {
        check_refusal(pair, o.refusal);
        if (is_gap(o.refusal)) {
          gaps.push_back(label(pair) + ": " + o.refusal);
        } else {
          refusals.push_back(label(pair) + ": " + o.refusal);
        }
      }
      if (all[i].family == "data-parallel" && o.predicted) {  // the registry lists the schemes first
        between_steps[{std::string(all[i].name), std::string(all[j].name)}] =
            o.prediction.phases.before_forward;
      }
    }
  }
  // Sharding never keeps more between steps than DDP with the same other technique.
  for (const Technique& s : all) {
    if (!shards_parameters(s)) {
      continue;
    }
    for (const Technique& t : all) {
      if (t.family == s.family || t.family == "inference") {
        continue;
      }
      const auto sharded = between_steps.find({std::string(s.name), std::string(t.name)});
      const auto replicated = between_steps.find({std::string(ddp->name), std::string(t.name)});
      if (sharded == between_steps.end() || replicated == between_steps.end()) {
        continue;  // one of the two is refused
      }
      INFO(std::string(s.name) + " + " + std::string(t.name) + " against ddp + " + std::string(t.name));
      REQUIRE(sharded->second);
      REQUIRE(replicated->second);
      CHECK(*sharded->second <= *replicated->second);
    }
  }
  WARN(
      fmt::format("{} pairs predicted; {} refused as the libraries refuse them (or meaningless):\n{}\n{} not "
                  "modelled:\n{}",
                  predicted, refusals.size(), fmt::join(refusals, "\n"), gaps.size(), fmt::join(gaps, "\n")));
  CHECK(predicted > 0);
}

TEST_CASE("composition matrix: the recipes people launch, three and four techniques at once",
          "[predict][composition]") {
  std::map<std::string, const Technique*> by_name;
  for (const Technique& t : cli::techniques()) {
    by_name[std::string(t.name)] = &t;
  }
  const std::vector<std::vector<std::string>> recipes{
      // answer.ai's fsdp_qlora (--reentrant_checkpointing True)
      {"fsdp", "qlora", "checkpoint-reentrant", "bf16"},
      {"fsdp", "qlora", "checkpoint-full", "bf16"},                       // PEFT's FSDP QLoRA
      {"zero3", "qlora", "checkpoint-full", "bf16"},                      // PEFT's DeepSpeed ZeRO-3 QLoRA
      {"lora", "checkpoint-full", "offload-torchtune", "chunked-ce"},     // torchtune's LoRA memory flags
      {"fsdp2", "checkpoint-op", "compile-layer", "bf16-master"},         // torchtitan
      {"fsdp", "lora", "checkpoint-full", "bf16"},                        // PEFT's FSDP LoRA
      {"ddp", "qlora", "checkpoint-full"},                                // QLoRA with DDP
      {"lora", "checkpoint-reentrant", "offload-activations"},            // transformers 4.x + save_on_cpu
      {"fsdp2", "checkpoint-reentrant", "compile-layer", "bf16-master"},  // traced as non-reentrant
      {"fsdp2", "pp-torchtitan", "checkpoint-full", "compile-layer", "bf16-master"},  // torchtitan with PP
      {"bf16", "checkpoint-full", "offload-activations"},             // full fine-tuning with save_on_cpu
      {"fsdp2", "checkpoint-op", "compile-layer", "float8"},          // torchtitan's float8 runs
      {"fsdp2", "cp", "checkpoint-full", "compile-layer", "float8"},  // torchtitan's long-context runs
      {"fsdp2", "cp", "checkpoint-op", "float8-rowwise"},
      {"fsdp2", "qlora-torchao", "checkpoint-full", "bf16"},  // torchtune's lora_finetune_distributed QLoRA
      // torchtune's lora_finetune_distributed with context_parallel_dim 2 (pytorch/torchtune #2879): LoRA,
      // and QLoRA on NF4Tensor weights, FSDP2 over dp_shard x cp
      {"fsdp2", "cp", "lora"},
      {"fsdp2", "cp", "lora", "checkpoint-full", "bf16"},
      {"fsdp2", "cp", "qlora-torchao", "checkpoint-full", "bf16"},
      {"fsdp2", "cp", "dora", "checkpoint-full", "compile-layer"},
  };
  for (const std::vector<std::string>& recipe : recipes) {
    std::vector<const Technique*> picked;
    for (const std::string& n : recipe) {
      REQUIRE(by_name.count(n) == 1);
      picked.push_back(by_name[n]);
    }
    const Outcome o = run(picked);
    INFO(label(picked) + (o.predicted ? "" : " -> " + o.refusal));
    REQUIRE(o.predicted);
    check_invariants(picked, o.prediction);
  }
  // torchtitan's 2D, 3D and 4D runs (benchmarks/llama3_h100_202412_torchtitan.md Tables 4-6: FSDP x TP,
  // x PP, x CP, with compile and Float8: float8 tensor parallelism), on 2 GPUs per dimension
  const std::vector<std::pair<std::vector<std::string>, int>> model_parallel{
      {{"fsdp2", "tp", "checkpoint-full", "compile-layer", "float8"}, 4},
      {{"fsdp2", "tp", "checkpoint-op", "compile-layer", "float8-rowwise"}, 4},  // regular TP, rowwise
      {{"fsdp2", "tp", "pp-torchtitan", "checkpoint-full", "compile-layer", "float8"}, 8},
      {{"fsdp2", "tp", "pp-torchtitan", "cp", "checkpoint-full", "compile-layer"}, 16},
      {{"fsdp2", "tp", "pp-torchtitan", "cp", "checkpoint-full", "compile-layer", "float8"}, 16},
  };
  for (const auto& [names, gpus] : model_parallel) {
    std::vector<const Technique*> picked;
    for (const std::string& n : names) {
      REQUIRE(by_name.count(n) == 1);
      picked.push_back(by_name[n]);
    }
    const Outcome o = run(picked, "tiny-llama.config.json", gpus);
    INFO(label(picked) + (o.predicted ? "" : " -> " + o.refusal));
    REQUIRE(o.predicted);
    check_invariants(picked, o.prediction);
  }
}

// Context parallelism splits the sequence over data-parallel ranks, so the pairs above meet it without one;
// here it runs over FSDP2 (torchtitan's and torchtune's dp_shard x cp) with every technique of another
// family: predicted with the invariants or refused with a reason. The PEFT methods that act on linear layers
// and torchtune's QLoRA must be predicted (torchtune's lora_finetune_distributed.py takes
// context_parallel_dim).
TEST_CASE("composition matrix: context parallelism over FSDP2 with every other technique",
          "[predict][composition][context-parallel]") {
  const std::vector<Technique>& all = cli::techniques();
  std::map<std::string, const Technique*> by_name;
  for (const Technique& t : all) {
    by_name[std::string(t.name)] = &t;
  }
  const std::set<std::string> must_predict{"lora", "qlora-torchao", "dora", "lora-fa", "loha", "lokr", "ia3"};
  int predicted = 0;
  std::vector<std::string> refused;
  for (const Technique& t : all) {
    if (t.family == "data-parallel" || t.name == "cp") {
      continue;
    }
    const std::vector<const Technique*> picked{by_name.at("fsdp2"), by_name.at("cp"), &t};
    const Outcome o = run(picked);
    INFO(label(picked) + (o.predicted ? "" : " -> " + o.refusal));
    if (must_predict.count(std::string(t.name)) != 0) {
      CHECK(o.predicted);
    }
    if (o.predicted) {
      ++predicted;
      check_invariants(picked, o.prediction);
    } else {
      check_refusal(picked, o.refusal);
      refused.push_back(label(picked) + ": " + o.refusal);
    }
  }
  WARN(fmt::format("fsdp2 + cp: {} predicted, {} refused:\n{}", predicted, refused.size(),
                   fmt::join(refused, "\n")));
  CHECK(predicted >= static_cast<int>(must_predict.size()));
}

// The mixture-of-experts rows on a model that has experts (on tiny-llama they do not apply): each MoE
// technique with every technique of another family, on a tiny Mixtral (64 experts, top-2), predicted with
// the invariants or refused with a reason, as above.
TEST_CASE("composition matrix: the mixture-of-experts techniques on a Mixtral", "[predict][composition]") {
  const std::vector<Technique>& all = cli::techniques();
  int predicted = 0;
  std::vector<std::string> refused;
  for (const Technique& moe : all) {
    if (moe.family != "moe") {
      continue;
    }
    for (const Technique& other : all) {
      if (other.family == moe.family) {
        continue;
      }
      const std::vector<const Technique*> pair{&moe, &other};
      const Outcome o = run(pair, "tiny-mixtral.config.json");
      if (o.predicted) {
        ++predicted;
        check_invariants(pair, o.prediction);
      } else {
        check_refusal(pair, o.refusal);
        refused.push_back(label(pair) + ": " + o.refusal);
      }
    }
  }
  WARN(fmt::format("mixture-of-experts: {} pairs predicted, {} refused:\n{}", predicted, refused.size(),
                   fmt::join(refused, "\n")));
  // Megatron's MoE with DDP, torchtitan's EP over FSDP2 and with checkpointing, each technique alone, are the
  // combinations people run.
  std::map<std::string, const Technique*> by_name;
  for (const Technique& t : all) {
    by_name[std::string(t.name)] = &t;
  }
  for (const std::vector<std::string>& recipe : std::vector<std::vector<std::string>>{
           {"ep", "ddp"},
           {"ep", "ddp", "checkpoint-full", "bf16-master"},
           // torchtitan's EP over FSDP2 (its MoE, fp32 shards, bf16 compute)
           {"ep", "fsdp2", "bf16-master"},
           {"ep", "fsdp2", "bf16-master", "checkpoint-full"},
           {"ep", "fsdp2", "bf16-master", "checkpoint-op"},
           {"ep", "fsdp2", "bf16-master", "cp"},
           // torchtitan's deepseek_v3_16b.toml: compile.components = ["loss"], the MoE blocks eager
           {"ep", "fsdp2", "bf16-master", "checkpoint-op", "compile-loss"},
           {"moe-torchtitan", "fsdp2", "checkpoint-full"},
           {"moe-megatron", "checkpoint-full"},
           {"moe-imbalance", "fsdp2"},
           {"moe-imbalance", "lora"}}) {
    std::vector<const Technique*> picked;
    for (const std::string& n : recipe) {
      REQUIRE(by_name.count(n) == 1);
      picked.push_back(by_name[n]);
    }
    const Outcome o = run(picked, "tiny-mixtral.config.json");
    INFO(label(picked) + (o.predicted ? "" : " -> " + o.refusal));
    REQUIRE(o.predicted);
    check_invariants(picked, o.prediction);
  }
  // Megatron's EP with TP + SP (issue 42): the pair on 2 GPUs is Megatron's own refusal (expert tensor
  // parallelism defaults to --tp, and ETP 2 x EP 2 does not divide 2 ranks); on 4 GPUs (DDP over 2) it is
  // predicted, and on 2 with whole experts (--expert-tensor-parallel 1) the EP ranks are the TP ranks.
  const Technique whole_experts{"ep-etp1", "moe", "Megatron's EP with expert_tensor_parallel_size 1",
                                "--ep 2 --expert-tensor-parallel 1"};
  const Outcome pair = run({by_name["ep"], by_name["tp"]}, "tiny-mixtral.config.json");
  INFO(pair.refusal);
  CHECK_THAT(pair.refusal,
             Catch::Matchers::Contains("is not divisible by expert_tensor_model_pipeline_parallel"));
  // torchtitan's MoE with TP + SP (issue 42): alone on 2 GPUs (TensorParallel experts), and with EP over
  // FSDP2 on 4 GPUs (dp_shard 2 x tp 2), with etp 1 (its default: EP borrows the TP ranks, efsdp 2) and etp
  // = tp (ExpertTensorParallel, efsdp 1).
  const Technique torchtitan_etp{"ep-etp-tp", "moe",
                                 "torchtitan's EP with expert_tensor_parallel_degree = TP",
                                 "--ep 2 --expert-tensor-parallel 2"};
  for (const auto& [picked, gpus] : std::vector<std::pair<std::vector<const Technique*>, int>>{
           {{by_name["ep"], by_name["tp"], by_name["ddp"]}, 4},
           {{by_name["ep"], by_name["tp"], by_name["ddp"], by_name["checkpoint-full"]}, 4},
           {{&whole_experts, by_name["tp"]}, 0},
           {{by_name["moe-torchtitan"], by_name["tp"]}, 0},
           {{by_name["ep"], by_name["tp"], by_name["fsdp2"], by_name["bf16-master"]}, 4},
           {{by_name["ep"], by_name["tp"], by_name["fsdp2"], by_name["bf16-master"],
             by_name["checkpoint-op"]},
            4},
           {{&torchtitan_etp, by_name["tp"], by_name["fsdp2"], by_name["bf16-master"]}, 4}}) {
    const Outcome o = run(picked, "tiny-mixtral.config.json", gpus);
    INFO(label(picked) + (o.predicted ? "" : " -> " + o.refusal));
    REQUIRE(o.predicted);
    check_invariants(picked, o.prediction);
  }
}
