// Data-only pickle reader. Two passes, so that memo sharing can never blow up time or memory:
//   1. The pickle machine (pickle_machine.cpp) builds a graph of shared nodes.
//   2. The graph reachable from the result is checked (cycles, nesting depth, size of the expanded tree) in
//   one
//      memoised DFS; only then is it read in place (PickleValue) or expanded into nlohmann::json, whose size
//      is now known to be bounded.
#include "traces/pickle/pickle_reader.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "traces/pickle/pickle_graph.h"

namespace vramsim {
namespace {

using namespace pickle_detail;

// The expanded JSON tree is bounded in bytes, not values: a memo reference to one long str copies it, so a
// 1 MiB str referenced 50,000 times is 50 GiB of output from 1 MiB of input. Each value is charged
// kOutputBytesPerValue (about what nlohmann::json spends on one: the 16-byte value, a std::string or map
// node behind it) plus the bytes of its str and of its dict key. The 58 real snapshots in shared/traces/real
// expand to at most 3.3 values and 45 str bytes per input byte with their frames (150 bytes by this measure),
// 0.33 values and 1.6 str bytes without them (what replay reads); 256 per input byte leaves headroom above
// both, and the base lets small inputs expand as far as real ones of a few hundred KB.
constexpr std::uint64_t kOutputBytesPerValue = 32;
constexpr std::uint64_t kOutputBytesPerInputByte = 256;
constexpr std::uint64_t kOutputBytesBase = 32 * 1024 * 1024;

// The graph reachable from the root, checked in one memoised walk: no container contains itself, nesting is
// at most kMaxPickleDepth, the expanded tree stays within the output bound, and a container whose items were
// not kept appears only under skipped keys.
class GraphCheck {
 public:
  explicit GraphCheck(const PickleGraph& g) : g_(g) {}

  void run() {
    const Node& root = g_.nodes[g_.root];
    if (!is_container(root.kind)) {
      return;  // a lone scalar or str costs no more than the input holds
    }
    if (root.elided) {
      not_kept(root);
    }
    budget_ = kOutputBytesPerInputByte * g_.data.size() + kOutputBytesBase;
    visit_.assign(g_.containers.size(), Visit::kNew);
    height_.assign(g_.containers.size(), 0);
    expansion_.assign(g_.containers.size(), 0);
    visit(g_.root, 1);
  }

 private:
  [[noreturn]] void fail(std::size_t offset, std::string_view problem) const {
    throw InputError(fmt::format("{}: byte {}: {}", g_.name, offset, problem));
  }
  [[noreturn]] void not_kept(const Node& node) const {
    fail(node.offset, fmt::format("this {} is stored under a key that is not read and also where values are "
                                  "read; vramsim does not keep such values",
                                  kind_name(node.kind)));
  }
  // What a scalar or str costs in the output: one value, plus a str's bytes (an int key's digits fit the
  // value's share).
  std::uint64_t scalar_cost(const Node& node) const {
    return kOutputBytesPerValue + (node.kind == Kind::kStr ? node.v.str.size : 0);
  }

