// A model folder's safetensors checkpoint, from its headers (see the header for the lookup and the checks).
#include "sim/hub/checkpoint_weights.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/hub/checkpoint_quantization.h"
#include "sim/hub/hf_hub_cache.h"
#include "sim/models/model_config.h"
#include "traces/json_input.h"

namespace vramsim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string with_commas(std::uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out.push_back(',');
    }
    out.push_back(digits[i]);
  }
  return out;
}

// A shard name as save_pretrained writes it ("model-00001-of-00002.safetensors"): a file of the folder,
// never a path out of it.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name != "." && name != "..";
}

// The index's weight_map: tensor -> shard, and the shards in order of first mention.
void read_index(const std::string& index_path, std::vector<std::string>& shards,
                std::map<std::string, std::string>& weight_map) {
  const json root = parse_json_input(read_input_file(index_path, "checkpoint index", kMaxSmallInputBytes),
                                     index_path, kMaxSmallJsonMemory);
  if (!root.is_object() || !root.contains("weight_map") || !root.at("weight_map").is_object()) {
    throw InputError(
        fmt::format("{}: key 'weight_map' must be an object of tensor names to file names", index_path));
  }
  for (const auto& [tensor, shard] : root.at("weight_map").items()) {
    if (!shard.is_string() || !plain_file_name(shard.get<std::string>())) {
      throw InputError(fmt::format("{}: weight_map['{}'] must name a file of the folder, got {}", index_path,
                                   tensor, shard.dump()));
    }
    const std::string file = shard.get<std::string>();
    if (std::find(shards.begin(), shards.end(), file) == shards.end()) {
      shards.push_back(file);
    }
    weight_map[tensor] = file;
  }
}

void add_file(CheckpointWeights& c, const SafetensorsHeader& h) {
  c.files.push_back(h.path);
  for (const SafetensorsTensor& t : h.tensors) {
    const auto bytes = checked_add(c.total_bytes, t.size_bytes());
    const auto elements = checked_add(c.total_elements, t.numel());
    if (!bytes || !elements) {
      throw InputError(fmt::format("{}: the checkpoint's tensors are too large to count", h.path));
    }
    c.total_bytes = *bytes;
    c.total_elements = *elements;
    c.tensors.push_back(t);
  }
}

void total_by_dtype(CheckpointWeights& c) {
  std::map<std::string, std::uint64_t> by;
  for (const SafetensorsTensor& t : c.tensors) {
    by[t.dtype] += t.size_bytes();  // each at most total_bytes, which did not overflow
  }
  c.bytes_by_dtype.assign(by.begin(), by.end());
  std::stable_sort(c.bytes_by_dtype.begin(), c.bytes_by_dtype.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
}

// What the checkpoint stores for one role of a quantized layout: tensors whose name ends in `suffix` (of
// `dtype` when given), their count and bytes.
struct Stored {
  std::int64_t tensors = 0;
  std::uint64_t bytes = 0;
};
Stored stored(const CheckpointWeights& c, std::string_view suffix, std::string_view dtype = {}) {
  Stored s;
  for (const SafetensorsTensor& t : c.tensors) {
    if (t.name.ends_with(suffix) && (dtype.empty() || t.dtype == dtype)) {
      s.tensors += 1;
      s.bytes += t.size_bytes();
    }
  }
  return s;
}

void compare(std::vector<std::string>& out, const CheckpointWeights& c, std::string_view what,
             const Stored& s, std::int64_t tensors, std::uint64_t bytes) {
  if (s.tensors != tensors || s.bytes != bytes) {
    out.push_back(
        fmt::format("{}: {}: the checkpoint holds {} tensors of {} B; config.json implies {} of {} B",
                    c.source, what, s.tensors, with_commas(s.bytes), tensors, with_commas(bytes)));
  }
}

void quantized_warnings(std::vector<std::string>& out, const CheckpointWeights& c, const ModelConfig& model,
                        const CheckpointQuantization& q) {
  if (q.method == QuantMethod::kBitsandbytes) {
    // Params4bit: (numel + 1) / 2 bytes of packed values (bnb.functional.quantize_4bit); Int8Params: numel.
    const bool four = q.bnb_format != BnbFormat::kInt8;
    std::int64_t weights = 0;
    std::uint64_t bytes = 0;
    for (const ParameterShape& p : model.parameter_shapes()) {
      if (is_quantized_weight(model, q, p)) {
        weights += 1;
        bytes += static_cast<std::uint64_t>(four ? (p.numel() + 1) / 2 : p.numel());
      }
    }
    // transformers' serialization of Params4bit: "<name>.weight" beside "<name>.weight.absmax",
    // ".quant_map", ".quant_state.bitsandbytes__nf4" (bnb.functional.QuantState.as_dict(packed=True)).
    std::set<std::string> names;
    for (const SafetensorsTensor& t : c.tensors) {
      names.insert(t.name);
    }
    Stored s;
    for (const SafetensorsTensor& t : c.tensors) {
      const bool packed = four && names.count(t.name + ".absmax") > 0;
      const bool int8 = !four && t.dtype == "I8" && t.name.ends_with(".weight");
      if (packed || int8) {
        s.tensors += 1;
        s.bytes += t.size_bytes();
      }
    }
    compare(out, c, four ? "bitsandbytes 4-bit packed weights" : "bitsandbytes int8 weights", s, weights,
            bytes);
    return;
  }
  const QuantizedWeightBytes b = quantized_weight_bytes(model, q, c.source);
  switch (q.method) {
    case QuantMethod::kGptq:
    case QuantMethod::kAwq: {
      compare(out, c, "qweight", stored(c, ".qweight"), b.weights, static_cast<std::uint64_t>(b.packed));
      compare(out, c, "qzeros", stored(c, ".qzeros"), b.weights, static_cast<std::uint64_t>(b.zeros));
      compare(out, c, "scales", stored(c, ".scales"), b.weights, static_cast<std::uint64_t>(b.scales));
      break;
    }
    case QuantMethod::kFp8:
      compare(out, c, "float8_e4m3 weights", stored(c, ".weight", "F8_E4M3"), b.weights,
              static_cast<std::uint64_t>(b.packed));
      compare(out, c, "weight_scale_inv", stored(c, ".weight_scale_inv"), b.weights,
              static_cast<std::uint64_t>(b.scales));
      break;
    case QuantMethod::kMxfp4:
      compare(out, c, "mxfp4 blocks", stored(c, "_blocks"), b.weights, static_cast<std::uint64_t>(b.packed));
      compare(out, c, "mxfp4 scales", stored(c, "_scales"), b.weights, static_cast<std::uint64_t>(b.scales));
      break;
    case QuantMethod::kBitsandbytes:
      break;
  }
}

}  // namespace

