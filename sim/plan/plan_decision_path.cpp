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

#include "sim/plan/plan.h"
#include "sim/plan/plan_grid.h"

namespace vramsim::plan_detail {

namespace {

// The decision path's state: the configuration reached so far and the predictions made (one per distinct
// configuration). Each lever method tries its settings in order and returns true once the run fits.
class DecisionPath {
 public:
  DecisionPath(const PlanRequest& r, PlanResult& out)
      : m_r(r), m_out(out), m_local_batch(r.global_batch / r.gpus) {
    m_state.precision = "fp32";
    m_state.micro_batch = m_local_batch;
  }

  bool baseline() { return step("baseline", describe(m_state), m_state); }

  bool mixed_precision() {
    Options options;
    for (const char* p : {"amp-bf16", "bf16"}) {
      options.emplace_back(p, with([p](PlanConfig& c) { c.precision = p; }));
    }
    return lever("mixed precision", options);
  }

  bool micro_batch() {
    Options options;
    const std::int64_t local_batch = m_local_batch;
    std::vector<std::int64_t> micros = divisors(local_batch);
    for (auto it = micros.rbegin() + 1; it < micros.rend(); ++it) {
      const std::int64_t m = *it;
      options.emplace_back(fmt::format("micro-batch {} x {} accumulation", m, local_batch / m),
                           with([m, local_batch](PlanConfig& c) {
                             c.micro_batch = m;
                             c.grad_accumulation = static_cast<int>(local_batch / m);
                           }));
    }
    return lever("micro-batch with accumulation", options);
  }

  bool checkpointing() {
    Options options;
    for (const char* ck : {"selective-op", "full"}) {
      options.emplace_back(std::string("checkpointing ") + ck,
                           with([ck](PlanConfig& c) { c.checkpointing = ck; }));
    }
    return lever("activation checkpointing", options);
  }

  bool sharding() {
    Options options;
    for (int z : {1, 2, 3}) {
      options.emplace_back(fmt::format("ZeRO-{}", z), with([z](PlanConfig& c) { c.zero = z; }));
    }
    options.emplace_back("FSDP2 full shard", with([](PlanConfig& c) {
                           c.zero = 0;
                           c.fsdp = "fsdp2";
                         }));
    return lever("ZeRO stage / FSDP", options);
  }

  // The parallel layouts after (1, 1), the micro-batch kept: the local batch grows as the data-parallel
  // degree falls, so the accumulation does. A pipeline runs ZeRO-1 where the state has ZeRO-2/3
  // (DeepSpeed's PipelineEngine), and one replica shards nothing.
  bool parallel_layout() {
    Options options;
    const PlanRequest& r = m_r;
    const std::vector<Layout> all = layouts(r);
    for (auto it = all.begin() + 1; it < all.end(); ++it) {
      const Layout l = *it;
      options.emplace_back(l.ep > 1   ? fmt::format("EP {}", l.ep)
                           : l.cp > 1 ? fmt::format("CP {}", l.cp)
                           : l.pp > 1 ? fmt::format("TP {} + SP, PP {}", l.tp, l.pp)
                                      : fmt::format("TP {} + SP", l.tp),
                           with([&r, l](PlanConfig& c) {
                             c.tp = l.tp;
                             c.pp = l.pp;
                             c.ep = l.ep;
                             c.cp = l.cp;
                             if (l.cp > 1) {  // as torchtitan runs it (layout_applies, plan_grid.cpp)
                               c.precision = "bf16";
                               c.zero = 0;
                               c.fsdp = "fsdp2";
                             }
                             const int dp = data_parallel_degree(r, c);
                             c.grad_accumulation = static_cast<int>(r.global_batch / dp / c.micro_batch);
                             if (l.pp > 1 && c.zero >= 2) {
                               c.zero = 1;
                             }
                             if (sharding_degree(r, c) == 1) {  // one rank: nothing to shard over (with
                               c.zero = 0;                      // CP, FSDP2 shards over the CP ranks too)
                               c.fsdp.clear();
                             }
                           }));
    }
    return !options.empty() && lever("parallel layout", options);
  }

  bool optimizer_8bit() {
    return lever("8-bit optimizer",
                 {{"adamw-8bit", with([](PlanConfig& c) { c.optimizer = "adamw-8bit"; })}});
  }

  bool adapters() {
    Options options;
    for (const char* a : {"lora", "qlora"}) {
      if (allowed(m_r, a)) {
        options.emplace_back(std::string(a == std::string("lora") ? "LoRA" : "QLoRA (nf4)"),
                             with([a](PlanConfig& c) { c.adapters = a; }));
      }
    }
    return !options.empty() && lever("LoRA / QLoRA", options);
  }

  bool offload() {
    if (!allowed(m_r, "offload")) {
      return false;
    }
    Options options = {{"offload activations", with([](PlanConfig& c) { c.offload = "activations"; })}};
    if (!m_state.fsdp.empty()) {
      options.emplace_back("offload parameters (FSDP CPUOffload)",
                           with([](PlanConfig& c) { c.offload = "params"; }));
    } else if (m_state.pp == 1) {
      options.emplace_back("offload optimizer (ZeRO-Offload)", with([](PlanConfig& c) {
                             c.offload = "optimizer";
                             c.zero = std::max(c.zero, 2);
                           }));
    }
    return lever("offload", options);
  }

 private:
  using Options = std::vector<std::pair<std::string, PlanConfig>>;

  PlanEvaluation eval_cached(const PlanConfig& c) {
    auto it = m_cache.find(key_of(c));
    if (it == m_cache.end()) {
      it = m_cache.emplace(key_of(c), evaluate(m_r, c, m_out.limit_bytes)).first;
    }
    return it->second;
  }

  bool step(const std::string& lever, const std::string& setting, const PlanConfig& c) {
    m_out.decision_path.push_back(PlanStep{lever, setting, eval_cached(c)});
    return m_out.decision_path.back().result.fits;
  }

  // A lever that did not make the run fit stays at its last setting the simulator accepted, the lever's
  // strongest by design (bf16, which with the later levers holds 2 bytes a parameter where amp-bf16 holds 4;
  // full sharding, FSDP2 last so that the layouts after it can add pipeline stages; the most model
  // parallelism), which is not always the one that needed least at that point (bf16's fp32 master weights
  // can need more than amp-bf16 while the optimizer is AdamW), and the next lever is added on top.
  bool lever(const std::string& name, const Options& options) {
    for (const auto& [setting, c] : options) {
      if (step(name, setting, c)) {
        return true;
      }
      if (m_out.decision_path.back().result.error.empty()) {
        m_state = c;
      }
    }
    return false;
  }

  // The state reached so far with `f` applied: the settings of a lever are built before it runs, from the
  // state the previous levers left.
  PlanConfig with(const std::function<void(PlanConfig&)>& f) const {
    PlanConfig c = m_state;
    f(c);
    return c;
  }

  const PlanRequest& m_r;
  PlanResult& m_out;
  const std::int64_t m_local_batch;
  std::map<std::string, PlanEvaluation> m_cache;
  PlanConfig m_state;
};

}  // namespace

void decide(const PlanRequest& r, PlanResult& out) {
  DecisionPath path(r, out);
  // The levers in the order of their cost in speed; the first that makes the run fit ends the path.
  (void)(path.baseline() || path.mixed_precision() || path.micro_batch() || path.checkpointing() ||
         (r.gpus > 1 && (path.sharding() || path.parallel_layout())) || path.optimizer_8bit() ||
         path.adapters() || path.offload());
}

}  // namespace vramsim::plan_detail
