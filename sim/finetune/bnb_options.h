// Quantized base weights: bitsandbytes' BitsAndBytesConfig, torchao's NF4. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

#include "sim/graph/dtype.h"

namespace vramsim {

// Quantized base weights: bitsandbytes' (nf4, fp4, int8: bnb_quant.h), as transformers' BitsAndBytesConfig
// sets them up, or torchao's NF4Tensor as torchtune uses it (kTorchaoNf4: torchao_nf4.h). kNone: the weights
// stay in the --precision dtype.
enum class BnbFormat : std::uint8_t { kNone, kNf4, kFp4, kInt8, kTorchaoNf4 };

// BitsAndBytesConfig's fields, with its defaults, and whether PEFT's prepare_model_for_kbit_training ran.
struct BnbOptions {
  BnbFormat format = BnbFormat::kNone;    // load_in_4bit + bnb_4bit_quant_type, or load_in_8bit
  bool double_quant = false;              // bnb_4bit_use_double_quant (default False)
  DType compute_dtype = DType::kFloat32;  // bnb_4bit_compute_dtype (transformers: float32 when unset)
  // prepare_model_for_kbit_training(model): every fp16/bf16 parameter that is not quantized (embeddings,
  // norms, lm_head) is cast to fp32 after loading. Its gradient checkpointing is --checkpointing's job.
  bool prepare_kbit_training = true;
  // MatMul4Bit saves its input A for backward (ctx.tensors = (A, B)), as bitsandbytes releases of 2023-24
  // did (the cranberrii recording's); current releases keep (None, B), which the backward never needed.
  bool matmul4bit_saves_input = false;
  // bnb_4bit_quant_storage: the dtype the packed 4-bit codes are stored as (quantize_4bit's
  // out = torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1), dtype=quant_storage)): the same bytes,
  // but FSDP and ZeRO-3 flatten and shard a bf16 tensor like the model's other bf16 parameters.
  DType quant_storage = DType::kUInt8;
};

}  // namespace vramsim