std::optional<CheckpointWeights> read_checkpoint_weights(const std::string& folder) {
  std::error_code ec;
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  const fs::path single = fs::path(folder) / "model.safetensors";
  CheckpointWeights c;
  if (fs::exists(index, ec)) {
    c.source = index.string();
    std::vector<std::string> shards;
    std::map<std::string, std::string> weight_map;
    read_index(c.source, shards, weight_map);
    for (const std::string& shard : shards) {
      const fs::path path = fs::path(folder) / shard;
      if (!fs::exists(path, ec)) {
        throw InputError(
            fmt::format("{}: shard '{}' (named in weight_map) is not in the folder {}: a partial "
                        "download? Fetch it, or give the config.json path alone",
                        c.source, shard, folder));
      }
      const SafetensorsHeader h = read_safetensors_header(path.string());
      std::set<std::string> names;
      for (const SafetensorsTensor& t : h.tensors) {
        names.insert(t.name);
      }
      for (const auto& [tensor, file] : weight_map) {
        if (file == shard && names.count(tensor) == 0) {
          throw InputError(
              fmt::format("{}: weight_map puts tensor '{}' in '{}', whose header has no such tensor",
                          c.source, tensor, shard));
        }
      }
      add_file(c, h);
    }
  } else if (fs::exists(single, ec)) {
    c.source = single.string();
    add_file(c, read_safetensors_header(c.source));
  } else {
    return std::nullopt;
  }
  total_by_dtype(c);
  return c;
}

std::optional<CheckpointWeights> checkpoint_weights_of(const std::string& name_or_path) {
  const std::optional<std::string> config = model_config_file(name_or_path);
  if (!config || fs::path(*config).filename() != "config.json") {
    return std::nullopt;
  }
  return read_checkpoint_weights(fs::path(*config).parent_path().string());
}

std::vector<std::string> checkpoint_warnings(const CheckpointWeights& checkpoint, const ModelConfig& model,
                                             const std::optional<CheckpointQuantization>& quantization) {
  std::vector<std::string> out;
  if (quantization) {
    quantized_warnings(out, checkpoint, model, *quantization);
    return out;
  }
  const std::vector<ParameterShape> shapes = model.parameter_shapes();
  std::int64_t parameters = model.vision.total();
  for (const ParameterShape& p : shapes) {
    parameters += p.numel();
  }
  if (parameters == checkpoint.total_elements) {
    return out;
  }
  const std::int64_t difference = checkpoint.total_elements - parameters;
  // A parameter the size of the difference: one the checkpoint lacks by name first (a tied lm_head saved
  // once where config.json unties it), else any (a tied weight stored twice).
  std::set<std::string> stored_names;
  for (const SafetensorsTensor& t : checkpoint.tensors) {
    stored_names.insert(t.name);
  }
  const std::int64_t size = difference < 0 ? -difference : difference;
  const ParameterShape* match = nullptr;
  for (const ParameterShape& p : shapes) {
    if (p.numel() == size && (match == nullptr || (difference < 0 && stored_names.count(p.name) == 0 &&
                                                   stored_names.count(match->name) > 0))) {
      match = &p;
    }
  }
  std::string hint;
  if (match != nullptr) {
    hint = fmt::format(" (the size of {} [{}]{})", match->name, fmt::join(match->shape, ", "),
                       difference < 0 && stored_names.count(match->name) == 0 ? ", which the checkpoint lacks"
                       : difference > 0 && model.tied_embeddings ? ": a tied weight stored twice?"
                                                                 : "");
  }
  out.push_back(
      fmt::format("{}: the checkpoint holds {} elements in {} tensors; config.json implies {} parameters "
                  "(model.parameters()): {} {}{}. The prediction follows config.json",
                  checkpoint.source, with_commas(static_cast<std::uint64_t>(checkpoint.total_elements)),
                  checkpoint.tensors.size(), with_commas(static_cast<std::uint64_t>(parameters)),
                  difference > 0 ? "more by" : "fewer by",
                  with_commas(static_cast<std::uint64_t>(difference > 0 ? difference : -difference)), hint));
  return out;
}

std::string describe(const CheckpointWeights& c) {
  std::vector<std::string> dtypes;
  for (const auto& [dtype, bytes] : c.bytes_by_dtype) {
    dtypes.push_back(fmt::format("{} {} B", dtype, with_commas(bytes)));
  }
  return fmt::format("{} file{} ({}), {} tensors, {} B: {}", c.files.size(), c.files.size() == 1 ? "" : "s",
                     fs::path(c.source).filename().string(), c.tensors.size(), with_commas(c.total_bytes),
                     fmt::join(dtypes, ", "));
}

}  // namespace vramsim
