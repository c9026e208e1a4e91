#include "sim/predict/plan.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/thread_pool.h"
#include "sim/models/checkpoint_quantization.h"
#include "sim/models/layer_code.h"
#include "sim/models/model_config.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/time_model_error.h"
#include "sim/training/training_options.h"

namespace vramsim {
namespace {

constexpr int kLoraRank = 16;  // PEFT's usual recipe rank; the adapters' memory is small at any rank

bool allowed(const PlanRequest& r, std::string_view lever) {
  return std::find(r.allow.begin(), r.allow.end(), lever) != r.allow.end();
}

std::string key_of(const PlanConfig& c) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.precision, c.micro_batch,
                     c.grad_accumulation, c.checkpointing, c.zero, c.fsdp, c.tp, c.pp, c.optimizer,
                     c.adapters, c.offload, c.compile, c.ep);
}

}  // namespace

RequestArgs predict_args(const PlanRequest& r, const PlanConfig& c) {
  RequestArgs a;
  a.model = r.model;
  a.model_code = r.model_code;
  a.gpu = r.gpu;
  a.attention = r.attention;
  a.batch = c.micro_batch;
  a.seq = r.seq;
  a.precision = c.precision;
  a.optimizer = c.optimizer;
  a.checkpointing = c.checkpointing;
  a.grad_accumulation = c.grad_accumulation;
  a.steps = 2;  // optimizer states exist from step 2
  if (r.gpus > 1 || c.zero > 0) {
    a.world_size = r.gpus;
    if (c.zero > 0) {
      a.zero = c.zero;
    }
  }
  if (c.fsdp == "fsdp2") {
    a.fsdp = "full-shard";
    a.fsdp2 = true;
  }
  a.tp = c.tp;
  a.sequence_parallel = c.tp > 1;
  a.pp = c.pp;
  a.ep = c.ep;
  a.gpus_per_node = r.gpus_per_node;
  if (!c.adapters.empty()) {
    a.lora_rank = kLoraRank;
    a.lora_targets = "all-linear";
    if (c.adapters == "qlora") {
      a.base_weights = "nf4";
    }
  }
  a.offload = c.offload;
  if (c.compile) {
    a.compile_mode = "default";
    if (!c.fsdp.empty()) {
      a.compile_scope = "layer";  // FSDP's hooks break a whole-model graph: per block, as torchtitan compiles
    }
  }
  return a;
}

