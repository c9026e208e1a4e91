// quantization_config -> CheckpointQuantization, and the device bytes of the quantized weights (see the
// header for the source of each layout).
#include "sim/hub/checkpoint_quantization.h"

#include "sim/hub/checkpoint_weights.h"
#include "sim/hub/hf_hub_cache.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/models/model_config.h"
#include "traces/json_input.h"

namespace vramsim {
namespace {

using nlohmann::json;

class QuantReader {
 public:
  QuantReader(const json& q, std::string_view source) : m_q(q), m_source(source) {}

  bool has(const char* key) const { return m_q.contains(key) && !m_q.at(key).is_null(); }
  std::string string_or(const char* key, std::string fallback) const {
    if (!has(key)) {
      return fallback;
    }
    if (!m_q.at(key).is_string()) {
      throw error(key, "must be a string");
    }
    return m_q.at(key).get<std::string>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) {
      return fallback;
    }
    if (!m_q.at(key).is_boolean()) {
      throw error(key, "must be true or false");
    }
    return m_q.at(key).get<bool>();
  }
  // A positive integer up to 2^24 (block and group sizes, bits), or -1 where `allow_minus_one`.
  std::int64_t integer_or(const char* key, std::int64_t fallback, bool allow_minus_one = false) const {
    return has(key) ? integer(m_q.at(key), key, allow_minus_one) : fallback;
  }
  std::int64_t integer(const json& v, const char* key, bool allow_minus_one = false) const {
    constexpr std::int64_t kMax = std::int64_t{1} << 24;
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > kMax)) {
      throw error(key, "must be an integer in 1..16777216");
    }
    const std::int64_t x = v.get<std::int64_t>();
    if ((x < 1 || x > kMax) && !(allow_minus_one && x == -1)) {
      throw error(key, fmt::format("must be an integer in 1..16777216{}, got {}",
                                   allow_minus_one ? " or -1" : "", x));
    }
    return x;
  }
  std::vector<std::string> strings_or_empty(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) {
      return out;
    }
    const json& v = m_q.at(key);
    if (!v.is_array()) {
      throw error(key, "must be a list of module names");
    }
    for (const json& s : v) {
      if (!s.is_string()) {
        throw error(key, "must be a list of module names");
      }
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  const json& at(const char* key) const { return m_q.at(key); }
  InputError error(const char* key, std::string_view problem) const {
    return InputError(fmt::format("{}: key 'quantization_config.{}' {}", m_source, key, problem));
  }

 private:
  const json& m_q;
  std::string_view m_source;
};

DType bnb_dtype(const QuantReader& r, const char* key, DType fallback) {
  const std::string s = r.string_or(key, "");
  if (s.empty()) {
    return fallback;
  }
  for (const DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kUInt8}) {
    if (s == dtype_name(d) || s == fmt::format("torch.{}", dtype_name(d))) {
      return d;
    }
  }
  throw r.error(key, fmt::format("names no dtype bitsandbytes takes: '{}'", s));
}

// BitsAndBytesConfig (utils/quantization_config.py): exactly one of load_in_4bit / load_in_8bit.
void read_bitsandbytes(const QuantReader& r, CheckpointQuantization& q) {
  const bool four = r.boolean_or("load_in_4bit", false);
  const bool eight = r.boolean_or("load_in_8bit", false);
  if (four == eight) {
    throw r.error("load_in_4bit", "and 'load_in_8bit': exactly one must be true");
  }
  if (r.boolean_or("llm_int8_has_fp16_weight", false)) {
    throw r.error("llm_int8_has_fp16_weight", "true (fp16 weights kept beside int8) is not modelled");
  }
  if (four) {
    const std::string type = r.string_or("bnb_4bit_quant_type", "fp4");  // BitsAndBytesConfig's default
    if (type != "nf4" && type != "fp4") {
      throw r.error("bnb_4bit_quant_type", fmt::format("must be nf4 or fp4, got '{}'", type));
    }
    q.bnb_format = type == "nf4" ? BnbFormat::kNf4 : BnbFormat::kFp4;
  } else {
    q.bnb_format = BnbFormat::kInt8;
  }
  q.bnb_double_quant = r.boolean_or("bnb_4bit_use_double_quant", false);
  q.bnb_compute_dtype = bnb_dtype(r, "bnb_4bit_compute_dtype", DType::kFloat32);
  q.bnb_quant_storage = bnb_dtype(r, "bnb_4bit_quant_storage", DType::kUInt8);
  q.modules_to_not_convert = r.strings_or_empty("llm_int8_skip_modules");
}

