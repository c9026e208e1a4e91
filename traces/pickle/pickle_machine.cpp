// The pickle machine: runs a data-only pickle's opcodes over a graph of shared nodes (a BINGET pushes a node
// id, never a copy), exactly as Python shares one object between memo references, including later mutation of
// a memoised list. What it accepts and rejects is pickle_reader.h's contract.
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "traces/pickle/pickle_graph.h"
#include "traces/utf8.h"

namespace vramsim {
namespace {

using namespace pickle_detail;

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

// The pickle machine's stack of node ids. Pushes are most of the work (a memo reference each), and
// std::vector::push_back was not inlined into the opcode loop: this one is, with growth out of line.
class IdStack {
 public:
  [[gnu::always_inline]] void push_back(std::uint32_t id) {
    if (size_ == data_.size()) [[unlikely]] {
      grow();
    }
    data_[size_++] = id;
  }
  void pop_back() { --size_; }
  std::uint32_t back() const { return data_[size_ - 1]; }
  std::uint32_t operator[](std::size_t i) const { return data_[i]; }
  const std::uint32_t* data() const { return data_.data(); }
  std::size_t size() const { return size_; }
  void resize(std::size_t n) {  // shrinks only: the machine never grows the stack but by pushes
    SIM_ASSERT(n <= size_);
    size_ = n;
  }

 private:
  [[gnu::noinline]] void grow() { data_.resize(std::max<std::size_t>(1024, 2 * data_.size())); }
  std::vector<std::uint32_t> data_;
  std::size_t size_ = 0;
};

class Decoder {
 public:
  Decoder(PickleGraph& graph) : g_(graph), data_(graph.data), skip_(!graph.skip_keys.empty()) {
    // Real snapshots hold about one value per 10 input bytes and one item per 5 (the frame references).
    g_.nodes.reserve(data_.size() / 16 + 16);
    g_.arena.reserve(data_.size() / 8 + 16);
    g_.containers.emplace_back();  // kElidedSlot
  }

  void decode() {
    // Node ids, offsets and string ranges are 32-bit.
    if (data_.size() >= std::numeric_limits<std::uint32_t>::max()) {
      fail(0, "pickle data larger than 4 GiB");
    }
    const std::size_t size = data_.size();
    while (pos_ < size) {
      op_start_ = pos_;
      const std::uint8_t op = data_[pos_++];
      // Memo references are three quarters of a real snapshot's opcodes (its shared stack frames): they take
      // a predictable branch here instead of the switch's indirect jump.
      if (op == static_cast<std::uint8_t>(Op::kBinGet) && pos_ < size) {
        memo_get(data_[pos_++]);
        continue;
      }
      if (op == static_cast<std::uint8_t>(Op::kLongBinGet) && size - pos_ >= 4) {
        memo_get(take_le<4>());
        continue;
      }
      if (static_cast<Op>(op) == Op::kStop) {
        g_.root = pop();
        if (pos_ != data_.size()) {
          fail(pos_, fmt::format("{} bytes of trailing data after STOP", data_.size() - pos_));
        }
        return;
      }
      step(op);
    }
    fail(data_.size(), "data ends without a STOP opcode");
  }

 private:
  [[noreturn]] void fail(std::size_t offset, std::string_view problem) const {
    throw InputError(fmt::format("{}: byte {}: {}", g_.name, offset, problem));
  }
  std::string_view op_name() const { return kOps[data_[op_start_]].name; }