namespace {

PlanEvaluation evaluate_exact(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes) {
  PlanEvaluation e;
  e.config = c;
  e.evaluated = true;
  e.model_states_bytes = model_states_lower_bound(r, c);
  try {
    const Prediction p = predict(make_request(predict_args(r, c)));
    e.peak_reserved_bytes = p.peak_reserved_bytes;
    // after an OOM the device's reserved memory is capped: what the run needs is at least its allocated
    // bytes without the device limit; a pipeline's prediction is its stage with the most of both
    e.needed_bytes = std::max(p.peak_reserved_bytes, p.peak_allocated_needed_bytes) + p.cuda_context_bytes;
    e.headroom_bytes = limit_bytes - e.needed_bytes;
    e.fits = p.num_ooms == 0 && e.headroom_bytes >= 0;
    if (p.pipeline) {
      for (const Prediction::PipelineStagePeak& s : p.pipeline->simulated) {
        e.fits = e.fits && s.fits;
      }
    }
    // a replica's tokens/s (every rank of a tensor-parallel group or a pipeline works on the same tokens)
    // times the data-parallel replicas
    e.tokens_per_s = p.timing ? p.timing->tokens_per_s * data_parallel_degree(r, c) : 0.0;
  } catch (const InputError& err) {
    e.error = err.what();
  }
  return e;
}

// Note [Probing with fewer micro-batches]: a step's cost in the simulator grows with its micro-batches, and
// a layout with few data-parallel replicas has many (a 70B on 64 GPUs at tp 8 x pp 8 runs the whole global
// batch through one replica). Memory does not grow after the first few: from the second micro-batch on the
// gradients accumulate in place, and under 1F1B stage r holds min(pp - r, M) micro-batches in flight. So a
// configuration of many micro-batches is first predicted with probe_micro_batches() of them (2; pp + 1 with a
// pipeline): that needs no more memory than the configuration, and when it does not fit, neither does the
// configuration; only a probe that fits is followed by the full prediction. test_plan.cpp checks the
// monotonicity on small models.
int probe_micro_batches(const PlanConfig& c) { return c.pp > 1 ? c.pp + 1 : 2; }

PlanEvaluation evaluate(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes) {
  const int probe = probe_micro_batches(c);
  if (c.grad_accumulation > probe) {
    PlanConfig q = c;
    q.grad_accumulation = probe;
    PlanEvaluation e = evaluate_exact(r, q, limit_bytes);
    if (!e.error.empty() || !e.fits) {
      e.config = c;
      e.probe_micro_batches = e.error.empty() ? probe : 0;
      e.tokens_per_s = 0.0;
      return e;
    }
  }
  return evaluate_exact(r, c, limit_bytes);
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

struct Layout {
  int tp = 1;
  int pp = 1;
  int ep = 1;  // expert parallelism (torchtitan's over FSDP2), for a model with mixture-of-experts layers
};

// Note [Parallel layouts] (plan.h): tp = 1, 2, 4, ... within a node, then the largest with pp > 1.
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
  for (int p = 2; p <= r.gpus / tp_max; ++p) {
    if ((r.gpus / tp_max) % p == 0 && m.n_layers % p == 0) {
      out.push_back({tp_max, p});
    }
  }
  return out;
}

// One group: one setting of every lever but the layout and the micro-batch; its layouts in the lever's
// order, each with its micro-batches smallest first.
using Group = std::vector<std::vector<PlanConfig>>;

// Whether the simulator (or the libraries) run `c` with this layout at all.
bool layout_applies(const PlanRequest& r, const PlanConfig& c, const Layout& l) {
  const bool model_parallel = l.tp > 1 || l.pp > 1;
  if (model_parallel && (!c.adapters.empty() || c.compile)) {
    return false;  // predict models LoRA/QLoRA and torch.compile without tp/pp
  }
  if (l.pp > 1 && c.zero >= 2) {
    return false;  // DeepSpeed's PipelineEngine: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
                   // parallelism"
  }
  if (l.ep > 1 && (c.fsdp != "fsdp2" || c.precision != "bf16" || !c.adapters.empty() || !c.offload.empty() ||
                   c.compile)) {
    return false;  // predict models expert parallelism as torchtitan runs it: FSDP2, fp32 shards, bf16
  }
  const bool sharded = c.zero > 0 || !c.fsdp.empty();
  return !(r.gpus > 1 && sharded && r.gpus / (l.tp * l.pp) == 1);  // one replica: nothing to shard over
}

std::vector<Group> grid_groups(const PlanRequest& r) {
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
  const std::vector<Layout> all_layouts = layouts(r);
  std::vector<Group> groups;
  for (const char* precision : {"amp-bf16", "bf16"}) {
    for (const char* ckpt : {"none", "selective-op", "full"}) {
      for (const Sharding& sharding : shardings) {
        for (const char* optimizer : {"adamw", "adamw-8bit"}) {
          for (const std::string& adapter : adapters) {
            for (const std::string& offload : offloads) {
              // ZeRO-Offload moves the optimizer with ZeRO stage 2 or 3 (on one GPU too); FSDP moves it with
              // the parameters (CPUOffload(offload_params=True))
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
                Group group;
                for (const Layout& l : all_layouts) {
                  if (!layout_applies(r, base, l)) {
                    continue;
                  }
                  const std::int64_t local_batch = r.global_batch / (r.gpus / (l.tp * l.pp));
                  std::vector<PlanConfig> block;
                  for (std::int64_t micro : divisors(local_batch)) {
                    PlanConfig c = base;
                    c.tp = l.tp;
                    c.pp = l.pp;
                    c.ep = l.ep;
                    c.micro_batch = micro;
                    c.grad_accumulation = static_cast<int>(local_batch / micro);
                    block.push_back(c);
                  }
                  group.push_back(std::move(block));
                }
                if (!group.empty()) {
                  groups.push_back(std::move(group));
                }
              }
            }
          }
        }
      }
    }
  }
  return groups;
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
    if (lever != "lora" && lever != "qlora" && lever != "offload" && lever != "compile") {
      throw InputError(
          fmt::format("--allow: unknown lever '{}' (known: lora, qlora, offload, compile)", lever));
    }
  }
}