  // Each container is expanded once, so this is linear in the graph even when its tree is exponential.
  // Recursion depth stays <= kMaxPickleDepth + 1 because deeper paths fail first. A value under a skipped
  // dict key costs only the empty array that replaces it.
  void visit(std::uint32_t id, int depth) {
    const Node& node = g_.nodes[id];
    if (depth > kMaxPickleDepth) {
      fail(node.offset, fmt::format("containers nest deeper than {} levels", kMaxPickleDepth));
    }
    const std::uint32_t slot = node.v.items;
    visit_[slot] = Visit::kOnPath;
    const bool dict = node.kind == Kind::kDict;
    const std::span<const std::uint32_t> items = g_.items(slot);
    std::uint64_t expansion = kOutputBytesPerValue;
    int height = 1;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Node& child = g_.nodes[items[i]];
      const bool skipped = dict && i % 2 == 1 && g_.is_skipped_key(items[i - 1]);
      if (is_container(child.kind)) {
        if (child.elided && !skipped) {
          not_kept(child);
        }
        const std::uint32_t child_slot = child.v.items;
        if (visit_[child_slot] == Visit::kOnPath) {
          fail(child.offset,
               fmt::format("this {} contains itself, which JSON cannot represent", kind_name(child.kind)));
        }
        if (visit_[child_slot] == Visit::kNew) {
          visit(items[i], depth + 1);
        } else if (depth + height_[child_slot] > kMaxPickleDepth) {
          fail(child.offset, fmt::format("containers nest deeper than {} levels", kMaxPickleDepth));
        }
        height = std::max(height, height_[child_slot] + 1);
        expansion += skipped ? kOutputBytesPerValue : expansion_[child_slot];
      } else {
        expansion += skipped ? kOutputBytesPerValue : scalar_cost(child);
      }
      // Checked per child, each child costing <= budget (or < 4 GiB for a str): no overflow.
      if (expansion > budget_) {
        fail(
            node.offset,
            fmt::format("output would exceed {} bytes: memo references copy the values they share", budget_));
      }
    }
    visit_[slot] = Visit::kDone;
    height_[slot] = static_cast<std::uint16_t>(height);
    expansion_[slot] = expansion;
  }

  const PickleGraph& g_;
  enum class Visit : std::uint8_t { kNew, kOnPath, kDone };
  std::vector<Visit> visit_;
  std::vector<std::uint16_t> height_;     // containers on the longest downward path, itself included
  std::vector<std::uint64_t> expansion_;  // output bytes its expansion costs, itself included
  std::uint64_t budget_ = 0;
};

nlohmann::json to_json(const PickleGraph& g, std::uint32_t id) {
  const Node& node = g.nodes[id];
  switch (node.kind) {
    case Kind::kNone:
      return nullptr;
    case Kind::kBool:
      return node.v.b;
    case Kind::kInt:
      return node.v.i;
    case Kind::kUint:
      return node.v.u;
    case Kind::kFloat:
      return node.v.f;
    case Kind::kStr:
      return g.key_text(id);
    case Kind::kDict: {
      nlohmann::json object = nlohmann::json::object();
      auto& fields = object.get_ref<nlohmann::json::object_t&>();
      const std::span<const std::uint32_t> items = g.items(node.v.items);
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        // later duplicates win, as in Python
        fields.insert_or_assign(g.key_text(items[i]), g.is_skipped_key(items[i]) ? nlohmann::json::array()
                                                                                 : to_json(g, items[i + 1]));
      }
      return object;
    }
    default: {
      nlohmann::json array = nlohmann::json::array();
      auto& values = array.get_ref<nlohmann::json::array_t&>();
      const std::span<const std::uint32_t> items = g.items(node.v.items);
      values.reserve(items.size());
      for (const std::uint32_t item : items) {
        values.push_back(to_json(g, item));
      }
      return array;
    }
  }
}

}  // namespace

// ---- PickleValue ----

