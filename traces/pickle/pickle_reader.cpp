// Data-only pickle decoder. Two passes, so that memo sharing can never blow up time or memory:
//   1. Run the pickle machine over a graph of shared nodes (a BINGET pushes a node id, never a copy), exactly
//      as Python shares one object between memo references, including later mutation of a memoised list.
//   2. Check the graph reachable from the result (cycles, nesting depth, size of the expanded tree) in one
//      memoised DFS, and only then expand it into nlohmann::json, whose size is now known to be bounded.
#include "traces/pickle/pickle_reader.h"
#include <algorithm>

#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "traces/utf8.h"

namespace vramsim {
namespace {

// Opcode bytes, named as in Python's pickletools.
// clang-format off
enum class Op : std::uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I', kBinInt = 'J',
  kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P', kBinPersId = 'Q', kReduce = 'R',
  kString = 'S', kBinString = 'T', kShortBinString = 'U', kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a',
  kBuild = 'b', kGlobal = 'c', kDict = 'd', kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h',
  kInst = 'i', kLongBinGet = 'j', kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q',
  kLongBinPut = 'r', kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kBinBytes = 'B', kShortBinBytes = 'C', kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83,
  kExt4 = 0x84, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89,
  kLong1 = 0x8a, kLong4 = 0x8b, kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e,
  kEmptySet = 0x8f, kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93,
  kMemoize = 0x94, kFrame = 0x95, kByteArray8 = 0x96, kNextBuffer = 0x97, kReadonlyBuffer = 0x98,
};
// clang-format on

// kCode opcodes would import, call or construct something; kBytes and kTextString are data but outside the
// subset (JSON has no bytes type; Python 2 / text-mode strings need escape decoding nobody here needs).
enum class OpClass : std::uint8_t { kUnknown, kData, kCode, kBytes, kTextString };

struct OpInfo {
  std::string_view name;
  OpClass cls = OpClass::kUnknown;
  std::uint8_t width = 0;  // bytes of its fixed little-endian argument (an int, memo index or length)
};

constexpr std::array<OpInfo, 256> make_op_table() {
  std::array<OpInfo, 256> table{};
  const auto set = [&table](Op op, std::string_view name, OpClass cls, std::uint8_t width = 0) {
    table[static_cast<std::uint8_t>(op)] = {name, cls, width};
  };
  constexpr OpClass kD = OpClass::kData;
  constexpr OpClass kC = OpClass::kCode;
  set(Op::kMark, "MARK", kD), set(Op::kStop, "STOP", kD), set(Op::kPop, "POP", kD);
  set(Op::kPopMark, "POP_MARK", kD), set(Op::kDup, "DUP", kD), set(Op::kFloat, "FLOAT", kD);
  set(Op::kInt, "INT", kD), set(Op::kBinInt, "BININT", kD, 4), set(Op::kBinInt1, "BININT1", kD, 1);
  set(Op::kLong, "LONG", kD), set(Op::kBinInt2, "BININT2", kD, 2), set(Op::kNone, "NONE", kD);
  set(Op::kBinUnicode, "BINUNICODE", kD, 4), set(Op::kAppend, "APPEND", kD), set(Op::kDict, "DICT", kD);
  set(Op::kEmptyDict, "EMPTY_DICT", kD), set(Op::kAppends, "APPENDS", kD), set(Op::kGet, "GET", kD);
  set(Op::kBinGet, "BINGET", kD, 1), set(Op::kLongBinGet, "LONG_BINGET", kD, 4), set(Op::kList, "LIST", kD);
  set(Op::kEmptyList, "EMPTY_LIST", kD), set(Op::kPut, "PUT", kD), set(Op::kBinPut, "BINPUT", kD, 1);
  set(Op::kLongBinPut, "LONG_BINPUT", kD, 4), set(Op::kSetItem, "SETITEM", kD), set(Op::kTuple, "TUPLE", kD);
  set(Op::kEmptyTuple, "EMPTY_TUPLE", kD), set(Op::kSetItems, "SETITEMS", kD);
  set(Op::kBinFloat, "BINFLOAT", kD), set(Op::kProto, "PROTO", kD, 1), set(Op::kTuple1, "TUPLE1", kD);
  set(Op::kTuple2, "TUPLE2", kD), set(Op::kTuple3, "TUPLE3", kD), set(Op::kNewTrue, "NEWTRUE", kD);
  set(Op::kNewFalse, "NEWFALSE", kD), set(Op::kLong1, "LONG1", kD, 1), set(Op::kLong4, "LONG4", kD, 4);
  set(Op::kShortBinUnicode, "SHORT_BINUNICODE", kD, 1), set(Op::kBinUnicode8, "BINUNICODE8", kD, 8);
  set(Op::kEmptySet, "EMPTY_SET", kD), set(Op::kAddItems, "ADDITEMS", kD);
  set(Op::kFrozenSet, "FROZENSET", kD), set(Op::kMemoize, "MEMOIZE", kD), set(Op::kFrame, "FRAME", kD, 8);
  set(Op::kPersId, "PERSID", kC), set(Op::kBinPersId, "BINPERSID", kC), set(Op::kReduce, "REDUCE", kC);
  set(Op::kBuild, "BUILD", kC), set(Op::kGlobal, "GLOBAL", kC), set(Op::kInst, "INST", kC);
  set(Op::kObj, "OBJ", kC), set(Op::kNewObj, "NEWOBJ", kC), set(Op::kExt1, "EXT1", kC);
  set(Op::kExt2, "EXT2", kC), set(Op::kExt4, "EXT4", kC), set(Op::kNewObjEx, "NEWOBJ_EX", kC);
  set(Op::kStackGlobal, "STACK_GLOBAL", kC), set(Op::kNextBuffer, "NEXT_BUFFER", kC);
  set(Op::kReadonlyBuffer, "READONLY_BUFFER", kC);
  set(Op::kBinBytes, "BINBYTES", OpClass::kBytes), set(Op::kShortBinBytes, "SHORT_BINBYTES", OpClass::kBytes);
  set(Op::kBinBytes8, "BINBYTES8", OpClass::kBytes), set(Op::kByteArray8, "BYTEARRAY8", OpClass::kBytes);
  set(Op::kString, "STRING", OpClass::kTextString), set(Op::kBinString, "BINSTRING", OpClass::kTextString);
  set(Op::kShortBinString, "SHORT_BINSTRING", OpClass::kTextString);
  set(Op::kUnicode, "UNICODE", OpClass::kTextString);
  return table;
}

constexpr std::array<OpInfo, 256> kOps = make_op_table();
constexpr int kHighestProtocol = 5;
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

// "0x63 ('c' GLOBAL)", "0x93 (STACK_GLOBAL)", "0x7a ('z')", "0xff".
std::string describe_op(std::uint8_t op) {
  const std::string_view name = kOps[op].name;
  const bool printable = op > 0x20 && op < 0x7f && op != '\'';
  if (printable) {
    return name.empty() ? fmt::format("0x{:02x} ('{}')", op, static_cast<char>(op))
                        : fmt::format("0x{:02x} ('{}' {})", op, static_cast<char>(op), name);
  }
  return name.empty() ? fmt::format("0x{:02x}", op) : fmt::format("0x{:02x} ({})", op, name);
}

enum class Kind { kNone, kBool, kInt, kUint, kFloat, kStr, kList, kTuple, kDict, kSet, kFrozenSet };

std::string_view kind_name(Kind kind) {
  constexpr std::array<std::string_view, 11> kNames = {"None", "bool",  "int",  "int", "float",    "str",
                                                       "list", "tuple", "dict", "set", "frozenset"};
  return kNames[static_cast<std::size_t>(kind)];
}

bool is_container(Kind kind) { return kind >= Kind::kList; }

// One Python object. Containers own a slot in Decoder::items_ (dicts store key, value, key, value, ...), so
// that every reference to them - memo, DUP, membership in other containers - shares and sees mutations.
struct Node {
  Kind kind = Kind::kNone;
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
    std::uint32_t items;  // containers: index into items_
  } v{};
};

