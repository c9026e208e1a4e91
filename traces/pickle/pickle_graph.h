// The decoded form of a pickle, shared by the pickle machine (pickle_machine.cpp), which builds it, and the
// reader (pickle_reader.cpp), which checks it and reads it as PickleDocument / PickleValue or as JSON.
// Internal to traces/pickle.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/huge_page_allocator.h"

namespace vramsim {
namespace pickle_detail {

// One byte, so that a Node is 16 bytes: a snapshot decodes into millions of nodes (bench/RESULTS.md, "Peak
// memory against file size": 8 bytes a node less took the 100 MB snapshot's heap from 141.9 to 122.0 MiB).
enum class Kind : std::uint8_t {
  kNone,
  kBool,
  kInt,
  kUint,
  kFloat,
  kStr,
  kList,
  kTuple,
  kDict,
  kSet,
  kFrozenSet
};

inline std::string_view kind_name(Kind kind) {
  constexpr std::array<std::string_view, 11> kNames = {"None", "bool",  "int",  "int", "float",    "str",
                                                       "list", "tuple", "dict", "set", "frozenset"};
  return kNames[static_cast<std::size_t>(kind)];
}

inline bool is_container(Kind kind) { return kind >= Kind::kList; }

// One Python object. A kept container owns a slot in PickleGraph::containers (an elided one shares
// kElidedSlot) (dicts store key, value, key, value, ...), so that every reference to it - memo, DUP,
// membership in other containers - shares it and sees its mutations.
struct Node {
  Kind kind = Kind::kNone;
  bool elided = false;       // a container stored under a skipped key: its items were not kept
  bool skip_key = false;     // a str equal to one of the skipped keys
  std::uint32_t offset = 0;  // byte offset of the opcode that created it, for error messages
  union {
    bool b;
    std::int64_t i;  // kInt: negative values only; non-negative ints are kUint like nlohmann's parser
    std::uint64_t u;
    double f;
    struct {
      std::uint32_t begin;
      std::uint32_t size;
    } str;                // a range of the input (validated UTF-8)
    std::uint32_t items;  // containers: index into PickleGraph::containers
  } v{};
};
static_assert(sizeof(Node) == 16, "kind, flags and offset share the union's alignment word");

// A container's items: a region of PickleGraph::arena, with room to grow in place. One arena instead of a
// vector per container: a real snapshot has tens of thousands of containers, and a malloc each cost more
// than decoding them.
struct Items {
  std::uint64_t begin = 0;
  std::uint64_t size = 0;
  std::uint64_t capacity = 0;
};

constexpr std::uint32_t kNoNode = std::numeric_limits<std::uint32_t>::max();

// The containers slot every elided container shares: it stays empty, since nothing is appended to an elided
// container. One slot instead of one each saves an Items record per trace entry (its `frames` list).
constexpr std::uint32_t kElidedSlot = 0;

}  // namespace pickle_detail

// Values are nodes; a memo reference shares a node, never copies it. `data` (the input) must outlive it.
struct PickleGraph {
  using Kind = pickle_detail::Kind;
  using Node = pickle_detail::Node;
  using Items = pickle_detail::Items;
  std::span<const std::uint8_t> data;
  std::string name;
  std::vector<std::string> skip_keys;  // dict values under these keys are not read
  template <class T>
  using Table = std::vector<T, HugePageAllocator<T>>;
  Table<Node> nodes;
  Table<Items> containers;
  Table<std::uint32_t> arena;
  std::uint32_t root = pickle_detail::kNoNode;

  std::span<const std::uint32_t> items(std::uint32_t slot) const {
    const Items& c = containers[slot];
    return {arena.data() + c.begin, static_cast<std::size_t>(c.size)};
  }
  std::string_view str(const Node& node) const {
    return {reinterpret_cast<const char*>(data.data()) + node.v.str.begin, node.v.str.size};
  }
  bool is_skip_key(std::string_view key) const {
    return std::find(skip_keys.begin(), skip_keys.end(), key) != skip_keys.end();
  }
  // A dict key's text: a str as is, an int key as its decimal text (what the JSON form's key is).
  std::string key_text(std::uint32_t id) const {
    const Node& node = nodes[id];
    switch (node.kind) {
      case Kind::kStr:
        return std::string(str(node));
      case Kind::kInt:
        return std::to_string(node.v.i);
      default:
        return std::to_string(node.v.u);
    }
  }
  bool is_skipped_key(std::uint32_t id) const {
    const Node& node = nodes[id];
    if (node.kind == Kind::kStr) {
      return node.skip_key;
    }
    return !skip_keys.empty() && is_skip_key(key_text(id));
  }
};

// Runs the pickle machine over g.data into g (nodes, containers, root). Throws InputError "<name>: byte
// <offset>: <problem>" for any input outside the data-only subset (pickle_reader.h).
void run_pickle_machine(PickleGraph& g);

}  // namespace vramsim