std::string_view PickleValue::type_name() const {
  switch (graph_->nodes[node_].kind) {
    case Kind::kNone:
      return "null";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
    case Kind::kUint:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "string";
    case Kind::kDict:
      return "object";
    default:
      return "array";
  }
}
bool PickleValue::is_object() const { return graph_->nodes[node_].kind == Kind::kDict; }
bool PickleValue::is_array() const {
  const Kind kind = graph_->nodes[node_].kind;
  return is_container(kind) && kind != Kind::kDict;
}
bool PickleValue::is_string() const { return graph_->nodes[node_].kind == Kind::kStr; }
bool PickleValue::is_boolean() const { return graph_->nodes[node_].kind == Kind::kBool; }
bool PickleValue::is_null() const { return graph_->nodes[node_].kind == Kind::kNone; }
bool PickleValue::is_number() const {
  return is_number_integer() || graph_->nodes[node_].kind == Kind::kFloat;
}
bool PickleValue::is_number_integer() const {
  const Kind kind = graph_->nodes[node_].kind;
  return kind == Kind::kInt || kind == Kind::kUint;
}
bool PickleValue::is_number_unsigned() const { return graph_->nodes[node_].kind == Kind::kUint; }
bool PickleValue::as_bool() const {
  SIM_ASSERT(is_boolean());
  return graph_->nodes[node_].v.b;
}
std::uint64_t PickleValue::as_uint() const {
  SIM_ASSERT(is_number_unsigned());
  return graph_->nodes[node_].v.u;
}
std::int64_t PickleValue::as_int() const {
  const Node& node = graph_->nodes[node_];
  SIM_ASSERT(
      node.kind == Kind::kInt ||
      (node.kind == Kind::kUint && node.v.u <= std::uint64_t{std::numeric_limits<std::int64_t>::max()}));
  return node.kind == Kind::kInt ? node.v.i : static_cast<std::int64_t>(node.v.u);
}
double PickleValue::as_double() const {
  const Node& node = graph_->nodes[node_];
  SIM_ASSERT(is_number());
  return node.kind == Kind::kFloat  ? node.v.f
         : node.kind == Kind::kUint ? static_cast<double>(node.v.u)
                                    : static_cast<double>(node.v.i);
}
std::string_view PickleValue::as_string() const {
  SIM_ASSERT(is_string());
  return graph_->str(graph_->nodes[node_]);
}
std::size_t PickleValue::size() const {
  SIM_ASSERT(is_array());
  return graph_->items(graph_->nodes[node_].v.items).size();
}
PickleValue PickleValue::at(std::size_t index) const {
  SIM_ASSERT(index < size());
  return {graph_, graph_->items(graph_->nodes[node_].v.items)[index]};
}
std::optional<PickleValue> PickleValue::find(std::string_view key) const {
  SIM_ASSERT(is_object());
  const std::span<const std::uint32_t> items = graph_->items(graph_->nodes[node_].v.items);
  for (std::size_t i = items.size(); i >= 2; i -= 2) {  // the last of repeated keys wins
    const Node& k = graph_->nodes[items[i - 2]];
    if (k.kind != Kind::kStr) {
      if (graph_->key_text(items[i - 2]) == key) {
        return PickleValue(graph_, items[i - 1]);
      }
      continue;
    }
    // Most keys differ in length or first byte: no memcmp call for them.
    const std::string_view text = graph_->str(k);
    if (text.size() == key.size() && (key.empty() || text[0] == key[0]) && text == key) {
      return PickleValue(graph_, items[i - 1]);
    }
  }
  return std::nullopt;
}
void PickleValue::visit_members(void* fn, void (*call)(void*, std::string_view, PickleValue)) const {
  SIM_ASSERT(is_object());
  const std::span<const std::uint32_t> items = graph_->items(graph_->nodes[node_].v.items);
  std::string scratch;  // an int key's decimal text
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    const Node& key = graph_->nodes[items[i]];
    if (key.kind == Kind::kStr) {
      call(fn, graph_->str(key), PickleValue(graph_, items[i + 1]));
    } else {
      scratch = graph_->key_text(items[i]);
      call(fn, scratch, PickleValue(graph_, items[i + 1]));
    }
  }
}

// ---- PickleDocument ----

PickleDocument::PickleDocument(std::span<const std::uint8_t> data, std::string_view name,
                               std::span<const std::string_view> skip_keys)
    : graph_(std::make_unique<PickleGraph>()) {
  graph_->data = data;
  graph_->name = std::string(name);
  graph_->skip_keys.assign(skip_keys.begin(), skip_keys.end());
  run_pickle_machine(*graph_);
  GraphCheck(*graph_).run();
}
PickleDocument::~PickleDocument() = default;
PickleDocument::PickleDocument(PickleDocument&&) noexcept = default;
PickleDocument& PickleDocument::operator=(PickleDocument&&) noexcept = default;

PickleValue PickleDocument::root() const { return {graph_.get(), graph_->root}; }

nlohmann::json PickleDocument::to_json() const { return vramsim::to_json(*graph_, graph_->root); }

nlohmann::json read_pickle(std::span<const std::uint8_t> data, std::string_view name,
                           std::span<const std::string_view> skip_keys) {
  return PickleDocument(data, name, skip_keys).to_json();
}

}  // namespace vramsim
