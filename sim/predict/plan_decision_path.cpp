// The decision path of `vramsim plan` (plan.h): from fp32 with the whole local batch at once, the levers in
// the order of their cost in speed, each until the run fits. It runs before the grid, in every shard: the
// fastest of its configurations that fits is where the search's bound on speed starts (plan_search.cpp).
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/predict/plan.h"
#include "sim/predict/plan_grid.h"

namespace vramsim::plan_detail {

void decide(const PlanRequest& r, PlanResult& out) {
  const std::int64_t local_batch = r.global_batch / r.gpus;
  std::map<std::string, PlanEvaluation> cache;
  const auto eval_cached = [&](const PlanConfig& c) {
    auto it = cache.find(key_of(c));
    if (it == cache.end()) {
      it = cache.emplace(key_of(c), evaluate(r, c, out.limit_bytes)).first;
    }
    return it->second;
  };
  PlanConfig state;
  state.precision = "fp32";
  state.micro_batch = local_batch;
  const auto step = [&](const std::string& lever, const std::string& setting, const PlanConfig& c) {
    out.decision_path.push_back(PlanStep{lever, setting, eval_cached(c)});
    return out.decision_path.back().result.fits;
  };
  if (step("baseline", describe(state), state)) {
    return;
  }
  // Each lever: its settings in order, from the cheapest in speed; a lever that did not make the run fit
  // stays at its last setting the simulator accepted, the lever's strongest by design (bf16, which with the
  // later levers holds 2 bytes a parameter where amp-bf16 holds 4; full sharding, FSDP2 last so that the
  // layouts after it can add pipeline stages; the most model parallelism), which is not always the one that
  // needed least at that point (bf16's fp32 master weights can need more than amp-bf16 while the optimizer is
  // AdamW), and the next lever is added on top.
  const auto lever = [&](const std::string& name,
                         const std::vector<std::pair<std::string, PlanConfig>>& options) {
    for (const auto& [setting, c] : options) {
      if (step(name, setting, c)) {
        return true;
      }
      if (out.decision_path.back().result.error.empty()) {
        state = c;
      }
    }
    return false;
  };
  const auto with = [&state](const std::function<void(PlanConfig&)>& f) {
    PlanConfig c = state;
    f(c);
    return c;
  };
  std::vector<std::pair<std::string, PlanConfig>> options;
  for (const char* p : {"amp-bf16", "bf16"}) {
    options.emplace_back(p, with([p](PlanConfig& c) { c.precision = p; }));
  }
  if (lever("mixed precision", options)) {
    return;
  }
  options.clear();
  std::vector<std::int64_t> micros = divisors(local_batch);
  for (auto it = micros.rbegin() + 1; it < micros.rend(); ++it) {
    const std::int64_t m = *it;
    options.emplace_back(fmt::format("micro-batch {} x {} accumulation", m, local_batch / m),
                         with([m, local_batch](PlanConfig& c) {
                           c.micro_batch = m;
                           c.grad_accumulation = static_cast<int>(local_batch / m);
                         }));
  }
  if (lever("micro-batch with accumulation", options)) {
    return;
  }
  options.clear();
  for (const char* ck : {"selective-op", "full"}) {
    options.emplace_back(std::string("checkpointing ") + ck,
                         with([ck](PlanConfig& c) { c.checkpointing = ck; }));
  }
  if (lever("activation checkpointing", options)) {
    return;
  }
  if (r.gpus > 1) {
    options.clear();
    for (int z : {1, 2, 3}) {
      options.emplace_back(fmt::format("ZeRO-{}", z), with([z](PlanConfig& c) { c.zero = z; }));
    }
    options.emplace_back("FSDP2 full shard", with([](PlanConfig& c) {
                           c.zero = 0;
                           c.fsdp = "fsdp2";
                         }));
    if (lever("ZeRO stage / FSDP", options)) {
      return;
    }
    // The parallel layouts after (1, 1), the micro-batch kept: the local batch grows as the data-parallel
    // degree falls, so the accumulation does. A pipeline runs ZeRO-1 where the state has ZeRO-2/3
    // (DeepSpeed's PipelineEngine), and one replica shards nothing.
    options.clear();
    const std::vector<Layout> all = layouts(r);
    for (auto it = all.begin() + 1; it < all.end(); ++it) {
      const Layout l = *it;
      options.emplace_back(l.ep > 1   ? fmt::format("EP {}", l.ep)
                           : l.pp > 1 ? fmt::format("TP {} + SP, PP {}", l.tp, l.pp)
                                      : fmt::format("TP {} + SP", l.tp),
                           with([&r, l](PlanConfig& c) {
                             c.tp = l.tp;
                             c.pp = l.pp;
                             c.ep = l.ep;
                             const int dp = data_parallel_degree(r, c);
                             c.grad_accumulation = static_cast<int>(r.global_batch / dp / c.micro_batch);
                             if (l.pp > 1 && c.zero >= 2) {
                               c.zero = 1;
                             }
                             if (dp == 1) {
                               c.zero = 0;
                               c.fsdp.clear();
                             }
                           }));
    }
    if (!options.empty() && lever("parallel layout", options)) {
      return;
    }
  }
  options = {{"adamw-8bit", with([](PlanConfig& c) { c.optimizer = "adamw-8bit"; })}};
  if (lever("8-bit optimizer", options)) {
    return;
  }
  options.clear();
  for (const char* a : {"lora", "qlora"}) {
    if (allowed(r, a)) {
      options.emplace_back(std::string(a == std::string("lora") ? "LoRA" : "QLoRA (nf4)"),
                           with([a](PlanConfig& c) { c.adapters = a; }));
    }
  }
  if (!options.empty() && lever("LoRA / QLoRA", options)) {
    return;
  }
  if (allowed(r, "offload")) {
    options = {{"offload activations", with([](PlanConfig& c) { c.offload = "activations"; })}};
    if (!state.fsdp.empty()) {
      options.emplace_back("offload parameters (FSDP CPUOffload)",
                           with([](PlanConfig& c) { c.offload = "params"; }));
    } else if (state.pp == 1) {
      options.emplace_back("offload optimizer (ZeRO-Offload)", with([](PlanConfig& c) {
                             c.offload = "optimizer";
                             c.zero = std::max(c.zero, 2);
                           }));
    }
    lever("offload", options);
  }
}

}  // namespace vramsim::plan_detail
