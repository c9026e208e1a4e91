// make_request's rooms for fine-tuning: PEFT's adapters (LoRA and the other methods) and quantized base
// weights (bitsandbytes, torchao NF4, a pre-quantized checkpoint's quantization_config).
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/hub/checkpoint_quantization.h"
#include "sim/predict/request_args_parts.h"

namespace vramsim::request_args {
namespace {

// A pre-quantized checkpoint (config.json's quantization_config, checkpoint_quantization.h): bitsandbytes'
// is the --base-weights path, its values taken from the config (from_pretrained uses the checkpoint's own
// quantization_config); the other formats are read and refused, naming what was read, rather than predicted
// in torch_dtype as if the block were not there.
void apply_checkpoint_quantization(const RequestArgs& a, BnbOptions& bnb) {
  const std::optional<CheckpointQuantization> q = checkpoint_quantization_of(a.model);
  if (!q) {
    return;
  }
  refuse_unmodelled_quantization(*q, a.model);
  if (!q->modules_to_not_convert.empty()) {
    throw InputError(
        fmt::format("{}: quantization_config: llm_int8_skip_modules is not modelled (--base-weights converts "
                    "every linear "
                    "layer but lm_head)",
                    a.model));
  }
  const auto conflict = [&](bool differs, std::string_view option, std::string_view value) {
    if (differs) {
      throw InputError(fmt::format("{} {}: contradicts the quantization_config of {} ({})", option, value,
                                   a.model, describe(*q)));
    }
  };
  conflict(!a.base_weights.empty() && parse_base_weights(a.base_weights) != q->bnb_format, "--base-weights",
           a.base_weights);
  conflict(a.bnb_double_quant && !q->bnb_double_quant, "--bnb-double-quant", "");
  conflict(a.bnb_compute_dtype != "fp32" && bnb.compute_dtype != q->bnb_compute_dtype, "--bnb-compute-dtype",
           a.bnb_compute_dtype);
  conflict(a.bnb_quant_storage != "uint8" && bnb.quant_storage != q->bnb_quant_storage, "--bnb-quant-storage",
           a.bnb_quant_storage);
  bnb.format = q->bnb_format;
  bnb.double_quant = q->bnb_double_quant;
  bnb.compute_dtype = q->bnb_compute_dtype;
  bnb.quant_storage = q->bnb_quant_storage;
}

}  // namespace

void apply_peft_args(const RequestArgs& a, PredictRequest& r) {
  TrainingOptions& o = r.options;
  o.lora.rank = a.lora_rank;
  o.lora.alpha = a.lora_alpha;
  o.lora.dropout = a.lora_dropout;
  if (!a.lora_targets.empty()) {
    parse_lora_targets(a.lora_targets, o.lora);
  }
  o.lora.method = parse_peft_method(a.peft_method);
  o.lora.use_dora = a.use_dora;
  o.lora.lora_fa = a.lora_fa;
  o.lora.num_virtual_tokens = a.num_virtual_tokens;
  o.lora.encoder_hidden_size = a.encoder_hidden_size;
  o.lora.decompose_factor = a.decompose_factor;
  o.lora.autocast_adapter_dtype = a.autocast_adapter_dtype;
  o.lora.init_r = a.init_r;
  o.lora.prefix_projection = a.prefix_projection;
  if (!a.token_indices.empty()) {
    if (o.lora.method != PeftMethod::kTrainableTokens) {
      throw InputError("--token-indices: a TrainableTokensConfig option (--peft-method trainable-tokens)");
    }
    o.lora.trainable_tokens = parse_token_indices(a.token_indices, r.model.vocab_size);
  }
  o.lora.block_size = o.lora.method == PeftMethod::kBoft ? a.boft_block_size : a.oft_block_size;
  o.lora.block_num = a.boft_block_num;
  o.lora.butterfly_factor = a.boft_n_butterfly_factor;
  o.lora.use_cayley_neumann = a.use_cayley_neumann;
  o.lora.num_cayley_neumann_terms = a.num_cayley_neumann_terms;
  if (!a.feedforward_modules.empty()) {
    if (o.lora.method != PeftMethod::kIa3) {
      throw InputError("--feedforward-modules: an IA3Config option (--peft-method ia3)");
    }
    LoraOptions ff;
    parse_lora_targets(a.feedforward_modules, ff, "--feedforward-modules");
    o.lora.feedforward_modules = ff.targets;
  }
}

void apply_quantization_args(const RequestArgs& a, const DataParallelOptions& data_parallel,
                             PredictRequest& r) {
  TrainingOptions& o = r.options;
  if (!a.base_weights.empty()) {
    o.bnb.format = parse_base_weights(a.base_weights);
  }
  o.bnb.double_quant = a.bnb_double_quant;
  o.bnb.compute_dtype = parse_bnb_compute_dtype(a.bnb_compute_dtype);
  // a training recipe's call: inference loads the model and runs it as it is
  // torchtune's QLoRA casts nothing to fp32.
  // TRL's SFTTrainer skips prepare_model_for_kbit_training for QLoRA under FSDP or ZeRO-3 ("one should never
  // call peft_module_casting_to_bf16 or prepare_model_for_kbit_training when doing QLoRA + FSDP /
  // DS-Zero3", trl/trainer/sft_trainer.py): the parameters must keep one dtype to be flattened.
  const bool shards_parameters = data_parallel.scheme.starts_with("fsdp") || data_parallel.scheme == "zero3";
  o.bnb.quant_storage = parse_bnb_quant_storage(a.bnb_quant_storage);
  o.bnb.matmul4bit_saves_input = a.bnb_saves_input;
  apply_checkpoint_quantization(a, o.bnb);
  o.bnb.prepare_kbit_training = !a.no_prepare_kbit && !o.inference && !o.forward_only &&
                                o.bnb.format != BnbFormat::kTorchaoNf4 && !shards_parameters;
  if (o.bnb.format == BnbFormat::kNone && (a.bnb_double_quant || a.no_prepare_kbit || a.bnb_saves_input ||
                                           a.bnb_compute_dtype != "fp32" || a.bnb_quant_storage != "uint8")) {
    throw InputError(
        "--bnb-double-quant / --bnb-compute-dtype / --bnb-saves-input / --bnb-quant-storage / "
        "--no-prepare-kbit: need --base-weights");
  }
}

}  // namespace vramsim::request_args