// One group on one thread: its layouts in order, skipped when their model states alone are over the limit
// and no longer tried once one fits (Note [Parallel layouts]); each layout's micro-batches in order, the
// larger ones skipped after one does not fit.
void evaluate_group(const PlanRequest& r, const Group& group, std::int64_t limit_bytes,
                    std::int64_t context_bytes, PlanEvaluation* slots, const std::function<void()>& tick) {
  bool layout_fits = false;
  for (const std::vector<PlanConfig>& block : group) {
    const std::int64_t states = model_states_lower_bound(r, block.front());
    bool micro_failed = false;
    bool any_fits = false;
    for (const PlanConfig& c : block) {
      PlanEvaluation& slot = *slots++;
      if (layout_fits) {
        slot.config = c;
        slot.skipped = "layout";
      } else if (states + context_bytes > limit_bytes) {
        slot.config = c;
        slot.skipped = "model states";
      } else if (micro_failed) {
        slot.config = c;
        slot.skipped = "micro-batch";
      } else {
        slot = evaluate(r, c, limit_bytes);
        micro_failed = !slot.fits;
        any_fits = any_fits || slot.fits;
      }
      slot.model_states_bytes = states;
      tick();
    }
    layout_fits = layout_fits || any_fits;
  }
}

// Runs every group on `threads` threads (a group's configurations in order on one of them).
void evaluate_grid(const PlanRequest& r, const std::vector<Group>& groups, std::int64_t context_bytes,
                   PlanResult& out, const PlanProgress& progress) {
  std::vector<std::size_t> first(groups.size());
  std::size_t total = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    first[g] = total;
    for (const std::vector<PlanConfig>& block : groups[g]) {
      total += block.size();
    }
  }
  out.grid.assign(total, PlanEvaluation{});
  std::atomic<std::size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  const std::function<void()> tick = [&]() {
    const int d = ++done;
    if (progress) {
      const std::lock_guard<std::mutex> lock(progress_mutex);
      progress(d, static_cast<int>(total));
    }
  };
  const auto worker = [&]() {
    for (std::size_t g = next++; g < groups.size(); g = next++) {
      PlanEvaluation* slots = &out.grid[first[g]];
      if (g % static_cast<std::size_t>(r.shards) == static_cast<std::size_t>(r.shard)) {
        evaluate_group(r, groups[g], out.limit_bytes, context_bytes, slots, tick);
        continue;
      }
      for (const std::vector<PlanConfig>& block : groups[g]) {
        for (const PlanConfig& c : block) {
          slots->config = c;
          slots->in_shard = false;
          ++slots;
          tick();
        }
      }
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n = r.threads > 0 ? static_cast<std::size_t>(r.threads) : hw;
  run_on_threads(std::min(n, std::max<std::size_t>(1, groups.size())), worker);
}

}  // namespace

int data_parallel_degree(const PlanRequest& r, const PlanConfig& c) { return r.gpus / (c.tp * c.pp); }