class Decoder {
 public:
  Decoder(std::span<const std::uint8_t> data, std::string_view name,
          std::span<const std::string_view> skip_keys)
      : data_(data), name_(name), skip_keys_(skip_keys) {}

  nlohmann::json decode() {
    // Node ids, offsets and string ranges are 32-bit.
    if (data_.size() >= std::numeric_limits<std::uint32_t>::max()) {
      fail(0, "pickle data larger than 4 GiB");
    }
    while (pos_ < data_.size()) {
      op_start_ = pos_;
      const std::uint8_t op = data_[pos_++];
      if (static_cast<Op>(op) == Op::kStop) {
        const std::uint32_t result = pop();
        if (pos_ != data_.size()) {
          fail(pos_, fmt::format("{} bytes of trailing data after STOP", data_.size() - pos_));
        }
        check_expansion(result);
        return to_json(result);
      }
      step(op);
    }
    fail(data_.size(), "data ends without a STOP opcode");
  }

 private:
  static constexpr std::uint32_t kNoNode = std::numeric_limits<std::uint32_t>::max();

  [[noreturn]] void fail(std::size_t offset, std::string_view problem) const {
    throw InputError(fmt::format("{}: byte {}: {}", name_, offset, problem));
  }
  std::string_view op_name() const { return kOps[data_[op_start_]].name; }

