// The weights a model folder's safetensors checkpoint holds, read from the files' headers only (never their
// data), found as transformers' from_pretrained finds them (modeling_utils.py,
// _get_resolved_checkpoint_files): model.safetensors.index.json (SAFE_WEIGHTS_INDEX_NAME: "weight_map" names
// each tensor's shard) first, else model.safetensors (SAFE_WEIGHTS_NAME). Quantized checkpoints are read as
// stored: GPTQ / AWQ int32 qweight and qzeros with float16 scales, bitsandbytes uint8 weights with absmax /
// quant_map, float8_e4m3 weights with their scales, compressed-tensors' weight_packed: the real dtypes and
// shapes, whatever the format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/hub/safetensors_header.h"

namespace vramsim {

struct ModelConfig;
struct CheckpointQuantization;

struct CheckpointWeights {
  std::string source;                      // the index file, or the one model.safetensors
  std::vector<std::string> files;          // the safetensors files read, in the index's order
  std::vector<SafetensorsTensor> tensors;  // every file's, each file's in data order
  std::uint64_t total_bytes = 0;           // the tensors' bytes (the files less their headers)
  std::int64_t total_elements = 0;  // their elements (a packed int32 holds 8 4-bit values: one element)
  // bytes per safetensors dtype, largest first (ties by name)
  std::vector<std::pair<std::string, std::uint64_t>> bytes_by_dtype;
};

// The checkpoint in `folder`, or nullopt when it has neither model.safetensors.index.json nor
// model.safetensors. Throws InputError naming the file, the byte and the problem for a bad header (see
// safetensors_header.h), a bad index, or a shard the index names that is missing or lacks a tensor the index
// puts in it.
std::optional<CheckpointWeights> read_checkpoint_weights(const std::string& folder);

// --model's checkpoint: the folder of the config.json that model_config_file() resolves (a model folder, a
// hub id's cached snapshot, or a file named config.json); nullopt for a preset, another file name, or a
// folder without safetensors files.
std::optional<CheckpointWeights> checkpoint_weights_of(const std::string& name_or_path);

// Warnings where the checkpoint disagrees with what config.json implies: unquantized, its elements against
// the parameters of model.parameters() (naming a parameter whose size is the difference, such as a tied
// lm_head stored as its own tensor); quantized (gptq, awq, fp8, mxfp4, bitsandbytes), its packed weights and
// scales against the layout checkpoint_quantization.h derives from config.json. Empty when they agree.
std::vector<std::string> checkpoint_warnings(const CheckpointWeights& checkpoint, const ModelConfig& model,
                                             const std::optional<CheckpointQuantization>& quantization);

// "2 files (model.safetensors.index.json), 291 tensors, 16,060,522,496 B: BF16 16,060,522,496 B" for reports.
std::string describe(const CheckpointWeights& checkpoint);

}  // namespace vramsim