std::string plan_progress_line(int done, int total, double elapsed_s, int width) {
  const int shown = std::clamp(done, 0, std::max(total, 0));
  const int filled = total > 0 ? static_cast<int>(static_cast<std::int64_t>(shown) * width / total) : width;
  std::string s = "plan [";
  s.append(static_cast<std::size_t>(filled), '#');
  s.append(static_cast<std::size_t>(width - filled), '.');
  s += fmt::format("] {} / {} configurations, {:.1f} s", shown, total, elapsed_s);
  if (shown > 0 && shown < total) {
    const double left = elapsed_s * static_cast<double>(total - shown) / static_cast<double>(shown);
    s += fmt::format(", about {:.0f} s left", left);
  }
  return s;
}

std::vector<std::pair<int, int>> parallel_layouts(const PlanRequest& r) {
  std::vector<std::pair<int, int>> out;
  for (const Layout& l : layouts(r)) {
    if (l.ep == 1) {
      out.emplace_back(l.tp, l.pp);
    }
  }
  return out;
}

std::vector<int> expert_parallel_layouts(const PlanRequest& r) {
  std::vector<int> out;
  for (const Layout& l : layouts(r)) {
    if (l.ep > 1) {
      out.push_back(l.ep);
    }
  }
  return out;
}

std::int64_t model_states_lower_bound(const PlanRequest& r, const PlanConfig& c) {
  if (!c.adapters.empty() || !c.offload.empty()) {
    return 0;
  }
  ModelConfig m = load_model(r.model);
  if (!r.model_code.empty()) {
    m.code = std::string(layer_code(r.model_code).name());
  }
  const std::int64_t per_rank = tensor_parallel_rank(m, c.tp).parameter_count() / c.pp;
  const std::int64_t p = c.precision == "bf16" ? 2 : 4;  // parameters; gradients alike
  std::int64_t o = 2;                                    // adamw-8bit: two uint8 moments
  if (c.optimizer == "adamw") {
    // two fp32 moments (+ fp32 master weights under bf16 where the framework keeps them; FSDP keeps fp32
    // shards and gradient shards instead, the same 16 bytes in all); two bf16 moments where torch.optim
    // steps the bf16 parameters (training_options.h: MasterWeights)
    const std::string scheme = !c.fsdp.empty() ? "fsdp2-full-shard" : (c.zero > 0 ? "zero" : "ddp");
    const bool master = default_master_weights(scheme, c.tp, c.pp) == MasterWeights::kFp32;
    o = c.precision != "bf16" ? 8 : (master ? 12 : 4);
  }
  const std::int64_t n = data_parallel_degree(r, c);
  std::int64_t bytes = 0;
  if (!c.fsdp.empty() || c.zero == 3) {
    bytes = (p + p + o) * per_rank / n;
  } else if (c.zero == 2) {
    bytes = p * per_rank + (p + o) * per_rank / n;
  } else if (c.zero == 1) {
    bytes = (p + p) * per_rank + o * per_rank / n;
  } else {
    bytes = (p + p + o) * per_rank;
  }
  return bytes;
}

std::string describe(const PlanConfig& c) {
  std::string s = fmt::format("{}, micro-batch {}", c.precision, c.micro_batch);
  if (c.grad_accumulation > 1) {
    s += fmt::format(" x {} accumulation", c.grad_accumulation);
  }
  s += c.checkpointing == "none" ? ", no checkpointing" : ", checkpointing " + c.checkpointing;
  if (c.zero > 0) {
    s += fmt::format(", ZeRO-{}", c.zero);
  }
  if (c.fsdp == "fsdp2") {
    s += ", FSDP2";
  }
  if (c.tp > 1) {
    s += fmt::format(", TP {} + SP", c.tp);
  }
  if (c.pp > 1) {
    s += fmt::format(", PP {}", c.pp);
  }
  if (c.ep > 1) {
    s += fmt::format(", EP {}", c.ep);
  }
  s += ", " + c.optimizer;
  if (!c.adapters.empty()) {
    s += fmt::format(", {} r={}", c.adapters == "qlora" ? "QLoRA (nf4)" : "LoRA", kLoraRank);
  }
  if (!c.offload.empty()) {
    s += ", offload " + c.offload;
  }
  if (c.compile) {
    s += ", torch.compile";
  }
  return s;
}