// FineGrainedFP8Config: weight_block_size (default (128, 128)).
void read_fp8(const QuantReader& r, CheckpointQuantization& q) {
  if (r.has("weight_block_size")) {
    const json& b = r.at("weight_block_size");
    if (!b.is_array() || b.size() != 2) {
      throw r.error("weight_block_size", "must be a list of two integers");
    }
    q.block_out = r.integer(b.at(0), "weight_block_size");
    q.block_in = r.integer(b.at(1), "weight_block_size");
  }
  q.modules_to_not_convert = r.strings_or_empty("modules_to_not_convert");
}

// GPTQConfig (bits 2, 3, 4, 8; group_size default 128, -1 for per-column) and AwqConfig (bits 4, group_size
// 128, version gemm).
void read_gptq_awq(const QuantReader& r, CheckpointQuantization& q) {
  const bool awq = q.method == QuantMethod::kAwq;
  if (!awq && !r.has("bits")) {
    throw r.error("bits", "is missing");
  }
  q.bits = r.integer_or("bits", 4);
  if (awq ? q.bits != 4 : (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)) {
    throw r.error("bits", fmt::format("must be {}, got {}", awq ? "4" : "2, 3, 4 or 8", q.bits));
  }
  q.group_size = r.integer_or("group_size", 128, /*allow_minus_one=*/true);
  if (awq) {
    const std::string version = r.string_or("version", "gemm");
    if (version != "gemm") {
      throw r.error("version",
                    fmt::format("'{}': AWQ's {} packing is not modelled (gemm is)", version, version));
    }
  }
  q.modules_to_not_convert = r.strings_or_empty("modules_to_not_convert");
}

// '*' matches any run of characters (the patterns gpt-oss ships: "model.layers.*.self_attn").
bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) {
    return text.empty();
  }
  if (pattern.front() == '*') {
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (glob_match(pattern.substr(1), text.substr(i))) {
        return true;
      }
    }
    return false;
  }
  return !text.empty() && pattern.front() == text.front() && glob_match(pattern.substr(1), text.substr(1));
}

// transformers skips a module when a pattern names it or one of its parents (should_convert_module's
// re.match of the pattern, or the older `key in module_name` of replace_with_bnb_linear).
bool not_converted(std::string_view module, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    if (p.find('*') == std::string::npos) {
      if (module.find(p) != std::string_view::npos) {
        return true;
      }
      continue;
    }
    for (std::size_t end = 0; end <= module.size(); ++end) {
      if ((end == module.size() || module[end] == '.') && glob_match(p, module.substr(0, end))) {
        return true;
      }
    }
  }
  return false;
}

bool has_parameter(const std::vector<ParameterShape>& shapes, const std::string& name) {
  for (const ParameterShape& p : shapes) {
    if (p.name == name) {
      return true;
    }
  }
  return false;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

Bytes checked_bytes(std::int64_t a, std::int64_t b, std::int64_t c, std::string_view source) {
  const auto ab = checked_mul(a, b);
  const auto abc = ab ? checked_mul(*ab, c) : std::nullopt;
  if (!abc) {
    throw InputError(fmt::format("{}: quantized weights too large to count", source));
  }
  return static_cast<Bytes>(*abc);
}

void add_linear(QuantizedWeightBytes& b, const CheckpointQuantization& q, std::int64_t out, std::int64_t in,
                bool bias, const std::string& name, std::string_view source) {
  const auto need = [&](bool ok, std::string_view what) {
    if (!ok) {
      throw InputError(fmt::format("{}: {} weight '{}' ({} x {}): {}", source, quant_method_name(q.method),
                                   name, out, in, what));
    }
  };
  b.weights += 1;
  if (q.method == QuantMethod::kFp8) {
    b.packed += checked_bytes(out, in, 1, source);
    b.scales += checked_bytes(ceil_div(out, q.block_out), ceil_div(in, q.block_in), 4, source);
    return;
  }
  const std::int64_t group = q.group_size == -1 ? in : q.group_size;
  if (q.method == QuantMethod::kGptq) {
    need(in % 32 == 0 && out % 32 == 0, "GPTQ packs 32 values of both dimensions into int32");
    b.packed += checked_bytes(in / 32 * q.bits, out, 4, source);
    b.zeros += checked_bytes(ceil_div(in, group), out / 32 * q.bits, 4, source);
    b.scales += checked_bytes(ceil_div(in, group), out, 2, source);
    b.other += checked_bytes(in, 1, 4, source) + (bias ? checked_bytes(out, 1, 2, source) : 0);
    return;
  }
  const std::int64_t pack = 32 / q.bits;  // awq
  need(out % pack == 0 && in % group == 0, "WQLinear_GEMM needs out % 8 == 0 and in % group_size == 0");
  b.packed += checked_bytes(in, out / pack, 4, source);
  b.zeros += checked_bytes(in / group, out / pack, 4, source);
  b.scales += checked_bytes(in / group, out, 2, source);
  b.other += bias ? checked_bytes(out, 1, 2, source) : 0;
}

// Mxfp4GptOssExperts: gate_up_proj [E, d, 2 ff] as blocks [E, 2 ff, d / 32, 16] and scales [E, 2 ff, d / 32];
// down_proj [E, ff, d] as [E, d, ff / 32, 16] and [E, d, ff / 32]; both biases float32.
void add_mxfp4_experts(QuantizedWeightBytes& b, const ParameterShape& p, std::string_view source) {
  const std::int64_t experts = p.shape.at(0), in = p.shape.at(1), out = p.shape.at(2);
  if (in % 32 != 0) {
    throw InputError(fmt::format("{}: mxfp4 weight '{}': its input dimension {} is not a multiple of 32",
                                 source, p.name, in));
  }
  b.weights += 1;
  b.packed += checked_bytes(experts * out, in / 32, 16, source);
  b.scales += checked_bytes(experts * out, in / 32, 1, source);
}

}  // namespace

