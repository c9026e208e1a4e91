// A data-only decoder for the pickle subset that torch.cuda.memory._dump_snapshot() writes
// (protocols 2-5 of plain containers: dict, list, tuple, str, int incl. LONG1 big ints up to 64 bits, float,
// bool, None, memo ops, FRAME), and an encoder for the same subset.
//
// Contract: it never imports, calls or constructs anything named in the input. Opcodes that would
// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID,
// NEXT_BUFFER, READONLY_BUFFER) and every unknown opcode are rejected with
// InputError("<name>: byte <offset>: unsupported pickle opcode 0x63 ('c' GLOBAL): vramsim reads data only").
// Every error is an InputError "<name>: byte <offset>: <problem>", where offset is the byte offset of the
// offending opcode (or of the container at fault), or the input size when the data ran out.
//
// Accepted beyond the real files' opcodes: NONE, NEWTRUE, EMPTY_TUPLE, TUPLE, TUPLE1/3, SETITEM, DICT, LIST,
// BINUNICODE8, EMPTY_SET/ADDITEMS/FROZENSET, PUT/BINPUT/LONG_BINPUT, GET, LONG4, POP, POP_MARK, DUP and the
// protocol 0/1 text forms INT (incl. "I01" booleans), LONG, FLOAT, PUT, GET (decimal only, 64-bit only).
// Rejected data opcodes: BINBYTES/SHORT_BINBYTES/BINBYTES8/BYTEARRAY8 (JSON has no bytes type; snapshots
// hold none) and the text-mode / Python 2 strings STRING, BINSTRING, SHORT_BINSTRING, UNICODE.
//
// Also errors: truncated data, a declared length or FRAME past the end (checked before anything is read
// or allocated for it), stack underflow (an opcode may only use values above the innermost MARK), a
// missing MARK, a memo reference to an unset slot, APPEND/APPENDS onto a non-list, SETITEM(S) onto a
// non-dict, ADDITEMS onto a non-set, an odd item count for SETITEMS/DICT, a dict key that is not str or
// int, a str that is not strict UTF-8 (Python would take lone surrogates; JSON cannot), an int outside
// [-2^63, 2^64), a container that contains itself, nesting deeper than kMaxPickleDepth, an output larger
// than 256 bytes per input byte + 32 MiB (memo sharing expanded into a tree; each value counted as 32 bytes
// plus the bytes of its str, so one long str referenced many times counts every copy), PROTO > 5, a
// missing STOP, and any byte after STOP (Python ignores those; here they mean a damaged file). Values
// left on the stack under the result at STOP are ignored, as Python does.
//
// Cost: one pass over the input builds a graph of shared values (a memo reference shares a node, never a
// copy): time and memory linear in the input. Checking the graph (cycles, depth, the expansion bound) is a
// memoised walk, linear too. Containers stored under a skipped key are decoded and checked opcode by opcode
// but their items are not kept (stack frames are most of a real snapshot); if such a container is also
// referenced where values are read, that is an error (it was not kept). read_pickle then expands the graph
// into nlohmann::json, whose size the expansion bound caps; PickleDocument reads it in place, without that
// copy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vramsim {

// Containers nested deeper than this (counting the outermost as 1) are rejected by both functions.
inline constexpr int kMaxPickleDepth = 256;

// Decodes `data` into a JSON value: dict -> object (str keys; int keys become their decimal text; a later
// duplicate key wins, as in Python), list/tuple/set/frozenset -> array (sets in pickle order),
// str -> string, int -> number_unsigned when >= 0 else number_integer (as nlohmann's own parser does),
// float -> number_float (NaN/inf kept), bool -> boolean, None -> null. `name` (usually the file name)
// starts every error message. Values stored under a dict key listed in `skip_keys` come out as an empty
// array: they are still decoded and checked, but not materialised (snapshot readers pass {"frames"}, which is
// 97% of a real snapshot once its shared stack frames are expanded).
nlohmann::json read_pickle(std::span<const std::uint8_t> data, std::string_view name,
                           std::span<const std::string_view> skip_keys = {});

