#include "sim/predict/plan.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/predict/gpu_memory.h"

namespace vramsim {
namespace {

constexpr int kLoraRank = 16;  // PEFT's usual recipe rank; the adapters' memory is small at any rank

bool allowed(const PlanRequest& r, std::string_view lever) {
  return std::find(r.allow.begin(), r.allow.end(), lever) != r.allow.end();
}

std::string key_of(const PlanConfig& c) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}", c.precision, c.micro_batch, c.grad_accumulation,
                     c.checkpointing, c.zero, c.optimizer, c.adapters, c.offload, c.compile);
}

RequestArgs request_args(const PlanRequest& r, const PlanConfig& c) {
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
  }
  return a;
}

PlanEvaluation evaluate(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes) {
  PlanEvaluation e;
  e.config = c;
  e.evaluated = true;
  try {
    const Prediction p = predict(make_request(request_args(r, c)));
    e.peak_reserved_bytes = p.peak_reserved_bytes;
    // after an OOM the device's reserved memory is capped: what the run needs is at least its allocated
    // bytes without the device limit
    e.needed_bytes = std::max(p.peak_reserved_bytes, p.peak_allocated_needed_bytes) + p.cuda_context_bytes;
    e.headroom_bytes = limit_bytes - e.needed_bytes;
    e.fits = p.num_ooms == 0 && e.headroom_bytes >= 0;
    e.tokens_per_s = p.timing ? p.timing->tokens_per_s * r.gpus : 0.0;
  } catch (const InputError& err) {
    e.error = err.what();
  }
  return e;
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

// The grid, grouped: every setting of the other levers, then its micro-batches smallest first.
std::vector<std::vector<PlanConfig>> grid_groups(const PlanRequest& r, std::int64_t local_batch) {
  std::vector<int> zeros{0};
  if (r.gpus > 1) {
    zeros = {0, 1, 2, 3};
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
  std::vector<std::vector<PlanConfig>> groups;
  for (const char* precision : {"amp-bf16", "bf16"}) {
    for (const char* ckpt : {"none", "selective-op", "full"}) {
      for (int zero : zeros) {
        for (const char* optimizer : {"adamw", "adamw-8bit"}) {
          for (const std::string& adapter : adapters) {
            for (const std::string& offload : offloads) {
              // ZeRO-Offload moves the optimizer with ZeRO stage 2 or 3 (on one GPU too)
              const int z = offload == "optimizer" ? std::max(zero, 2) : zero;
              if (offload == "optimizer" && z != zero && r.gpus > 1) {
                continue;  // the same as the stage-2 group
              }
              for (bool compile : compiles) {
                std::vector<PlanConfig> group;
                for (std::int64_t micro : divisors(local_batch)) {
                  PlanConfig c;
                  c.precision = precision;
                  c.micro_batch = micro;
                  c.grad_accumulation = static_cast<int>(local_batch / micro);
                  c.checkpointing = ckpt;
                  c.zero = z;
                  c.optimizer = optimizer;
                  c.adapters = adapter;
                  c.offload = offload;
                  c.compile = compile;
                  group.push_back(c);
                }
                groups.push_back(std::move(group));
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

// Runs every group on `threads` threads; each group's micro-batches in order, the larger ones skipped after
// one does not fit.
void evaluate_grid(const PlanRequest& r, const std::vector<std::vector<PlanConfig>>& groups, PlanResult& out,
                   const PlanProgress& progress) {
  std::vector<std::size_t> first(groups.size());
  std::size_t total = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    first[g] = total;
    total += groups[g].size();
  }
  out.grid.assign(total, PlanEvaluation{});
  std::atomic<std::size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  const auto worker = [&]() {
    for (std::size_t g = next++; g < groups.size(); g = next++) {
      bool pruned = false;
      const bool mine = g % static_cast<std::size_t>(r.shards) == static_cast<std::size_t>(r.shard);
      for (std::size_t k = 0; k < groups[g].size(); ++k) {
        PlanEvaluation& slot = out.grid[first[g] + k];
        if (!mine) {
          slot.config = groups[g][k];
          slot.in_shard = false;
        } else if (pruned) {
          slot.config = groups[g][k];
        } else {
          slot = evaluate(r, groups[g][k], out.limit_bytes);
          pruned = !slot.fits;
        }
        const int d = ++done;
        if (progress) {
          const std::lock_guard<std::mutex> lock(progress_mutex);
          progress(d, static_cast<int>(total));
        }
      }
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned n = r.threads > 0 ? static_cast<unsigned>(r.threads) : hw;
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) {
    pool.emplace_back(worker);
  }
  worker();
  for (std::thread& t : pool) {
    t.join();
  }
}

}  // namespace

std::string describe(const PlanConfig& c) {
  std::string s = fmt::format("{}, micro-batch {}", c.precision, c.micro_batch);
  if (c.grad_accumulation > 1) {
    s += fmt::format(" x {} accumulation", c.grad_accumulation);
  }
  s += c.checkpointing == "none" ? ", no checkpointing" : ", checkpointing " + c.checkpointing;
  if (c.zero > 0) {
    s += fmt::format(", ZeRO-{}", c.zero);
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
  if (c.zero > 0) {
    s += fmt::format(" --zero {}", c.zero);
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
    s += " --compile";
  }
  return s;
}

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
  if (r.gpus > 1 && c.zero == 0) {
    s += fmt::format("; DDP over {} GPUs (torchrun --nproc_per_node {})", r.gpus, r.gpus);
  }
  return s;
}

void finish_plan(PlanResult& out) {
  out.configurations_evaluated = 0;
  out.configurations_pruned = 0;
  out.errors = 0;
  out.best.reset();
  out.pareto.clear();
  std::map<std::string, bool> predicted;
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    const PlanEvaluation& e = out.grid[i];
    if (!e.evaluated) {
      ++out.configurations_pruned;
      continue;
    }
    ++out.configurations_evaluated;
    predicted[key_of(e.config)] = true;
    out.errors += e.error.empty() ? 0 : 1;
    if (e.fits && (!out.best || e.tokens_per_s > out.grid[*out.best].tokens_per_s)) {
      out.best = i;
    }
  }
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
  PlanResult out;
  {
    const GpuMemory d = device_memory(r.gpu, 0, ContextOptions{});
    out.total_bytes = d.total_bytes;
    out.limit_bytes = static_cast<std::int64_t>((1.0 - r.margin) * static_cast<double>(d.total_bytes));
  }
  evaluate_grid(r, grid_groups(r, r.global_batch / r.gpus), out, progress);
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
  // stays at its last setting the simulator accepted (the one that saves most), and the next lever is added
  // on top.
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
    if (lever("ZeRO stage", options)) {
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
    options = {{"offload activations", with([](PlanConfig& c) { c.offload = "activations"; })},
               {"offload optimizer (ZeRO-Offload)", with([](PlanConfig& c) {
                  c.offload = "optimizer";
                  c.zero = std::max(c.zero, 2);
                })}};
    lever("offload", options);
  }
}

}  // namespace

}  // namespace vramsim