std::string predict_command(const PlanRequest& r, const PlanConfig& c) {
  std::string s = fmt::format("vramsim predict --model {} --gpu {}", r.model, r.gpu);
  if (!r.model_code.empty()) {
    s += " --model-code " + r.model_code;
  }
  s += fmt::format(" --batch {} --seq {} --precision {} --optimizer {} --checkpointing {}", c.micro_batch,
                   r.seq, c.precision, c.optimizer, c.checkpointing);
  if (c.grad_accumulation > 1) {
    s += fmt::format(" --grad-accumulation {}", c.grad_accumulation);
  }
  if (!r.attention.empty()) {
    s += " --attention " + r.attention;
  }
  if (r.gpus > 1 || c.zero > 0) {
    s += fmt::format(" --gpus {}", r.gpus);
  }
  if (c.tp > 1) {
    s += fmt::format(" --tp {} --sequence-parallel", c.tp);
  }
  if (c.pp > 1) {
    s += fmt::format(" --pp {}", c.pp);
  }
  if (c.ep > 1) {
    s += fmt::format(" --ep {}", c.ep);
  }
  if (c.zero > 0) {
    s += fmt::format(" --zero {}", c.zero);
  }
  if (c.fsdp == "fsdp2") {
    s += " --fsdp full-shard --fsdp2";
  }
  if (r.gpus_per_node != 8) {
    s += fmt::format(" --gpus-per-node {}", r.gpus_per_node);
  }
  if (!c.adapters.empty()) {
    s += fmt::format(" --lora-rank {} --lora-targets all-linear", kLoraRank);
  }
  if (c.adapters == "qlora") {
    s += " --base-weights nf4";
  }
  if (!c.offload.empty()) {
    s += " --offload " + c.offload;
  }
  if (c.compile) {
    s += c.fsdp.empty() ? " --compile" : " --compile --compile-scope layer";
  }
  return s;
}

namespace {

// A tensor-parallel or pipeline layout is not a Trainer setting: torchtitan's flags (FSDP2 inside the
// layout, torchtitan/config/job_config.py), Megatron-LM's (DDP or its distributed optimizer, ZeRO-1's
// counterpart; megatron/training/arguments.py) or, for ZeRO-2/3 (no pipeline), Megatron-DeepSpeed's, which
// takes the same layout flags and a DeepSpeed config whose zero_optimization.stage is the stage: --deepspeed
// --deepspeed_config FILE --zero-stage N, and --no-pipeline-parallel, without which it builds DeepSpeed's
// PipelineModule even for one stage (args.ds_pipeline_enabled = not args.no_pipeline_parallel,
// megatron/training/arguments.py of microsoft/Megatron-DeepSpeed), and the PipelineEngine refuses ZeRO-2/3.
std::string layout_settings(const PlanRequest& r, const PlanConfig& c) {
  const int dp = data_parallel_degree(r, c);
  const std::int64_t local_batch = c.micro_batch * c.grad_accumulation;
  std::string s = "; tensor and pipeline parallelism are not Trainer settings: ";
  if (!c.fsdp.empty()) {
    s += fmt::format(
        "torchtitan --parallelism.tensor_parallel_degree {} --parallelism.pipeline_parallel_degree {} "
        "--parallelism.data_parallel_shard_degree {} --training.global_batch_size {} --training.seq_len {}",
        c.tp, c.pp, dp, r.global_batch, r.seq);
    // torchtitan accumulates global / (local_batch_size x dp) steps; a pipeline splits each local batch
    // into micro-batches of pipeline_parallel_microbatch_size
    s += c.pp > 1 ? fmt::format(
                        " --training.local_batch_size {} --parallelism.pipeline_parallel_microbatch_size {}",
                        local_batch, c.micro_batch)
                  : fmt::format(" --training.local_batch_size {}", c.micro_batch);
    if (c.checkpointing != "none") {
      s += c.checkpointing == "full" ? " --activation_checkpoint.mode full"
                                     : " --activation_checkpoint.mode selective";
    }
    return s;
  }
  s += fmt::format(
      "{} --tensor-model-parallel-size {}{} --pipeline-model-parallel-size {} "
      "--micro-batch-size {} --global-batch-size {} --seq-length {}",
      c.zero >= 2 ? "Megatron-DeepSpeed" : "Megatron-LM", c.tp, c.tp > 1 ? " --sequence-parallel" : "", c.pp,
      c.micro_batch, r.global_batch, r.seq);
  if (c.zero == 1) {
    s += " --use-distributed-optimizer";
  }
  if (c.checkpointing != "none") {
    s += c.checkpointing == "full" ? " --recompute-granularity full --recompute-method uniform"
                                   : " --recompute-granularity selective";
  }
  if (c.zero >= 2) {
    s += fmt::format(
        " --deepspeed --no-pipeline-parallel --zero-stage {0} --deepspeed_config ds_config.json, "
        "ds_config.json with {{\"zero_optimization\": {{\"stage\": {0}}}}}",
        c.zero);
  }
  return s;
}

}  // namespace