  // ---- argument bytes ----
  const std::uint8_t* take(std::size_t n) {
    if (data_.size() - pos_ < n) {
      fail(data_.size(), fmt::format("data ends inside the {} argument", op_name()));
    }
    const std::uint8_t* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::uint64_t take_le(std::size_t n, bool big_endian = false) {  // BINFLOAT is the one big-endian case
    const std::uint8_t* p = take(n);
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < n; ++i) {
      value = (value << 8) | p[big_endian ? i : n - 1 - i];
    }
    return value;
  }
  std::uint64_t take_arg() { return take_le(kOps[data_[op_start_]].width); }
  // A declared length is checked against what remains before anything is read or allocated for it.
  const std::uint8_t* take_declared(std::uint64_t n) {
    const std::size_t remaining = data_.size() - pos_;
    if (n > remaining) {
      fail(op_start_, fmt::format("{} declares {} bytes but only {} remain", op_name(), n, remaining));
    }
    return take(n);
  }
  // Text-mode argument: the bytes up to the next '\n', which is consumed but not returned.
  std::string_view take_line() {
    const void* nl = std::memchr(data_.data() + pos_, '\n', data_.size() - pos_);
    if (nl == nullptr) {
      fail(data_.size(), fmt::format("data ends inside the {} argument (no newline)", op_name()));
    }
    const auto* begin = reinterpret_cast<const char*>(data_.data() + pos_);
    const auto len = static_cast<std::size_t>(static_cast<const std::uint8_t*>(nl) - (data_.data() + pos_));
    pos_ += len + 1;
    return {begin, len};
  }
  // Decimal only: Python would also take "0x10" here, but no pickler writes that.
  std::uint64_t parse_unsigned(std::string_view text) const {
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec == std::errc::result_out_of_range) {
      fail(op_start_, fmt::format("{} argument is not a 64-bit decimal integer", op_name()));
    }
    if (ec != std::errc() || end != text.data() + text.size()) {
      fail(op_start_, fmt::format("malformed {} argument", op_name()));
    }
    return value;
  }

  // ---- the stack: values above the innermost MARK are all an opcode may touch ----
  std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(std::uint32_t id) { stack_.push_back(id); }
  std::uint32_t top() const {
    if (stack_.size() <= fence()) {
      fail(op_start_, fmt::format("stack underflow in {}", op_name()));
    }
    return stack_.back();
  }
  std::uint32_t pop() {
    const std::uint32_t id = top();
    stack_.pop_back();
    return id;
  }
  // Removes the innermost MARK; the values above it are stack_[returned position ..].
  std::size_t pop_mark() {
    if (marks_.empty()) {
      fail(op_start_, fmt::format("{} without a matching MARK", op_name()));
    }
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }

  // ---- nodes ----
  std::uint32_t add_node(Kind kind) {
    Node node;
    node.kind = kind;
    node.offset = static_cast<std::uint32_t>(op_start_);
    nodes_.push_back(node);
    return static_cast<std::uint32_t>(nodes_.size() - 1);
  }
  void push_uint(std::uint64_t value) { nodes_[push_new(Kind::kUint)].v.u = value; }
  void push_int(std::int64_t value) {
    if (value >= 0) {
      push_uint(static_cast<std::uint64_t>(value));
    } else {
      nodes_[push_new(Kind::kInt)].v.i = value;
    }
  }
  std::uint32_t push_new(Kind kind) {
    const std::uint32_t id = add_node(kind);
    push(id);
    return id;
  }
  // Creates a container holding stack_[from ..] and replaces those values with it.
  void push_container(Kind kind, std::size_t from) {
    const std::uint32_t id = new_container(kind);
    items_.back().assign(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    push(id);
  }
  std::uint32_t new_container(Kind kind) {
    const std::uint32_t id = add_node(kind);
    nodes_[id].v.items = static_cast<std::uint32_t>(items_.size());
    items_.emplace_back();
    return id;
  }
  // The container at stack_[pos] that APPEND/SETITEM/... extends, which must be of the expected kind.
  std::vector<std::uint32_t>& container_at(std::size_t pos, Kind kind) {
    const Node& node = nodes_[stack_[pos]];
    if (node.kind != kind) {
      fail(op_start_,
           fmt::format("{} onto a {}, not a {}", op_name(), kind_name(node.kind), kind_name(kind)));
    }
    return items_[node.v.items];
  }
  // Appends stack_[from ..] as key/value pairs to `dict` and removes them from the stack.
  void add_pairs(std::vector<std::uint32_t>& dict, std::size_t from) {
    if ((stack_.size() - from) % 2 != 0) {
      fail(op_start_, fmt::format("odd number of items ({}) for {}", stack_.size() - from, op_name()));
    }
    for (std::size_t i = from; i < stack_.size(); i += 2) {
      const Kind key = nodes_[stack_[i]].kind;
      if (key != Kind::kStr && key != Kind::kInt && key != Kind::kUint) {
        fail(op_start_, fmt::format("dict key must be str or int, not {}", kind_name(key)));
      }
    }
    dict.insert(dict.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
  }
  void push_str(std::size_t size) {
    const std::uint8_t* p = take_declared(size);
    if (!is_valid_utf8(p, size)) {
      fail(op_start_, fmt::format("{} is not valid UTF-8", op_name()));
    }
    Node& node = nodes_[push_new(Kind::kStr)];
    node.v.str.begin = static_cast<std::uint32_t>(p - data_.data());
    node.v.str.size = static_cast<std::uint32_t>(size);
  }
  // LONG1/LONG4 payload: little-endian two's complement, any length, must fit int64 or uint64.
  void push_long(std::size_t n) {
    const std::uint8_t* p = take_declared(n);
    const bool negative = n > 0 && (p[n - 1] & 0x80) != 0;
    const std::uint8_t extension = negative ? 0xff : 0x00;
    bool fits = negative ? (n < 8 || (p[7] & 0x80) != 0) : true;
    for (std::size_t i = 8; i < n && fits; ++i) {
      fits = p[i] == extension;
    }
    if (!fits) {
      fail(op_start_, fmt::format("{} integer does not fit in 64 bits", op_name()));
    }
    const std::size_t low_bytes = std::min<std::size_t>(n, 8);
    std::uint64_t value = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t i = low_bytes; i-- > 0;) {
      value = (value << 8) | p[i];
    }
    if (negative) {
      push_int(std::bit_cast<std::int64_t>(value));
    } else {
      push_uint(value);
    }
  }
  // INT / LONG text argument, already stripped of the newline (and LONG's 'L').
  void push_decimal(std::string_view text) {
    const bool negative = !text.empty() && text.front() == '-';
    if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
      text.remove_prefix(1);
    }
    const std::uint64_t magnitude = parse_unsigned(text);
    if (!negative || magnitude == 0) {
      push_uint(magnitude);
    } else if (magnitude <= (std::uint64_t{1} << 63)) {
      push_int(std::bit_cast<std::int64_t>(std::uint64_t{0} - magnitude));
    } else {
      fail(op_start_, fmt::format("{} integer does not fit in 64 bits", op_name()));
    }
  }
  void push_float(double value) { nodes_[push_new(Kind::kFloat)].v.f = value; }

  // ---- memo: a dense table for the sequential indices picklers write, a map for anything else ----
  void memo_put(std::uint64_t index) {
    const std::uint32_t id = top();
    if (index < data_.size() + 256) {
      if (index >= memo_dense_.size()) {
        memo_dense_.resize(std::min<std::uint64_t>(std::max<std::uint64_t>(index + 1, memo_dense_.size() * 2),
                                                   data_.size() + 256),
                           kNoNode);
      }
      memo_count_ += memo_dense_[index] == kNoNode ? 1 : 0;
      memo_dense_[index] = id;
    } else {
      memo_count_ += memo_sparse_.insert_or_assign(index, id).second ? 1 : 0;
    }
  }
  void memo_get(std::uint64_t index) {
    std::uint32_t id = kNoNode;
    if (index < memo_dense_.size()) {
      id = memo_dense_[index];
    } else if (const auto it = memo_sparse_.find(index); it != memo_sparse_.end()) {
      id = it->second;
    }
    if (id == kNoNode) {
      fail(op_start_, fmt::format("{} of memo slot {}, which was never set", op_name(), index));
    }
    push(id);
  }

  void step(std::uint8_t op_byte);
  void check_expansion(std::uint32_t root);
  void visit(std::uint32_t id, int depth);
  std::uint64_t scalar_cost(std::uint32_t id) const;
  bool is_skipped_key(std::uint32_t id) const;
  nlohmann::json to_json(std::uint32_t id) const;
  std::string key_text(std::uint32_t id) const;

  std::span<const std::uint8_t> data_;
  std::string_view name_;
  std::span<const std::string_view> skip_keys_;  // dict values under these keys decode to []
  std::size_t pos_ = 0;
  std::size_t op_start_ = 0;
  std::vector<Node> nodes_;
  std::vector<std::vector<std::uint32_t>> items_;
  std::vector<std::uint32_t> stack_;
  std::vector<std::size_t> marks_;
  std::vector<std::uint32_t> memo_dense_;
  std::unordered_map<std::uint64_t, std::uint32_t> memo_sparse_;
  std::uint64_t memo_count_ = 0;  // len(memo), the slot MEMOIZE writes
  // Per container (indexed like items_), filled by check_expansion.
  enum class Visit : std::uint8_t { kNew, kOnPath, kDone };
  std::vector<Visit> visit_;
  std::vector<std::uint16_t> height_;  // containers on the longest downward path, itself included
  std::vector<std::uint64_t>
      expansion_;  // output bytes its expansion costs, itself included (see kOutputBytes*)
  std::uint64_t budget_ = 0;
};

