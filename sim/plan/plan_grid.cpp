// The grid `vramsim plan` searches: the parallel layouts, the levers' settings in grid order, cut into
// groups and families (plan_grid.h), and the request's checks.
#include "sim/plan/plan_grid.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/thread_pool.h"
#include "sim/engine/gpu_table.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"
#include "sim/predict/step_prediction.h"
#include "sim/training/training_options.h"

namespace vramsim {
namespace plan_detail {

bool allowed(const PlanRequest& r, std::string_view lever) {
  return std::find(r.allow.begin(), r.allow.end(), lever) != r.allow.end();
}

std::string key_of(const PlanConfig& c) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.precision, c.micro_batch,
                     c.grad_accumulation, c.checkpointing, c.zero, c.fsdp, c.tp, c.pp, c.optimizer,
                     c.adapters, c.offload, c.compile, c.ep, c.cp, c.float8, c.float8_all_gather);
}

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) {
      out.push_back(d);
    }
  }
  return out;
}

std::vector<Layout> layouts(const PlanRequest& r) {
  const ModelConfig m = load_model(r.model);
  const bool megatron_code = layer_code(r.model_code.empty() ? m.code : r.model_code).follows_transformers();
  std::vector<Layout> out{{1, 1}};
  if (m.moe.n_experts > 0 && megatron_code && !m.moe.fused_experts) {
    // torchtitan's expert parallelism over FSDP2: ep = 2, 4, ... dividing the GPUs and the experts
    for (int e = 2; e <= r.gpus && r.gpus % e == 0 && m.moe.n_experts % e == 0; e *= 2) {
      out.push_back({1, 1, e});
    }
    return out;
  }
  if (!megatron_code || m.moe.n_experts > 0) {
    return out;  // predict models tp (with sequence parallelism) and pp only over transformers' code
  }
  if (allowed(r, "cp")) {
    // torchtitan's context parallelism over FSDP2, before tensor parallelism (Note [Parallel layouts]):
    // cp = 2, 4, ... dividing the GPUs, the sequence cut into 2 x cp load-balanced chunks
    // (context_parallel's _RoundRobinLoadBalancer, as predict's --cp requires)
    for (int c = 2; c <= r.gpus && r.gpus % c == 0 && r.seq % (2 * c) == 0; c *= 2) {
      out.push_back({1, 1, 1, c});
    }
  }
  // Every condition fails for all larger powers of two once it fails for one, so the first failure ends it.
  int tp_max = 1;
  for (int t = 2; t <= std::min(r.gpus_per_node, r.gpus); t *= 2) {
    const bool splits =
        r.gpus % t == 0 && m.n_heads % t == 0 && m.n_kv_heads % t == 0 && m.d_ff % t == 0 && r.seq % t == 0;
    if (!splits) {
      break;
    }
    out.push_back({t, 1});
    tp_max = t;
  }
  std::vector<int> stages;
  for (int p = 2; p <= r.gpus / tp_max; ++p) {
    if ((r.gpus / tp_max) % p == 0 && m.n_layers % p == 0) {
      out.push_back({tp_max, p});
      stages.push_back(p);
    }
  }
  if (allowed(r, "cp")) {
    // context parallelism inside tensor parallelism, as torchtitan's 4D runs it (predict --cp with --tp
    // --sequence-parallel): the sequence cut into 2 x cp chunks, then each rank's seq / cp tokens split over
    // the tp ranks by sequence parallelism; after every layout above, so a smaller one that fits skips them
    for (int t = 2; t <= tp_max; t *= 2) {
      for (int c = 2; r.gpus % (t * c) == 0 && r.seq % (2 * c) == 0 && (r.seq / c) % t == 0; c *= 2) {
        out.push_back({t, 1, 1, c});
      }
    }
    // and inside each pipeline layout (tp_max x pp, tp_max 1 when the heads do not split): torchtitan's
    // Table 6 runs CP inside TP 8 x PP 8 (benchmarks/llama3_h100_202412_torchtitan.md); every stage's ring
    // attention runs on the rank's seq / cp tokens. Last: the largest layouts of all.
    for (const int p : stages) {
      for (int c = 2; r.gpus % (tp_max * p * c) == 0 && r.seq % (2 * c) == 0 && (r.seq / c) % tp_max == 0;
           c *= 2) {
        out.push_back({tp_max, p, 1, c});
      }
    }
  }
  return out;
}