struct PickleGraph;

// One decoded value, read in place, in the terms of its JSON form (what read_pickle would return for it):
// dict -> object, list/tuple/set/frozenset -> array, str -> string, int -> integer (unsigned when >= 0),
// float, bool -> boolean, None -> null. A value is a pointer into its PickleDocument, which must outlive it.
// Calling an accessor of the wrong kind (as_uint on a string, at() past the end) is a programming error.
class PickleValue {
 public:
  // nlohmann's type names, with integers and floats told apart: "object", "array", "string", "integer",
  // "float", "boolean", "null".
  std::string_view type_name() const;
  bool is_object() const;
  bool is_array() const;
  bool is_string() const;
  bool is_boolean() const;
  bool is_null() const;
  bool is_number() const;           // integer or float
  bool is_number_integer() const;   // any int
  bool is_number_unsigned() const;  // an int >= 0
  bool as_bool() const;
  std::uint64_t as_uint() const;  // is_number_unsigned
  std::int64_t as_int() const;    // is_number_integer and below 2^63
  double as_double() const;       // is_number
  std::string_view as_string() const;
  std::size_t size() const;  // arrays: items (an object's size is not needed by any reader)
  PickleValue at(std::size_t index) const;
  // Objects: the value of `key` (a str key, or an int key's decimal text); the last one when a key repeats,
  // as in Python's dict.
  std::optional<PickleValue> find(std::string_view key) const;
  // Objects: f(std::string_view key_text, PickleValue value) for every pair in pickle order, repeated keys
  // included (later ones win in Python).
  template <class F>
  void for_each_member(F&& f) const {
    visit_members(
        &f, [](void* fn, std::string_view key, PickleValue value) { (*static_cast<F*>(fn))(key, value); });
  }

 private:
  friend class PickleDocument;
  PickleValue(const PickleGraph* graph, std::uint32_t node) : graph_(graph), node_(node) {}
  void visit_members(void* fn, void (*call)(void*, std::string_view, PickleValue)) const;

  const PickleGraph* graph_;
  std::uint32_t node_;
};

// A decoded pickle, checked as read_pickle checks it (the same errors, the same bound on its expansion). The
// input bytes must outlive the document: strings point into them.
class PickleDocument {
 public:
  PickleDocument(std::span<const std::uint8_t> data, std::string_view name,
                 std::span<const std::string_view> skip_keys = {});
  ~PickleDocument();
  PickleDocument(PickleDocument&&) noexcept;
  PickleDocument& operator=(PickleDocument&&) noexcept;

  PickleValue root() const;
  // The JSON value read_pickle returns (values under skipped keys as empty arrays).
  nlohmann::json to_json() const;

 private:
  std::unique_ptr<PickleGraph> graph_;
};

// Encodes a JSON value as a protocol-4 pickle of plain containers that PyTorch's tools, MemoryViz and
// pickle.load read: objects -> dict (EMPTY_DICT + SETITEMS in batches of 1000, like Python),
// arrays -> list, strings and keys -> str (bytes that are not valid UTF-8, which a string built in code
// can hold, written as U+FFFD, as the JSON writer does: the file always reads back), integers -> int with
// Python's opcode choice (BININT1/BININT2/BININT/LONG1), floats -> BINFLOAT, bool, null -> None.
// No MEMOIZE or FRAME (both optional for readers). An array stored under a dict key named in `tuple_keys`
// is written as a tuple, as Python pickles one (EMPTY_TUPLE, TUPLE1/2/3, or MARK ... TUPLE): JSON has no
// tuples, and PyTorch writes some snapshot values (segment_pool_id) as tuples. Throws InputError for binary
// or discarded values and for nesting deeper than kMaxPickleDepth.
std::vector<std::uint8_t> write_pickle(const nlohmann::json& value,
                                       std::span<const std::string_view> tuple_keys = {});

}  // namespace vramsim
