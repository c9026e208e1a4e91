#include "sim/cli/techniques.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/cli/commands.h"

namespace vramsim::cli {

const std::vector<Technique>& techniques() {
  // Data-parallel schemes run on 2 GPUs; the model-parallel ones make the model replica 2 GPUs. Context
  // parallelism splits the sequence over data-parallel ranks: it needs a data-parallel scheme beside it.
  static const std::vector<Technique> kTechniques{
      {"ddp", "data-parallel", "torch.nn.parallel.DistributedDataParallel", "--gpus 2"},
      {"zero1", "data-parallel", "DeepSpeed ZeRO-1", "--gpus 2 --zero 1"},
      {"zero2", "data-parallel", "DeepSpeed ZeRO-2", "--gpus 2 --zero 2"},
      {"zero3", "data-parallel", "DeepSpeed ZeRO-3", "--gpus 2 --zero 3"},
      {"zero3-offload", "data-parallel", "DeepSpeed ZeRO-Infinity (offload_optimizer, offload_param)",
       "--gpus 2 --zero 3 --offload optimizer,params"},
      {"fsdp", "data-parallel", "PyTorch FSDP1 (FULL_SHARD)", "--gpus 2 --fsdp full-shard"},
      {"fsdp-offload", "data-parallel", "PyTorch FSDP1 CPUOffload(offload_params=True)",
       "--gpus 2 --fsdp full-shard --offload params"},
      {"fsdp-no-shard", "data-parallel", "PyTorch FSDP1 (NO_SHARD)", "--gpus 2 --fsdp no-shard"},
      {"fsdp2", "data-parallel", "PyTorch FSDP2 (fully_shard)", "--gpus 2 --fsdp2"},
      {"fsdp2-offload", "data-parallel", "PyTorch FSDP2 CPUOffloadPolicy",
       "--gpus 2 --fsdp2 --offload params"},
      {"tp", "model-parallel", "Megatron-LM tensor + sequence parallelism", "--tp 2 --sequence-parallel"},
      {"pp", "model-parallel", "Megatron-LM pipeline parallelism (1F1B)", "--pp 2 --grad-accumulation 2"},
      {"pp-torchtitan", "model-parallel",
       "torchtitan's pipelining (generate_llm_fqn_per_model_part split; FSDP2 synced on the last backward)",
       "--pp 2 --grad-accumulation 2 --pp-split torchtitan"},
      {"pp-gpipe", "model-parallel", "torch.distributed.pipelining ScheduleGPipe",
       "--pp 2 --grad-accumulation 2 --pp-schedule gpipe"},
      {"cp", "model-parallel",
       "torch context_parallel (ring attention, all-gather rotation), as torchtitan runs it",
       "--cp 2 --attention sdpa"},
      {"moe-megatron", "moe", "Megatron-Core MoELayer (AlltoAll token dispatcher, grouped GEMM)",
       "--moe-impl megatron"},
      {"moe-torchtitan", "moe", "torchtitan's MoE (GroupedExperts, grouped_mm, ExpertParallel under FSDP2)",
       "--moe-impl torchtitan"},
      {"ep", "moe",
       "expert parallelism (Megatron-Core's expert_model_parallel_size over DDP, torchtitan's "
       "expert_parallel_degree over FSDP2)",
       "--ep 2"},
      {"moe-imbalance", "moe", "routing model: the busiest expert gets 1.5 x the mean tokens",
       "--moe-imbalance 1.5"},
      {"lora", "peft", "PEFT LoRA", "--lora-rank 8"},
      {"qlora", "peft", "PEFT LoRA on bitsandbytes NF4 (bnb_4bit_quant_storage bf16)",
       "--lora-rank 8 --base-weights nf4 --bnb-quant-storage bf16 --bnb-compute-dtype bf16"},
      {"qlora-int8", "peft", "PEFT LoRA on bitsandbytes LLM.int8", "--lora-rank 8 --base-weights int8"},
      {"qlora-torchao", "peft", "torchtune's QLoRA (torchao NF4Tensor)",
       "--lora-rank 8 --base-weights torchao-nf4"},
      {"dora", "peft", "PEFT DoRA (LoraConfig use_dora)", "--lora-rank 8 --use-dora"},
      {"lora-fa", "peft", "PEFT LoRA-FA (create_lorafa_optimizer)", "--lora-rank 8 --lora-fa"},
      {"ia3", "peft", "PEFT IA3", "--peft-method ia3"},
      {"prompt-tuning", "peft", "PEFT prompt tuning", "--peft-method prompt-tuning --num-virtual-tokens 20"},
      {"p-tuning", "peft", "PEFT P-tuning (PromptEncoder, MLP)",
       "--peft-method p-tuning --num-virtual-tokens 20"},
      {"loha", "peft", "PEFT LoHa", "--peft-method loha --lora-rank 8"},
      {"lokr", "peft", "PEFT LoKr", "--peft-method lokr --lora-rank 8"},
      {"vera", "peft", "PEFT VeRA", "--peft-method vera --lora-rank 256"},
      {"adalora", "peft", "PEFT AdaLoRA (update_and_allocate each step)",
       "--peft-method adalora --lora-rank 4 --init-r 8"},
      {"oft", "peft", "PEFT OFT (Cayley-Neumann)", "--peft-method oft --oft-block-size 16"},
      {"boft", "peft", "PEFT BOFT", "--peft-method boft --boft-block-size 4"},
      {"prefix-tuning", "peft", "PEFT prefix tuning (PrefixTuningConfig)",
       "--peft-method prefix-tuning --num-virtual-tokens 8"},
      {"trainable-tokens", "peft", "PEFT trainable tokens (TrainableTokensConfig)",
       "--peft-method trainable-tokens --token-indices 1,2"},
      {"checkpoint-full", "checkpointing", "torch.utils.checkpoint per decoder layer",
       "--checkpointing full"},
      {"checkpoint-reentrant", "checkpointing",
       "torch.utils.checkpoint(use_reentrant=True) per decoder layer (fsdp_qlora, transformers 4.x)",
       "--checkpointing full --checkpoint-impl reentrant"},
      {"checkpoint-selective", "checkpointing", "Korthikanti et al.'s selective recomputation",
       "--checkpointing selective"},
      {"checkpoint-op", "checkpointing", "torchtitan's op-level selective checkpointing",
       "--checkpointing selective-op"},
      {"offload-activations", "activation-offload", "torch.autograd.graph.save_on_cpu",
       "--offload activations"},
      {"offload-torchtune", "activation-offload", "torchtune's OffloadActivations",
       "--offload activations --activation-offload torchtune"},
      {"compile", "compile", "torch.compile (Inductor)", "--compile-mode default"},
      {"compile-layer", "compile", "torch.compile per decoder layer (torchtitan, torchtune)",
       "--compile-mode default --compile-scope layer"},
      {"compile-loss", "compile",
       "torch.compile of the loss alone, the model eager (torchtitan's components [\"loss\"])",
       "--compile-loss on"},
      {"amp-bf16", "precision", "torch.autocast(bfloat16) over fp32 parameters", "--precision amp-bf16"},
      {"bf16", "precision", "bf16 parameters, torch.optim states in bf16",
       "--precision bf16 --master-weights none"},
      {"bf16-master", "precision", "bf16 parameters, fp32 master weights (DeepSpeed, Megatron)",
       "--precision bf16 --master-weights fp32"},
      {"float8", "precision", "torchao float8 training, tensorwise scaling (convert_to_float8_training)",
       "--precision bf16 --float8 tensorwise"},
      {"float8-rowwise", "precision", "torchao float8 training, rowwise scaling (recipe \"rowwise\")",
       "--precision bf16 --float8 rowwise"},
      {"fp8-te", "precision", "Transformer Engine te.Linear under fp8_autocast (DelayedScaling)",
       "--precision bf16 --float8 te"},
      {"ce-shift-logits", "loss", "transformers' causal-LM loss before 4.49 (the shifted logits' fp32 copy)",
       "--loss ce-shift-logits"},
      {"chunked-ce", "loss", "torchtune's CEWithChunkedOutputLoss", "--loss chunked-ce"},
      {"torchtitan-chunked-ce", "loss", "torchtitan's chunked_cross_entropy_loss (pytorch/torchtitan#996)",
       "--loss torchtitan-chunked-ce --free-logits-before-backward"},
      {"adamw-8bit", "optimizer", "bitsandbytes AdamW8bit", "--optimizer adamw-8bit"},
      {"optimizer-in-backward", "optimizer", "torchtune's optimizer_in_bwd", "--optimizer-in-backward"},
      {"generate", "inference", "transformers model.generate() (DynamicCache)", "--generate 4"},
  };
  return kTechniques;
}

void add_techniques_command(CLI::App& app, std::function<int()>& run) {
  auto* cmd = app.add_subcommand(
      "techniques",
      "List the techniques predict composes (data parallelism, PEFT, quantization, checkpointing, offload, "
      "compile, precision, ...), each with the flags that select it");
  cmd->callback([&run] {
    run = [] {
      std::size_t width = 0;
      for (const Technique& t : techniques()) {
        width = std::max(width, t.flags.size());
      }
      fmt::print("{:<22} {:<19} {:<{}} {}\n", "technique", "family", "flags", width, "follows");
      for (const Technique& t : techniques()) {
        fmt::print("{:<22} {:<19} {:<{}} {}\n", t.name, t.family, t.flags, width, t.library);
      }
      return 0;
    };
  });
}

}  // namespace vramsim::cli