std::string_view quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::kBitsandbytes:
      return "bitsandbytes";
    case QuantMethod::kFp8:
      return "fp8";
    case QuantMethod::kMxfp4:
      return "mxfp4";
    case QuantMethod::kGptq:
      return "gptq";
    case QuantMethod::kAwq:
      return "awq";
  }
  return "?";
}

std::optional<CheckpointQuantization> read_checkpoint_quantization(std::string_view json_text,
                                                                   std::string_view source) {
  const json root = parse_json_input(json_text, source, kMaxSmallJsonMemory);
  if (!root.is_object() || !root.contains("quantization_config") ||
      root.at("quantization_config").is_null()) {
    return std::nullopt;
  }
  const json& qc = root.at("quantization_config");
  if (!qc.is_object()) {
    throw InputError(fmt::format("{}: key 'quantization_config' must be an object", source));
  }
  const QuantReader r(qc, source);
  CheckpointQuantization q;
  // AutoQuantizationConfig.from_dict: a config without quant_method that loads in 4 or 8 bit is bitsandbytes
  std::string method = r.string_or("quant_method", "");
  if (method.empty() && (r.boolean_or("load_in_4bit", false) || r.boolean_or("load_in_8bit", false))) {
    method = "bitsandbytes";
  }
  if (method == "bitsandbytes") {
    read_bitsandbytes(r, q);
  } else if (method == "fp8") {
    q.method = QuantMethod::kFp8;
    read_fp8(r, q);
  } else if (method == "mxfp4") {
    q.method = QuantMethod::kMxfp4;
    q.modules_to_not_convert = r.strings_or_empty("modules_to_not_convert");
  } else if (method == "gptq" || method == "awq") {
    q.method = method == "gptq" ? QuantMethod::kGptq : QuantMethod::kAwq;
    read_gptq_awq(r, q);
  } else if (method.empty()) {
    throw r.error("quant_method", "is missing");
  } else {
    throw r.error("quant_method",
                  fmt::format("'{}' is not modelled (read: bitsandbytes, fp8, mxfp4, gptq, awq)", method));
  }
  return q;
}

std::optional<CheckpointQuantization> checkpoint_quantization_of(const std::string& name_or_path) {
  const std::optional<std::string> config = model_config_file(name_or_path);  // the file load_model reads
  if (!config) {
    return std::nullopt;  // a preset, or a name load_model refuses
  }
  const std::string text = read_input_file(*config, "model config file", kMaxSmallInputBytes);
  try {
    return read_checkpoint_quantization(text, *config);
  } catch (const InputError& e) {
    // A format not read (compressed-tensors, hqq, ...): say what the checkpoint holds, from its headers.
    const std::optional<CheckpointWeights> stored = checkpoint_weights_of(name_or_path);
    if (!stored) {
      throw;
    }
    throw InputError(
        fmt::format("{}; the checkpoint's safetensors headers: {}", e.what(), describe(*stored)));
  }
}

