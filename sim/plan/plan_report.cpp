// What `vramsim plan` reports of a configuration (plan.h): its one-line description, its `vramsim predict`
// command and options, the same settings for Hugging Face's Trainer (or torchtitan and Megatron-LM for a
// parallel layout), and the progress line on a terminal.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "sim/plan/plan.h"
#include "sim/plan/plan_grid.h"

namespace vramsim {

namespace {

// FSDP's hooks, tensor parallelism's DTensors and pipeline stages break a whole-model graph: those runs
// compile each decoder block on its own, as torchtitan does (predict refuses a whole-model --compile with
// them).
bool compiles_per_layer(const PlanConfig& c) { return !c.fsdp.empty() || c.tp > 1 || c.pp > 1; }

}  // namespace

using plan_detail::kLoraRank;

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
  a.cp = c.cp;
  a.gpus_per_node = r.gpus_per_node;
  if (!c.adapters.empty()) {
    a.lora_rank = kLoraRank;
    a.lora_targets = "all-linear";
    if (c.adapters == "qlora") {
      a.base_weights = "nf4";
    }
  }
  a.offload = c.offload;
  if (!c.float8.empty()) {
    a.float8 = c.float8;
    a.float8_all_gather = c.float8_all_gather;
  }
  if (c.compile) {
    a.compile_mode = "default";
    if (compiles_per_layer(c)) {
      a.compile_scope = "layer";
    }
  }
  return a;
}

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
  if (c.cp > 1) {
    s += fmt::format(", CP {}", c.cp);
  }
  if (!c.float8.empty()) {
    s += fmt::format(", float8 {}{}", c.float8, c.float8_all_gather ? " + float8 all-gather" : "");
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
  if (c.cp > 1) {
    s += fmt::format(" --cp {}", c.cp);
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
  if (!c.float8.empty()) {
    s += " --float8 " + c.float8 + (c.float8_all_gather ? " --float8-all-gather" : "");
  }
  if (c.compile) {
    s += compiles_per_layer(c) ? " --compile --compile-scope layer" : " --compile";
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

// A float8 configuration as torchtitan runs it (Note [The float8 lever], plan_grid.cpp): its own config keys
// (torchtitan/config/job_config.py: Model.converters, the Float8 section, Parallelism, Training,
// ActivationCheckpoint), FSDP2 over the data-parallel ranks. torchtitan's Float8Converter takes no
// recipe_name with enable_fsdp_float8_all_gather (it asserts so), so tensorwise is the default config;
// filter_fqns "output" skips the output projection as predict's filter does. One GPU: torchtitan would
// train fp32 parameters under torch.autocast (its mixed_precision_param applies through autocast without
// FSDP), which predict's float8 does not model, so the settings are torchao's own call on a bf16 model.
std::string float8_settings(const PlanRequest& r, const PlanConfig& c) {
  if (c.fsdp.empty()) {
    return fmt::format(
        "; float8 is not a Trainer setting: before training, "
        "torchao.float8.convert_to_float8_training(model, "
        "config=Float8LinearConfig{}, module_filter_fn=<skip lm_head>)",
        c.float8 == "rowwise" ? ".from_recipe_name(\"rowwise\")" : "()");
  }
  std::string s = fmt::format(
      "; float8 is not a Trainer setting: torchtitan --model.converters float8 {}--float8.filter_fqns output "
      "--parallelism.data_parallel_shard_degree {}",
      c.float8_all_gather ? "--float8.enable_fsdp_float8_all_gather "
                          : (c.float8 == "rowwise" ? "--float8.recipe_name rowwise " : ""),
      data_parallel_degree(r, c));
  if (c.tp > 1) {
    s += fmt::format(" --parallelism.tensor_parallel_degree {}", c.tp);
  }
  if (c.pp > 1) {
    s += fmt::format(
        " --parallelism.pipeline_parallel_degree {} --parallelism.pipeline_parallel_microbatch_size {}", c.pp,
        c.micro_batch);
  }
  if (c.cp > 1) {
    s += fmt::format(" --parallelism.context_parallel_degree {}", c.cp);
  }
  if (c.ep > 1) {
    s += fmt::format(" --parallelism.expert_parallel_degree {}", c.ep);
  }
  s += fmt::format(" --training.local_batch_size {} --training.global_batch_size {} --training.seq_len {}",
                   c.pp > 1 ? c.micro_batch * c.grad_accumulation : c.micro_batch, r.global_batch, r.seq);
  // torchtitan's default mode is "selective" (every 2nd layer): none is said explicitly
  s += c.checkpointing == "full"           ? " --activation_checkpoint.mode full"
       : c.checkpointing == "selective-op" ? " --activation_checkpoint.mode selective "
                                             "--activation_checkpoint.selective_ac_option op"
                                           : " --activation_checkpoint.mode none";
  s += c.compile ? " --training.compile" : "";
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
  if (!c.float8.empty()) {  // its layout with it, in torchtitan's keys
    s += float8_settings(r, c);
  } else if (c.ep > 1) {  // torchtitan/config/job_config.py Parallelism.expert_parallel_degree
    s += fmt::format(
        "; expert parallelism is not a Trainer setting: torchtitan --parallelism.expert_parallel_degree {} "
        "--parallelism.data_parallel_shard_degree {} --training.local_batch_size {}",
        c.ep, data_parallel_degree(r, c), c.micro_batch);
  } else if (c.cp > 1 && !c.adapters.empty()) {
    // torchtune's lora_finetune_distributed.py: context_parallel_dim, data_parallel_shard_dim (its
    // ParallelDims: dp_shard x cp = the GPUs), batch_size and gradient_accumulation_steps per rank
    s += fmt::format(
        "; context parallelism with LoRA is not a Trainer setting: tune run --nproc_per_node {} "
        "lora_finetune_distributed --config <a *_lora config> context_parallel_dim={} "
        "data_parallel_shard_dim={} batch_size={} gradient_accumulation_steps={} tokenizer.max_seq_len={}",
        r.gpus, c.cp, data_parallel_degree(r, c), c.micro_batch, c.grad_accumulation, r.seq);
  } else if (c.cp > 1 && (c.tp > 1 || c.pp > 1)) {
    s += layout_settings(r, c) + fmt::format(" --parallelism.context_parallel_degree {}", c.cp);
  } else if (c.cp > 1) {  // torchtitan/config/job_config.py Parallelism.context_parallel_degree
    // torchtitan's world is dp_replicate x dp_shard x cp x tp x pp: FSDP2 alone, dp_shard = gpus / cp
    s += fmt::format(
        "; context parallelism is not a Trainer setting: torchtitan --parallelism.context_parallel_degree {} "
        "--parallelism.data_parallel_shard_degree {} --training.local_batch_size {} --training.seq_len {}",
        c.cp, data_parallel_degree(r, c), c.micro_batch, r.seq);
  } else if (c.tp > 1 || c.pp > 1) {
    s += layout_settings(r, c);
  } else if (r.gpus > 1 && c.zero == 0 && c.fsdp.empty()) {
    s += fmt::format("; DDP over {} GPUs (torchrun --nproc_per_node {})", r.gpus, r.gpus);
  }
  return s;
}

}  // namespace vramsim