void Decoder::step(std::uint8_t op_byte) {
  const auto op = static_cast<Op>(op_byte);
  switch (op) {
    case Op::kProto:
      if (const std::uint64_t version = take_arg(); version > kHighestProtocol) {
        fail(op_start_, fmt::format("unsupported pickle protocol {}", version));
      }
      return;
    case Op::kFrame:  // framing is only a read-ahead hint; the frame must still lie inside the data
      take_declared(take_arg());
      pos_ = op_start_ + 9;
      return;
    case Op::kMark:
      marks_.push_back(stack_.size());
      return;
    case Op::kPop:  // as in CPython: with nothing above the innermost MARK, POP discards the MARK
      if (stack_.size() > fence()) {
        stack_.pop_back();
      } else if (!marks_.empty()) {
        marks_.pop_back();
      } else {
        fail(op_start_, "stack underflow in POP");
      }
      return;
    case Op::kPopMark:
      stack_.resize(pop_mark());
      return;
    case Op::kDup:
      push(top());
      return;
    case Op::kNone:
      push_new(Kind::kNone);
      return;
    case Op::kNewTrue:
    case Op::kNewFalse:
      nodes_[push_new(Kind::kBool)].v.b = op == Op::kNewTrue;
      return;
    case Op::kBinInt1:
    case Op::kBinInt2:
      push_uint(take_arg());
      return;
    case Op::kBinInt:
      push_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(take_arg())));
      return;
    case Op::kLong1:
      push_long(take_arg());
      return;
    case Op::kLong4: {
      const auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(take_arg()));
      if (n < 0) {
        fail(op_start_, "LONG4 has a negative byte count");
      }
      push_long(static_cast<std::size_t>(n));
      return;
    }
    case Op::kInt: {
      const std::string_view text = take_line();
      if (text == "00" || text == "01") {  // protocol 0 writes bools as INT 00 / 01
        nodes_[push_new(Kind::kBool)].v.b = text == "01";
      } else {
        push_decimal(text);
      }
      return;
    }
    case Op::kLong: {
      std::string_view text = take_line();
      if (!text.empty() && text.back() == 'L') {
        text.remove_suffix(1);
      }
      push_decimal(text);
      return;
    }
    case Op::kBinFloat:
      push_float(std::bit_cast<double>(take_le(8, true)));
      return;
    case Op::kFloat: {
      const std::string_view text = take_line();
      double value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        fail(op_start_, "malformed FLOAT argument");
      }
      push_float(value);
      return;
    }
    case Op::kShortBinUnicode:
    case Op::kBinUnicode:
    case Op::kBinUnicode8:
      push_str(take_arg());
      return;
    case Op::kEmptyList:
    case Op::kEmptyTuple:
    case Op::kEmptyDict:
    case Op::kEmptySet:
      push_container(op == Op::kEmptyList    ? Kind::kList
                     : op == Op::kEmptyTuple ? Kind::kTuple
                     : op == Op::kEmptyDict  ? Kind::kDict
                                             : Kind::kSet,
                     stack_.size());
      return;
    case Op::kList:
    case Op::kTuple:
    case Op::kFrozenSet:
      push_container(op == Op::kList    ? Kind::kList
                     : op == Op::kTuple ? Kind::kTuple
                                        : Kind::kFrozenSet,
                     pop_mark());
      return;
    case Op::kTuple1:
    case Op::kTuple2:
    case Op::kTuple3: {
      const std::size_t n = op_byte - static_cast<std::uint8_t>(Op::kTuple1) + 1;
      if (stack_.size() - fence() < n) {
        fail(op_start_, fmt::format("stack underflow in {}", op_name()));
      }
      push_container(Kind::kTuple, stack_.size() - n);
      return;
    }
    case Op::kDict: {
      const std::size_t mark = pop_mark();
      const std::uint32_t dict = new_container(Kind::kDict);
      add_pairs(items_.back(), mark);
      push(dict);
      return;
    }
    case Op::kAppend: {
      const std::uint32_t value = pop();
      top();  // the list must be inside the innermost MARK too
      container_at(stack_.size() - 1, Kind::kList).push_back(value);
      return;
    }
    case Op::kAppends:
    case Op::kAddItems: {
      const std::size_t mark = pop_mark();
      if (mark <= fence()) {  // the container must sit just below the MARK, inside the enclosing one
        fail(op_start_, fmt::format("stack underflow in {}", op_name()));
      }
      auto& items = container_at(mark - 1, op == Op::kAppends ? Kind::kList : Kind::kSet);
      items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
      stack_.resize(mark);
      return;
    }
    case Op::kSetItem:
      if (stack_.size() - fence() < 3) {
        fail(op_start_, "stack underflow in SETITEM");
      }
      add_pairs(container_at(stack_.size() - 3, Kind::kDict), stack_.size() - 2);
      return;
    case Op::kSetItems: {
      const std::size_t mark = pop_mark();
      if (mark <= fence()) {
        fail(op_start_, "stack underflow in SETITEMS");
      }
      add_pairs(container_at(mark - 1, Kind::kDict), mark);
      return;
    }
    case Op::kBinPut:
    case Op::kLongBinPut:
      memo_put(take_arg());
      return;
    case Op::kPut:
      memo_put(parse_unsigned(take_line()));
      return;
    case Op::kMemoize:
      memo_put(memo_count_);
      return;
    case Op::kBinGet:
    case Op::kLongBinGet:
      memo_get(take_arg());
      return;
    case Op::kGet:
      memo_get(parse_unsigned(take_line()));
      return;
    default:
      break;
  }
  const OpClass cls = kOps[op_byte].cls;
  fail(op_start_, fmt::format("unsupported pickle opcode {}: vramsim reads {}", describe_op(op_byte),
                              cls == OpClass::kBytes        ? "str values, not bytes"
                              : cls == OpClass::kTextString ? "only the binary str opcodes of protocols 1-5"
                                                            : "data only"));
}