std::string trainer_settings(const PlanRequest& r, const PlanConfig& c) {
  std::string s =
      fmt::format("TrainingArguments(per_device_train_batch_size={}, gradient_accumulation_steps={}",
                  c.micro_batch, c.grad_accumulation);
  s += c.precision == "amp-bf16" ? ", bf16=True" : "";
  s += c.checkpointing != "none" ? ", gradient_checkpointing=True" : "";
  s += c.optimizer == "adamw-8bit" ? ", optim=\"adamw_bnb_8bit\"" : ", optim=\"adamw_torch\"";
  s += c.compile ? ", torch_compile=True" : "";
  if (c.zero > 0) {
    s += fmt::format(", deepspeed={{\"zero_optimization\": {{\"stage\": {}{}}}}}", c.zero,
                     c.offload == "optimizer" ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "");
  }
  if (c.fsdp == "fsdp2") {
    // transformers' fsdp_config "version" picks accelerate's fsdp_version (FSDP2: fully_shard)
    s += fmt::format(", fsdp=\"full_shard auto_wrap{}\", fsdp_config={{\"version\": 2}}",
                     c.offload == "params" ? " offload" : "");
  }
  s += ")";
  if (c.precision == "bf16") {
    s += "; the model loaded with torch_dtype=torch.bfloat16";
  }
  if (c.checkpointing == "selective-op") {
    s += "; selective op checkpointing is torchtitan's (activation_checkpoint.mode=\"selective\", "
         "selective_ac_option=\"op\"): the Trainer's gradient_checkpointing is full";
  }
  if (!c.adapters.empty()) {
    s += fmt::format("; peft.LoraConfig(r={}, target_modules=\"all-linear\")", kLoraRank);
  }
  if (c.adapters == "qlora") {
    s += "; BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")";
  }
  if (c.offload == "activations") {
    s += "; torch.autograd.graph.save_on_cpu(pin_memory=True) around the forward";
  }
  if (c.ep > 1) {  // torchtitan/config/job_config.py Parallelism.expert_parallel_degree
    s += fmt::format(
        "; expert parallelism is not a Trainer setting: torchtitan --parallelism.expert_parallel_degree {} "
        "--parallelism.data_parallel_shard_degree {} --training.local_batch_size {}",
        c.ep, data_parallel_degree(r, c), c.micro_batch);
  } else if (c.tp > 1 || c.pp > 1) {
    s += layout_settings(r, c);
  } else if (r.gpus > 1 && c.zero == 0 && c.fsdp.empty()) {
    s += fmt::format("; DDP over {} GPUs (torchrun --nproc_per_node {})", r.gpus, r.gpus);
  }
  return s;
}