namespace {

// Whether the simulator (or the libraries) run `c` with this layout at all.
bool layout_applies(const PlanRequest& r, const PlanConfig& c, const Layout& l) {
  const bool model_parallel = l.tp > 1 || l.pp > 1;
  if (model_parallel && !c.adapters.empty()) {
    return false;  // predict models LoRA/QLoRA without tp/pp (torch.compile with them per layer:
                   // plan_report.cpp)
  }
  if (l.pp > 1 && c.zero >= 2) {
    return false;  // DeepSpeed's PipelineEngine: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
                   // parallelism"
  }
  if (l.ep > 1 && (c.fsdp != "fsdp2" || c.precision != "bf16" || !c.adapters.empty() || !c.offload.empty() ||
                   c.compile)) {
    return false;  // predict models expert parallelism as torchtitan runs it: FSDP2, fp32 shards, bf16
  }
  if (l.cp > 1 &&
      (c.fsdp != "fsdp2" || c.precision != "bf16" || c.adapters == "qlora" || !c.offload.empty())) {
    // context parallelism as torchtitan runs it: FSDP2 (fp32 shards, bf16 compute), compiled or not, and
    // torchtitan offloads nothing to the host; with LoRA as torchtune's lora_finetune_distributed runs it
    // (context_parallel_dim, FSDP2 over dp_shard x cp). The qlora lever is bitsandbytes' NF4, which predict
    // does not model under FSDP2 (torchtune's NF4Tensor QLoRA, --base-weights torchao-nf4, composes with
    // --cp)
    return false;
  }
  const bool sharded = c.zero > 0 || !c.fsdp.empty();
  return !(r.gpus > 1 && sharded && r.gpus / (l.tp * l.pp) == 1);  // one replica: nothing to shard over
}

// Note [The float8 lever]: --allow float8 adds torchao's float8 training as torchtitan's Float8Converter
// applies it (torchtitan/components/quantization/float8.py; predict's --float8, sim/training/float8_linear.h)
// on a GPU that runs it (float8_supported(): compute capability >= 8.9 with FP8 tensor cores, else
// torchtitan skips the conversion or torch._scaled_mm refuses). Two settings: tensorwise
// (Float8LinearConfig(), torchtitan's default recipe) and rowwise (recipe_name "rowwise"). Under FSDP2
// tensorwise gathers its weights in float8 (enable_fsdp_float8_all_gather, which torchtitan's float8 docs
// launch tensorwise with): fewer bytes in the all-gather buffers and the unsharded weights, and less time in
// the all-gather, so the grid does not also try tensorwise gathering bf16; torchtitan refuses it with a
// recipe_name (rowwise). The groups are the ones a torchtitan job runs: FSDP2 or one GPU (no DDP or ZeRO),
// torchtitan's AdamW (no 8-bit optimizer), nothing offloaded; what predict refuses of them (float8 needs
// --precision bf16 and no adapters, ...) is left out by predict's own validation (predict_accepts()), not by
// a second copy of its rules. The model states are those without float8 (the parameters stay in their dtype;
// the float8 casts and their scales are temporaries and activations), so model_states_lower_bound() stays a
// lower bound.
bool float8_group(const PlanRequest& r, const PlanConfig& c) {
  const bool torchtitan_sharding = c.zero == 0 && (c.fsdp == "fsdp2" || r.gpus == 1);
  return torchtitan_sharding && c.optimizer == "adamw" && c.offload.empty();
}

// Whether predict takes `base` with layout `l` (make_request's validation, what `vramsim predict` runs
// before any simulation), tried on the layout's smallest micro-batch.
bool predict_accepts(const PlanRequest& r, const PlanConfig& base, const Layout& l) {
  const std::vector<PlanConfig> configs = block_configs(r, base, l);
  try {
    (void)make_request(predict_args(r, configs.front()));
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// The sequences per step of one data-parallel replica under layout `l`.
std::int64_t local_batch_of(const PlanRequest& r, const Layout& l) {
  return r.global_batch / (r.gpus / (l.tp * l.pp * l.cp));
}

// The group of settings `base`: a block for each layout it runs with, numbered from `total` on (which it
// advances past them).
Group group_of(const PlanRequest& r, const PlanConfig& base, const std::vector<Layout>& all_layouts,
               std::size_t& total) {
  Group group;
  group.base = base;
  for (const Layout& l : all_layouts) {
    if (!layout_applies(r, base, l) || (!base.float8.empty() && !predict_accepts(r, base, l))) {
      continue;
    }
    Block block;
    block.layout = l;
    block.first = total;
    block.size = divisors(local_batch_of(r, l)).size();
    total += block.size;
    group.blocks.push_back(std::move(block));
  }
  return group;
}

}  // namespace

std::vector<PlanConfig> block_configs(const PlanRequest& r, const PlanConfig& base, const Layout& l) {
  const std::int64_t local_batch = local_batch_of(r, l);
  std::vector<PlanConfig> out;
  for (std::int64_t micro : divisors(local_batch)) {
    PlanConfig c = base;
    c.tp = l.tp;
    c.pp = l.pp;
    c.ep = l.ep;
    c.cp = l.cp;
    c.micro_batch = micro;
    c.grad_accumulation = static_cast<int>(local_batch / micro);
    out.push_back(c);
  }
  return out;
}

std::size_t expand_family(const PlanRequest& r, Family& f) {
  std::size_t n = 0;
  for (Group& g : f.groups) {
    for (Block& b : g.blocks) {
      b.configs = block_configs(r, g.base, b.layout);
      b.local = n;
      n += b.configs.size();
    }
  }
  return n;
}

std::vector<Family> grid_families(const PlanRequest& r, std::size_t& total) {
  struct Sharding {
    int zero;
    const char* fsdp;
  };
  std::vector<Sharding> shardings{{0, ""}};
  if (r.gpus > 1) {
    shardings = {{0, ""}, {1, ""}, {2, ""}, {3, ""}, {0, "fsdp2"}};
  }
  std::vector<std::string> adapters{""};
  for (const char* a : {"lora", "qlora"}) {
    if (allowed(r, a)) {
      adapters.emplace_back(a);
    }
  }
  std::vector<std::string> offloads{""};
  if (allowed(r, "offload")) {
    offloads = {"", "activations", "optimizer"};
  }
  std::vector<bool> compiles{false};
  if (allowed(r, "compile")) {
    compiles.push_back(true);
  }
  std::vector<std::string> float8s{""};
  if (allowed(r, "float8") && float8_supported(r)) {
    float8s = {"", "tensorwise", "rowwise"};
  }
  const std::vector<Layout> all_layouts = layouts(r);
  std::vector<Family> families;
  std::map<std::string, std::size_t> family_of;  // by the settings a family shares
  total = 0;
  for (const char* precision : {"amp-bf16", "bf16"}) {
    for (const std::string& float8 : float8s) {
      for (const char* ckpt : {"none", "selective-op", "full"}) {
        for (const Sharding& sharding : shardings) {
          for (const char* optimizer : {"adamw", "adamw-8bit"}) {
            for (const std::string& adapter : adapters) {
              for (const std::string& offload : offloads) {
                // ZeRO-Offload moves the optimizer with ZeRO stage 2 or 3 (on one GPU too); FSDP moves it
                // with the parameters (CPUOffload(offload_params=True))
                const bool fsdp = sharding.fsdp[0] != '\0';
                const int z = offload == "optimizer" && !fsdp ? std::max(sharding.zero, 2) : sharding.zero;
                if (offload == "optimizer" && z != sharding.zero && r.gpus > 1) {
                  continue;  // the same as the stage-2 group
                }
                for (bool compile : compiles) {
                  PlanConfig base;
                  base.precision = precision;
                  base.checkpointing = ckpt;
                  base.zero = z;
                  base.fsdp = sharding.fsdp;
                  base.optimizer = optimizer;
                  base.adapters = adapter;
                  base.offload = offload == "optimizer" && fsdp ? "params" : offload;
                  base.compile = compile;
                  if (!float8.empty()) {
                    if (!float8_group(r, base)) {
                      continue;
                    }
                    base.float8 = float8;
                    base.float8_all_gather = float8 == "tensorwise" && base.fsdp == "fsdp2";
                  }
                  Group group = group_of(r, base, all_layouts, total);
                  if (group.blocks.empty()) {
                    continue;
                  }
                  const std::string family = fmt::format("{}|{}|{}|{}|{}|{}|{}", precision, sharding.zero,
                                                         sharding.fsdp, optimizer, adapter, compile, float8);
                  const auto [it, added] = family_of.emplace(family, families.size());
                  if (added) {
                    families.emplace_back();
                  }
                  families[it->second].groups.push_back(std::move(group));
                }
              }
            }
          }
        }
      }
    }
  }
  return families;
}

void validate_request(const PlanRequest& r) {
  if (r.gpu.empty()) {
    throw InputError("--gpu: plan needs a GPU (the step time ranks the configurations)");
  }
  if (r.gpus < 1 || r.gpus > 65536) {
    throw InputError(fmt::format("--gpus: must be in 1..65536, got {}", r.gpus));
  }
  if (r.gpus_per_node < 1 || r.gpus_per_node > 1024) {
    throw InputError(fmt::format("--gpus-per-node: must be in 1..1024, got {}", r.gpus_per_node));
  }
  if (r.global_batch < 1 || r.global_batch > kMaxBatch) {
    throw InputError(fmt::format("--global-batch: must be in 1..{}, got {}", kMaxBatch, r.global_batch));
  }
  if (r.global_batch % r.gpus != 0) {
    throw InputError(
        fmt::format("--global-batch: {} sequences do not divide over {} GPUs", r.global_batch, r.gpus));
  }
  if (r.global_batch / r.gpus > 4096) {
    throw InputError(fmt::format("--global-batch: {} sequences per GPU, more than plan searches (4096)",
                                 r.global_batch / r.gpus));
  }
  if (!(r.margin >= 0.0 && r.margin < 1.0)) {
    throw InputError(fmt::format("--margin: must be in [0, 100%), got {}", r.margin));
  }
  if (r.threads < 0 || r.threads > kMaxThreads) {
    throw InputError(fmt::format("--threads: must be in 0..{}, got {}", kMaxThreads, r.threads));
  }
  if (r.shards < 1 || r.shards > 100000 || r.shard < 0 || r.shard >= r.shards) {
    throw InputError(
        fmt::format("--shard: {}/{} is not a shard K/N with 1 <= K <= N", r.shard + 1, r.shards));
  }
  for (const std::string& lever : r.allow) {
    if (lever != "lora" && lever != "qlora" && lever != "offload" && lever != "compile" && lever != "cp" &&
        lever != "float8") {
      throw InputError(fmt::format(
          "--allow: unknown lever '{}' (known: lora, qlora, offload, compile, cp, float8)", lever));
    }
  }
}

// One group on one thread: its layouts in order, skipped when their model states alone are over the limit
// and no longer tried once one fits (Note [Parallel layouts]); each layout's micro-batches in order, the

void count_skipped(PlanResult& counts, const PlanEvaluation& e) {
  ++counts.configurations_pruned;
  counts.pruned_model_states += e.skipped == "model states" ? 1 : 0;
  counts.pruned_micro_batch += e.skipped == "micro-batch" ? 1 : 0;
  counts.pruned_layout += e.skipped == "layout" ? 1 : 0;
  counts.pruned_throughput += e.skipped == "throughput" ? 1 : 0;
}

}  // namespace plan_detail

bool float8_supported(const PlanRequest& r) { return find_gpu(r.gpu).runs_float8(); }

int data_parallel_degree(const PlanRequest& r, const PlanConfig& c) { return r.gpus / (c.tp * c.pp * c.cp); }

int sharding_degree(const PlanRequest& r, const PlanConfig& c) { return r.gpus / (c.tp * c.pp); }

std::vector<std::pair<int, int>> parallel_layouts(const PlanRequest& r) {
  std::vector<std::pair<int, int>> out;
  for (const plan_detail::Layout& l : plan_detail::layouts(r)) {
    if (l.ep == 1 && l.cp == 1) {
      out.emplace_back(l.tp, l.pp);
    }
  }
  return out;
}

std::vector<int> expert_parallel_layouts(const PlanRequest& r) {
  std::vector<int> out;
  for (const plan_detail::Layout& l : plan_detail::layouts(r)) {
    if (l.ep > 1) {
      out.push_back(l.ep);
    }
  }
  return out;
}

std::vector<int> context_parallel_layouts(const PlanRequest& r) {
  std::vector<int> out;
  for (const plan_detail::Layout& l : plan_detail::layouts(r)) {
    if (l.cp > 1 && l.tp == 1 && l.pp == 1) {
      out.push_back(l.cp);
    }
  }
  return out;
}

}  // namespace vramsim