void Decoder::check_expansion(std::uint32_t root) {
  if (!is_container(nodes_[root].kind)) {
    return;  // a lone scalar or str costs no more than the input holds
  }
  budget_ = kOutputBytesPerInputByte * data_.size() + kOutputBytesBase;
  visit_.assign(items_.size(), Visit::kNew);
  height_.assign(items_.size(), 0);
  expansion_.assign(items_.size(), 0);
  visit(root, 1);
}

// What a scalar or str costs in the output: one value, plus a str's bytes (an int key's digits fit the
// value's share).
std::uint64_t Decoder::scalar_cost(std::uint32_t id) const {
  const Node& node = nodes_[id];
  return kOutputBytesPerValue + (node.kind == Kind::kStr ? node.v.str.size : 0);
}

// Memoised DFS: each container is expanded once, so this is linear in the graph even when its tree is
// exponential. Recursion depth stays <= kMaxPickleDepth + 1 because deeper paths fail first. A value under
// a skipped dict key is still checked (cycles, depth) but costs only the empty array that replaces it.
void Decoder::visit(std::uint32_t id, int depth) {
  const Node& node = nodes_[id];
  if (depth > kMaxPickleDepth) {
    fail(node.offset, fmt::format("containers nest deeper than {} levels", kMaxPickleDepth));
  }
  const std::uint32_t slot = node.v.items;
  visit_[slot] = Visit::kOnPath;
  const bool dict = node.kind == Kind::kDict;
  const std::vector<std::uint32_t>& items = items_[slot];
  std::uint64_t expansion = kOutputBytesPerValue;
  int height = 1;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::uint32_t child_id = items[i];
    const Node& child = nodes_[child_id];
    const bool skipped = dict && i % 2 == 1 && is_skipped_key(items[i - 1]);
    if (is_container(child.kind)) {
      const std::uint32_t child_slot = child.v.items;
      if (visit_[child_slot] == Visit::kOnPath) {
        fail(child.offset,
             fmt::format("this {} contains itself, which JSON cannot represent", kind_name(child.kind)));
      }
      if (visit_[child_slot] == Visit::kNew) {
        visit(child_id, depth + 1);
      } else if (depth + height_[child_slot] > kMaxPickleDepth) {
        fail(child.offset, fmt::format("containers nest deeper than {} levels", kMaxPickleDepth));
      }
      height = std::max(height, height_[child_slot] + 1);
      expansion += skipped ? kOutputBytesPerValue : expansion_[child_slot];
    } else {
      expansion += skipped ? kOutputBytesPerValue : scalar_cost(child_id);
    }
    // Checked per child, each child costing <= budget (or < 4 GiB for a str): no overflow.
    if (expansion > budget_) {
      fail(node.offset,
           fmt::format("output would exceed {} bytes: memo references copy the values they share", budget_));
    }
  }
  visit_[slot] = Visit::kDone;
  height_[slot] = static_cast<std::uint16_t>(height);
  expansion_[slot] = expansion;
}

