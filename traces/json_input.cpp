#include "traces/json_input.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

namespace {

using nlohmann::json;

// nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 5: <reason>"; keep
// the reason, on one line.
std::string parse_error_reason(const char* what) {
  std::string_view text = what;
  if (const auto colon = text.find(": "); colon != std::string_view::npos) {
    text.remove_prefix(colon + 2);
  }
  if (text.starts_with("[json.exception.")) {  // "[json.exception.out_of_range.406] number overflow ..."
    if (const auto bracket = text.find("] "); bracket != std::string_view::npos) {
      text.remove_prefix(bracket + 2);
    }
  }
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) {
      c = ' ';
    }
  }
  return out;
}

// Adds up what each value will take once built, an upper bound of nlohmann::json's layout on 64-bit
// libstdc++: every value a 16-byte slot (twice that in an array, for the vector's growth), a container its
// heap object, an object member a map node and its key, a string its heap buffer. Stops the parse (returns
// false) as soon as the sum passes the limit.
class MemoryEstimate : public nlohmann::json_sax<json> {
 public:
  explicit MemoryEstimate(std::size_t limit) : limit_(limit) {}

  bool null() override { return add(32); }
  bool boolean(bool /*val*/) override { return add(32); }
  bool number_integer(number_integer_t /*val*/) override { return add(32); }
  bool number_unsigned(number_unsigned_t /*val*/) override { return add(32); }
  bool number_float(number_float_t /*val*/, const string_t& /*s*/) override { return add(32); }
  bool string(string_t& val) override { return add(64 + val.size()); }
  bool binary(binary_t& val) override { return add(64 + val.size()); }
  bool start_object(std::size_t /*elements*/) override { return add(96); }
  bool key(string_t& val) override { return add(96 + val.size()); }
  bool end_object() override { return true; }
  bool start_array(std::size_t /*elements*/) override { return add(64); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    error_byte_ = position;
    error_ = parse_error_reason(ex.what());
    return false;
  }

  std::size_t bytes() const { return bytes_; }
  bool too_large() const { return bytes_ > limit_; }
  const std::string& error() const { return error_; }
  std::size_t error_byte() const { return error_byte_; }

 private:
  bool add(std::size_t n) {
    bytes_ += n;
    return bytes_ <= limit_;
  }

  std::size_t limit_;
  std::size_t bytes_ = 0;
  std::string error_;
  std::size_t error_byte_ = 0;
};

}  // namespace

json parse_json_input(std::string_view text, std::string_view source, std::size_t memory_limit,
                      std::size_t byte_base) {
  MemoryEstimate estimate(memory_limit);
  const bool ok = json::sax_parse(text.begin(), text.end(), &estimate);
  if (estimate.too_large()) {
    throw InputError(fmt::format(
        "{}: a JSON document of {} bytes that would take more than {} bytes of memory once parsed: not read",
        source, text.size(), memory_limit));
  }
  if (!ok) {
    throw InputError(fmt::format("{}: byte {}: invalid JSON: {}", source, byte_base + estimate.error_byte(),
                                 estimate.error()));
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {  // not expected: the first pass read the same text
    throw InputError(fmt::format("{}: byte {}: invalid JSON: {}", source, byte_base + e.byte,
                                 parse_error_reason(e.what())));
  }
}

namespace {

// The first control character in `text` (C0, DEL, or C1 as UTF-8 0xC2 0x80..0x9F), or npos.
std::size_t control_character(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      return i;
    }
    if (c == 0xc2 && i + 1 < text.size()) {
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next <= 0x9f) {
        return i;
      }
    }
  }
  return std::string_view::npos;
}

std::string value_problem(const json& v) {
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    if (const std::size_t at = control_character(text); at != std::string_view::npos) {
      return fmt::format("string has control character 0x{:02X} at character {}",
                         static_cast<unsigned char>(text[at]), at);
    }
  } else if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxJsonNumber)) {
      return fmt::format("number {} is larger than 2^60", v.get<std::uint64_t>());
    }
  } else if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    if (n < -kMaxJsonNumber || n > kMaxJsonNumber) {
      return fmt::format("number {} is outside -2^60..2^60", n);
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d >= -static_cast<double>(kMaxJsonNumber) && d <= static_cast<double>(kMaxJsonNumber))) {
      return fmt::format("number {} is outside -2^60..2^60", d);
    }
  }
  return {};
}

std::string int_problem(const json& v, std::int64_t lo, std::int64_t hi) {
  bool in_range = false;
  if (v.is_number_unsigned()) {
    const auto n = v.get<std::uint64_t>();
    in_range =
        hi >= 0 && n <= static_cast<std::uint64_t>(hi) && (lo <= 0 || n >= static_cast<std::uint64_t>(lo));
  } else if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    in_range = n >= lo && n <= hi;
  }
  if (in_range) {
    return {};
  }
  return fmt::format("expected an integer in {}..{}, got {}", lo, hi,
                     v.dump(-1, ' ', false, json::error_handler_t::replace));
}

// A value met in check_json_values' walk: where it hangs (its parent's node and its key or index), so that
// the path of a wrong one can be written without building a path for every value.
struct Node {
  const json* value;
  std::size_t parent;  // npos for the root
  const std::string* key;
  std::size_t index;
};

std::string node_path(const std::vector<Node>& nodes, std::size_t n) {
  std::vector<std::string> parts;
  for (; nodes[n].parent != std::string::npos; n = nodes[n].parent) {
    parts.push_back(nodes[n].key != nullptr ? "." + *nodes[n].key : fmt::format("[{}]", nodes[n].index));
  }
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    path += *it;
  }
  if (path.starts_with('.')) {
    path.erase(0, 1);
  }
  return path.empty() ? "top level" : path;
}

}  // namespace

void check_json_values(const json& root, std::string_view source) {
  std::vector<Node> nodes{{&root, std::string::npos, nullptr, 0}};
  std::vector<std::size_t> todo{0};
  while (!todo.empty()) {
    const std::size_t n = todo.back();
    todo.pop_back();
    const json& v = *nodes[n].value;
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (const std::size_t at = control_character(it.key()); at != std::string_view::npos) {
          throw InputError(fmt::format("{}: {}: a key has control character 0x{:02X}", source,
                                       node_path(nodes, n), static_cast<unsigned char>(it.key()[at])));
        }
        nodes.push_back({&it.value(), n, &it.key(), 0});
        todo.push_back(nodes.size() - 1);
      }
    } else if (v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i) {
        nodes.push_back({&v[i], n, nullptr, i});
        todo.push_back(nodes.size() - 1);
      }
    } else if (const std::string problem = value_problem(v); !problem.empty()) {
      throw InputError(fmt::format("{}: {}: {}", source, node_path(nodes, n), problem));
    }
  }
}

std::int64_t json_int(const json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  const json& v = j.at(key);
  if (const std::string problem = int_problem(v, lo, hi); !problem.empty()) {
    throw JsonValueError(fmt::format("{}: {}", key, problem));
  }
  return v.get<std::int64_t>();
}

std::int64_t json_int_at(const json& j, std::size_t index, std::int64_t lo, std::int64_t hi) {
  const json& v = j.at(index);
  if (const std::string problem = int_problem(v, lo, hi); !problem.empty()) {
    throw JsonValueError(fmt::format("[{}]: {}", index, problem));
  }
  return v.get<std::int64_t>();
}

}  // namespace vramsim
