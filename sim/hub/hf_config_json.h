// The reading of a Hugging Face config.json shared by hf_config.cpp (the language models and the table of
// model types) and hf_config_vision.cpp (the vision-language wrappers: gemma3, llava, llava_next, qwen2_vl,
// qwen2_5_vl, mllama): JsonReader, which turns a missing or out-of-range key into the one-line InputError
// that names the file and key, the bounds on shapes, and the readers each file takes from the other.
// Internal to sim/models; model_config.h's model_from_hf_config_json() is the interface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "traces/json_input.h"

namespace vramsim::hf_config {

constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
// Far above real models (Llama 3 405B: 126 layers; DeepSeek-V3: 256 experts), low enough that building the
// parameter table and the step graph stays within seconds and memory of a laptop.
constexpr std::int64_t kMaxLayers = 4096;
constexpr std::int64_t kMaxExperts = 4096;
constexpr std::int64_t kMaxExpertLayers = 65536;  // layers x experts: the MoE parameter tensors / 3
// 2^46 (70 trillion) parameters: no sum of parameter sizes can wrap, and no model is near it.
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 46;

class JsonReader {
 public:
  JsonReader(const nlohmann::json& root, std::string_view source) : m_root(root), m_source(source) {}

  // Positive and at most `max`. Dimensions stay <= 2^24, so that a product of two of them (a weight) is an
  // exact int64 and larger products are checked where tensors are sized (eager_tape.h); counts that
  // multiply the work (layers, experts) have lower limits.
  std::int64_t integer(const char* key, std::int64_t max = kMaxDimension) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) {
      throw InputError(fmt::format("{}: key '{}' must be an integer, got {}", m_source, key, v.type_name()));
    }
    // A value above 2^63 - 1 is number_unsigned: compare it unconverted, not wrapped to a negative int64.
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      throw InputError(
          fmt::format("{}: key '{}' must be in 1..{}, got {}", m_source, key, max, v.get<std::uint64_t>()));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x <= 0 || x > max) {
      throw InputError(fmt::format("{}: key '{}' must be in 1..{}, got {}", m_source, key, max, x));
    }
    return x;
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback, std::int64_t max = kMaxDimension) const {
    return has(key) ? integer(key, max) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_boolean()) {
      throw InputError(
          fmt::format("{}: key '{}' must be true or false, got {}", m_source, key, v.type_name()));
    }
    return v.get<bool>();
  }
  bool has(const char* key) const { return m_root.contains(key) && !m_root.at(key).is_null(); }
  // The key is written as null (a Python None), which a class default does not replace.
  bool is_null(const char* key) const { return m_root.contains(key) && m_root.at(key).is_null(); }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_number()) {
      throw InputError(fmt::format("{}: key '{}' must be a number, got {}", m_source, key, v.type_name()));
    }
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0.0) {
      throw InputError(fmt::format("{}: key '{}' must be a finite non-negative number", m_source, key));
    }
    return x;
  }
  // A probability in [0, 1), as the dropout keys hold.
  double probability_or(const char* key, double fallback) const {
    const double p = number_or(key, fallback);
    if (p >= 1.0) {
      throw InputError(fmt::format("{}: key '{}' must be in [0, 1), got {}", m_source, key, p));
    }
    return p;
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_string()) {
      throw InputError(fmt::format("{}: key '{}' must be a string, got {}", m_source, key, v.type_name()));
    }
    return v.get<std::string>();
  }
  std::vector<std::int64_t> integers_or_empty(const char* key) const {
    std::vector<std::int64_t> out;
    if (!has(key)) {
      return out;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.size() > 4096) {
      throw InputError(fmt::format("{}: key '{}' must be a list of layer indices", m_source, key));
    }
    for (const nlohmann::json& x : v) {
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0) {
        throw InputError(fmt::format("{}: key '{}' must hold non-negative integers", m_source, key));
      }
      out.push_back(x.get<std::int64_t>());
    }
    return out;
  }
  // A list of [a, b] pairs of positive integers (image_grid_pinpoints), `fallback` when absent.
  std::vector<std::pair<std::int64_t, std::int64_t>> integer_pairs_or(
      const char* key, std::vector<std::pair<std::int64_t, std::int64_t>> fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.empty() || v.size() > 4096) {
      throw InputError(
          fmt::format("{}: key '{}' must be a non-empty list of [height, width] pairs", m_source, key));
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const nlohmann::json& x : v) {
      if (!x.is_array() || x.size() != 2 || !x[0].is_number_integer() || !x[1].is_number_integer() ||
          x[0].get<std::int64_t>() <= 0 || x[1].get<std::int64_t>() <= 0 ||
          x[0].get<std::int64_t>() > 65536 || x[1].get<std::int64_t>() > 65536) {
        throw InputError(
            fmt::format("{}: key '{}' must hold [height, width] pairs of 1..65536 pixels", m_source, key));
      }
      out.emplace_back(x[0].get<std::int64_t>(), x[1].get<std::int64_t>());
    }
    return out;
  }
  // A list of strings (layer_types), empty when absent.
  std::vector<std::string> strings_or_empty(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) {
      return out;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.size() > 4096) {
      throw InputError(fmt::format("{}: key '{}' must be a list of strings", m_source, key));
    }
    for (const nlohmann::json& x : v) {
      if (!x.is_string()) {
        throw InputError(fmt::format("{}: key '{}' must hold strings", m_source, key));
      }
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  // The JSON object under `key` (text_config of a multimodal checkpoint), read with the same source name.
  JsonReader child(const char* key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_object()) {
      throw InputError(fmt::format("{}: key '{}' must be an object, got {}", m_source, key, v.type_name()));
    }
    return JsonReader(v, m_source);
  }
  // The object under `key`, or an empty one when it is absent (every key then takes its class default).
  JsonReader child_or_empty(const char* key) const {
    static const nlohmann::json kEmpty = nlohmann::json::object();
    return has(key) ? child(key) : JsonReader(kEmpty, m_source);
  }
  // The JSON object under `key` as it is (an empty object when absent), for a reader that merges class
  // defaults into it.
  nlohmann::json object_or_empty(const char* key) const {
    if (!has(key)) {
      return nlohmann::json::object();
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_object()) {
      throw InputError(fmt::format("{}: key '{}' must be an object, got {}", m_source, key, v.type_name()));
    }
    return v;
  }
  // An integer of either sign (vision_feature_layer: -2 counts from the end).
  std::int64_t signed_integer_or(const char* key, std::int64_t fallback, std::int64_t limit) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_number_integer()) {
      throw InputError(fmt::format("{}: key '{}' must be an integer, got {}", m_source, key, v.type_name()));
    }
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(limit)) {
      throw InputError(fmt::format("{}: key '{}' must be in -{}..{}", m_source, key, limit, limit));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < -limit || x > limit) {
      throw InputError(
          fmt::format("{}: key '{}' must be in -{}..{}, got {}", m_source, key, limit, limit, x));
    }
    return x;
  }
  std::string_view source() const { return m_source; }
  const nlohmann::json& root() const { return m_root; }
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw InputError(fmt::format("{}: key '{}': {}", m_source, key, what));
  }

 private:
  const nlohmann::json& required(const char* key) const {
    if (!has(key)) {
      throw InputError(fmt::format("{}: missing key '{}'", m_source, key));
    }
    return m_root.at(key);
  }
  const nlohmann::json& m_root;
  std::string_view m_source;
};

// hf_config.cpp: a multimodal wrapper's text_config read by its own model_type's reader (not another
// wrapper), Gemma3TextConfig (the gemma3 wrapper's language model), and the gated MLP's activation key.
ModelConfig text_model(const nlohmann::json& text, std::string_view source);
ModelConfig gemma3_text(const JsonReader& r);
// A gated MLP's act_fn = ACT2FN[config[key]] (`fallback` when absent): SiLU, or F.gelu (exact or tanh).
GatedActivation gated_activation(const JsonReader& r, const char* key, const std::string& fallback);

// hf_config_vision.cpp: the vision-language wrappers' readers.
ModelConfig gemma3(const JsonReader& r);
ModelConfig llava(const JsonReader& r);
ModelConfig llava_next(const JsonReader& r);
ModelConfig qwen2_vl(const JsonReader& r);
ModelConfig qwen2_5_vl(const JsonReader& r);
ModelConfig mllama(const JsonReader& r);

}  // namespace vramsim::hf_config