bool Decoder::is_skipped_key(std::uint32_t id) const {
  if (skip_keys_.empty()) {
    return false;
  }
  const Node& node = nodes_[id];
  if (node.kind != Kind::kStr) {
    return std::find(skip_keys_.begin(), skip_keys_.end(), key_text(id)) != skip_keys_.end();
  }
  const std::string_view key(reinterpret_cast<const char*>(data_.data()) + node.v.str.begin, node.v.str.size);
  return std::find(skip_keys_.begin(), skip_keys_.end(), key) != skip_keys_.end();
}

std::string Decoder::key_text(std::uint32_t id) const {
  const Node& node = nodes_[id];
  switch (node.kind) {
    case Kind::kStr:
      return {reinterpret_cast<const char*>(data_.data()) + node.v.str.begin, node.v.str.size};
    case Kind::kInt:
      return std::to_string(node.v.i);
    default:
      return std::to_string(node.v.u);
  }
}

nlohmann::json Decoder::to_json(std::uint32_t id) const {
  const Node& node = nodes_[id];
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
      return key_text(id);
    case Kind::kDict: {
      nlohmann::json object = nlohmann::json::object();
      auto& fields = object.get_ref<nlohmann::json::object_t&>();
      const std::vector<std::uint32_t>& items = items_[node.v.items];
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        // later duplicates win, as in Python
        fields.insert_or_assign(key_text(items[i]),
                                is_skipped_key(items[i]) ? nlohmann::json::array() : to_json(items[i + 1]));
      }
      return object;
    }
    default: {
      nlohmann::json array = nlohmann::json::array();
      auto& values = array.get_ref<nlohmann::json::array_t&>();
      const std::vector<std::uint32_t>& items = items_[node.v.items];
      values.reserve(items.size());
      for (const std::uint32_t item : items) {
        values.push_back(to_json(item));
      }
      return array;
    }
  }
}

}  // namespace

nlohmann::json read_pickle(std::span<const std::uint8_t> data, std::string_view name,
                           std::span<const std::string_view> skip_keys) {
  return Decoder(data, name, skip_keys).decode();
}

}  // namespace vramsim