bool is_quantized_weight(const ModelConfig& model, const CheckpointQuantization& q, const ParameterShape& p) {
  const std::string_view name = p.name;
  if (q.method == QuantMethod::kMxfp4) {  // replace_with_mxfp4_linear swaps GptOssExperts only
    return model.model_type == "gpt_oss" && p.shape.size() == 3 &&
           (name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj"));
  }
  if (!is_bnb_target(p)) {
    return false;
  }
  const std::string_view module = name.substr(0, name.size() - 7);  // without ".weight"
  // DeepseekV3TopkRouter and GptOssTopKRouter hold a Parameter, not an nn.Linear
  if ((model.model_type == "deepseek_v3" && module.ends_with("mlp.gate")) ||
      (model.model_type == "gpt_oss" && module.ends_with("mlp.router"))) {
    return false;
  }
  return !not_converted(module, q.modules_to_not_convert);
}

QuantizedWeightBytes quantized_weight_bytes(const ModelConfig& model, const CheckpointQuantization& q,
                                            std::string_view source) {
  QuantizedWeightBytes b;
  if (q.method == QuantMethod::kBitsandbytes) {
    throw InputError(fmt::format("{}: bitsandbytes weights are counted by the step (bnb_quant.h)", source));
  }
  if (q.method == QuantMethod::kMxfp4 && model.model_type != "gpt_oss") {
    throw InputError(fmt::format("{}: quantization_config mxfp4 is modelled for gpt_oss only, not '{}'",
                                 source, model.model_type));
  }
  const std::vector<ParameterShape> shapes = model.parameter_shapes();
  for (const ParameterShape& p : shapes) {
    if (q.method == QuantMethod::kMxfp4) {
      if (is_quantized_weight(model, q, p)) {
        add_mxfp4_experts(b, p, source);
      } else if (p.name.ends_with("experts.gate_up_proj_bias") ||
                 p.name.ends_with("experts.down_proj_bias")) {
        b.other += checked_bytes(p.numel(), 1, 4, source);  // float32 in Mxfp4GptOssExperts
      }
      continue;
    }
    if (p.shape.size() == 3 && (p.name.ends_with("gate_up_proj") || p.name.ends_with("down_proj"))) {
      throw InputError(fmt::format("{}: {} weights of fused experts ('{}') are not modelled", source,
                                   quant_method_name(q.method), p.name));
    }
    if (is_quantized_weight(model, q, p)) {
      const std::string module = p.name.substr(0, p.name.size() - 7);
      add_linear(b, q, p.shape.at(0), p.shape.at(1), has_parameter(shapes, module + ".bias"), p.name, source);
    }
  }
  return b;
}

void refuse_unmodelled_quantization(const CheckpointQuantization& q, const std::string& name_or_path) {
  if (q.method == QuantMethod::kBitsandbytes) {
    return;
  }
  const QuantizedWeightBytes b = quantized_weight_bytes(load_model(name_or_path), q, name_or_path);
  // The checkpoint as stored, where its safetensors headers are beside config.json.
  const std::optional<CheckpointWeights> stored = checkpoint_weights_of(name_or_path);
  throw InputError(fmt::format(
      "{}: quantization_config: {}: {} weights in {} B ({} B of values, {} B of scales, {} B of zero points, "
      "{} B "
      "other){}; predicting with these weights is not modelled. For the model dequantized to its torch_dtype "
      "(transformers' dequantize=True), give a copy of config.json without quantization_config",
      name_or_path, describe(q), b.weights, b.total(), b.packed, b.scales, b.zeros, b.other,
      stored ? fmt::format("; the checkpoint's safetensors headers: {}", describe(*stored)) : ""));
}

std::string describe(const CheckpointQuantization& q) {
  switch (q.method) {
    case QuantMethod::kBitsandbytes:
      return fmt::format("bitsandbytes {}", base_weights_name(q.bnb_format));
    case QuantMethod::kFp8:
      return fmt::format("fp8 (float8_e4m3fn weights, a float32 scale per {} x {} block)", q.block_out,
                         q.block_in);
    case QuantMethod::kMxfp4:
      return "mxfp4 (the experts as 4-bit values, a uint8 scale per 32)";
    case QuantMethod::kGptq:
    case QuantMethod::kAwq:
      return fmt::format(
          "{} ({}-bit int32-packed weights, a float16 scale and a packed zero per group of {})",
          quant_method_name(q.method), q.bits,
          q.group_size == -1 ? std::string("the whole input") : std::to_string(q.group_size));
  }
  return "";
}

}  // namespace vramsim