  // ---- argument bytes ----
  [[gnu::always_inline]] const std::uint8_t* take(std::size_t n) {
    if (data_.size() - pos_ < n) {
      fail(data_.size(), fmt::format("data ends inside the {} argument", op_name()));
    }
    const std::uint8_t* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <std::size_t N>
  std::uint64_t take_le() {
    const std::uint8_t* p = take(N);
    std::uint64_t value = 0;
    for (std::size_t i = N; i-- > 0;) {
      value = (value << 8) | p[i];
    }
    return value;
  }
  std::uint64_t take_arg() {
    switch (kOps[data_[op_start_]].width) {
      case 1:
        return take_le<1>();
      case 2:
        return take_le<2>();
      case 4:
        return take_le<4>();
      default:
        return take_le<8>();
    }
  }
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
  [[gnu::always_inline]] void push(std::uint32_t id) { stack_.push_back(id); }
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
  [[gnu::always_inline]] std::uint32_t add_node(Kind kind) {
    Node node;
    node.kind = kind;
    node.offset = static_cast<std::uint32_t>(op_start_);
    g_.nodes.push_back(node);
    return static_cast<std::uint32_t>(g_.nodes.size() - 1);
  }
  [[gnu::always_inline]] Node& push_new(Kind kind) {
    push(add_node(kind));
    return g_.nodes.back();
  }
  void push_uint(std::uint64_t value) { push_new(Kind::kUint).v.u = value; }
  void push_int(std::int64_t value) {
    if (value >= 0) {
      push_uint(static_cast<std::uint64_t>(value));
    } else {
      push_new(Kind::kInt).v.i = value;
    }
  }
  // Creates a container holding stack_[from ..] and replaces those values with it. One made where a skipped
  // key's value is being built (the key right under it) keeps no items.
  void push_container(Kind kind, std::size_t from) {
    const std::uint32_t id = add_node(kind);
    const bool elided = from > fence() && g_.nodes[stack_[from - 1]].skip_key;
    g_.nodes[id].elided = elided;
    if (elided) {
      g_.nodes[id].v.items = kElidedSlot;
    } else {
      g_.nodes[id].v.items = static_cast<std::uint32_t>(g_.containers.size());
      g_.containers.emplace_back();
    }
    const std::size_t n = stack_.size() - from;
    if (kind == Kind::kDict) {
      check_pairs(from);
    }
    append(id, stack_.data() + from, n);
    stack_.resize(from);
    push(id);
  }
  // Appends `n` items to container `id`, growing its arena region (in place when it is the last one,
  // else moved to the end with room to double).
  void append(std::uint32_t id, const std::uint32_t* first, std::size_t n) {
    const Node& node = g_.nodes[id];
    if (node.elided || n == 0) {
      return;
    }
    Items& c = g_.containers[node.v.items];
    const std::uint64_t need = c.size + n;
    if (need > c.capacity) {
      const std::uint64_t capacity = std::max(need, 2 * c.capacity);
      if (c.begin + c.capacity == g_.arena.size()) {
        g_.arena.resize(c.begin + capacity);
      } else {
        const std::uint64_t begin = g_.arena.size();
        g_.arena.resize(begin + capacity);
        std::copy_n(g_.arena.begin() + static_cast<std::ptrdiff_t>(c.begin), c.size,
                    g_.arena.begin() + static_cast<std::ptrdiff_t>(begin));
        c.begin = begin;
      }
      c.capacity = capacity;
    }
    std::copy_n(first, n, g_.arena.begin() + static_cast<std::ptrdiff_t>(c.begin + c.size));
    c.size = need;
  }
  // The container at stack_[pos] that APPEND/SETITEM/... extends, which must be of the expected kind.
  std::uint32_t container_at(std::size_t pos, Kind kind) const {
    const Node& node = g_.nodes[stack_[pos]];
    if (node.kind != kind) {
      fail(op_start_,
           fmt::format("{} onto a {}, not a {}", op_name(), kind_name(node.kind), kind_name(kind)));
    }
    return stack_[pos];
  }
  // stack_[from ..] must be key/value pairs with str or int keys.
  void check_pairs(std::size_t from) const {
    if ((stack_.size() - from) % 2 != 0) {
      fail(op_start_, fmt::format("odd number of items ({}) for {}", stack_.size() - from, op_name()));
    }
    for (std::size_t i = from; i < stack_.size(); i += 2) {
      const Kind key = g_.nodes[stack_[i]].kind;
      if (key != Kind::kStr && key != Kind::kInt && key != Kind::kUint) {
        fail(op_start_, fmt::format("dict key must be str or int, not {}", kind_name(key)));
      }
    }
  }
  // Moves stack_[from ..] into container `id` (of kind `kind`, checked).
  void extend(std::uint32_t id, std::size_t from) {
    if (g_.nodes[id].kind == Kind::kDict) {
      check_pairs(from);
    }
    append(id, stack_.data() + from, stack_.size() - from);
    stack_.resize(from);
  }
  void push_str(std::size_t size) {
    const std::uint8_t* p = take_declared(size);
    if (!is_valid_utf8(p, size)) {
      fail(op_start_, fmt::format("{} is not valid UTF-8", op_name()));
    }
    Node& node = push_new(Kind::kStr);
    node.v.str.begin = static_cast<std::uint32_t>(p - data_.data());
    node.v.str.size = static_cast<std::uint32_t>(size);
    node.skip_key = skip_ && g_.is_skip_key(g_.str(node));
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
  void push_float(double value) { push_new(Kind::kFloat).v.f = value; }

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
  [[gnu::always_inline]] void memo_get(std::uint64_t index) {
    if (index < memo_dense_.size() && memo_dense_[index] != kNoNode) [[likely]] {
      push(memo_dense_[index]);
      return;
    }
    memo_get_slow(index);
  }
  void memo_get_slow(std::uint64_t index) {
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

  PickleGraph& g_;
  std::span<const std::uint8_t> data_;
  bool skip_;
  std::size_t pos_ = 0;
  std::size_t op_start_ = 0;
  IdStack stack_;
  std::vector<std::size_t> marks_;
  PickleGraph::Table<std::uint32_t> memo_dense_;
  std::unordered_map<std::uint64_t, std::uint32_t> memo_sparse_;
  std::uint64_t memo_count_ = 0;  // len(memo), the slot MEMOIZE writes
};

void Decoder::step(std::uint8_t op_byte) {
  const auto op = static_cast<Op>(op_byte);
  switch (op) {
    case Op::kBinGet:  // the frame references: most opcodes of a real snapshot
      memo_get(take_le<1>());
      return;
    case Op::kLongBinGet:
      memo_get(take_le<4>());
      return;
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
      push_new(Kind::kBool).v.b = op == Op::kNewTrue;
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
        push_new(Kind::kBool).v.b = text == "01";
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
    case Op::kBinFloat: {  // the one big-endian argument
      const std::uint8_t* p = take(8);
      std::uint64_t bits = 0;
      for (std::size_t i = 0; i < 8; ++i) {
        bits = (bits << 8) | p[i];
      }
      push_float(std::bit_cast<double>(bits));
      return;
    }
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
    case Op::kDict:
      push_container(op == Op::kList    ? Kind::kList
                     : op == Op::kTuple ? Kind::kTuple
                     : op == Op::kDict  ? Kind::kDict
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
    case Op::kAppend: {
      top();  // the value and the list must both be inside the innermost MARK
      if (stack_.size() - fence() < 2) {
        fail(op_start_, "stack underflow in APPEND");
      }
      extend(container_at(stack_.size() - 2, Kind::kList), stack_.size() - 1);
      return;
    }
    case Op::kAppends:
    case Op::kAddItems: {
      const std::size_t mark = pop_mark();
      if (mark <= fence()) {  // the container must sit just below the MARK, inside the enclosing one
        fail(op_start_, fmt::format("stack underflow in {}", op_name()));
      }
      extend(container_at(mark - 1, op == Op::kAppends ? Kind::kList : Kind::kSet), mark);
      return;
    }
    case Op::kSetItem:
      if (stack_.size() - fence() < 3) {
        fail(op_start_, "stack underflow in SETITEM");
      }
      extend(container_at(stack_.size() - 3, Kind::kDict), stack_.size() - 2);
      return;
    case Op::kSetItems: {
      const std::size_t mark = pop_mark();
      if (mark <= fence()) {
        fail(op_start_, "stack underflow in SETITEMS");
      }
      extend(container_at(mark - 1, Kind::kDict), mark);
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

}  // namespace

void run_pickle_machine(PickleGraph& g) { Decoder(g).decode(); }

}  // namespace vramsim