namespace {
// Every configuration that fits and whose step time is within the time model's error of the best one's.
void mark_ties(PlanResult& out) {
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    PlanEvaluation& e = out.grid[i];
    e.tied_with_best =
        out.best && i != *out.best && e.fits &&
        tied_within_time_model_error(out.grid[*out.best].tokens_per_s, e.tokens_per_s, out.time_model_error);
    if (e.tied_with_best) {
      out.tied.push_back(i);
    }
  }
}
}  // namespace

void finish_plan(PlanResult& out) {
  out.configurations_evaluated = 0;
  out.configurations_pruned = 0;
  out.pruned_model_states = 0;
  out.pruned_micro_batch = 0;
  out.pruned_layout = 0;
  out.errors = 0;
  out.best.reset();
  out.pareto.clear();
  out.tied.clear();
  out.time_model_error = kTimeModelRelativeError;
  std::map<std::string, bool> predicted;
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    const PlanEvaluation& e = out.grid[i];
    if (!e.evaluated) {
      ++out.configurations_pruned;
      out.pruned_model_states += e.skipped == "model states" ? 1 : 0;
      out.pruned_micro_batch += e.skipped == "micro-batch" ? 1 : 0;
      out.pruned_layout += e.skipped == "layout" ? 1 : 0;
      continue;
    }
    ++out.configurations_evaluated;
    predicted[key_of(e.config)] = true;
    out.errors += e.error.empty() ? 0 : 1;
    if (e.fits && (!out.best || e.tokens_per_s > out.grid[*out.best].tokens_per_s)) {
      out.best = i;
    }
  }
  mark_ties(out);
  for (const PlanStep& s : out.decision_path) {  // the path's own predictions
    out.configurations_evaluated += predicted.emplace(key_of(s.result.config), true).second ? 1 : 0;
  }
  // The Pareto front of the configurations that fit: less memory, or more tokens/s than every one with less.
  std::vector<std::size_t> fitting;
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    if (out.grid[i].fits) {
      fitting.push_back(i);
    }
  }
  std::stable_sort(fitting.begin(), fitting.end(), [&out](std::size_t a, std::size_t b) {
    return out.grid[a].needed_bytes < out.grid[b].needed_bytes;
  });
  double best_rate = -1.0;
  for (std::size_t i : fitting) {
    if (out.grid[i].tokens_per_s > best_rate) {
      out.pareto.push_back(i);
      best_rate = out.grid[i].tokens_per_s;
    }
  }
}

namespace {
void decide(const PlanRequest& r, PlanResult& out);
}  // namespace

PlanResult plan(const PlanRequest& r, const PlanProgress& progress) {
  validate_request(r);
  // every configuration would be refused alike: say why once (checkpoint_quantization.h)
  if (const std::optional<CheckpointQuantization> q = checkpoint_quantization_of(r.model)) {
    refuse_unmodelled_quantization(*q, r.model);
  }
  PlanResult out;
  const GpuMemory d = device_memory(r.gpu, 0, ContextOptions{});
  out.total_bytes = d.total_bytes;
  out.limit_bytes = static_cast<std::int64_t>((1.0 - r.margin) * static_cast<double>(d.total_bytes));
  evaluate_grid(r, grid_groups(r), d.context_bytes, out, progress);
  if (r.shard == 0) {
    decide(r, out);
  }
  finish_plan(out);
  return out;
}

namespace {

// The decision path: from fp32 with the whole local batch at once, each lever in turn until it fits.
void decide(const PlanRequest& r, PlanResult& out) {
  const std::int64_t local_batch = r.global_batch / r.gpus;
  std::map<std::string, PlanEvaluation> cache;
  for (const PlanEvaluation& e : out.grid) {
    if (e.in_shard && e.evaluated) {
      cache.emplace(key_of(e.config), e);
    }
  }
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

}  // namespace

}  // namespace vramsim
