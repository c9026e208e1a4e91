// write_pickle: the same opcodes Python's pickler emits at protocol 4 for plain containers, minus MEMOIZE and
// FRAME (both optional for readers), so pickle.load and read_pickle read it back to the same value.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/utf8.h"

namespace vramsim {
namespace {

constexpr std::uint8_t kProto = 0x80;
constexpr std::uint8_t kStop = '.';
constexpr std::uint8_t kMark = '(';
constexpr std::uint8_t kNone = 'N';
constexpr std::uint8_t kNewTrue = 0x88;
constexpr std::uint8_t kNewFalse = 0x89;
constexpr std::uint8_t kBinInt = 'J';
constexpr std::uint8_t kBinInt1 = 'K';
constexpr std::uint8_t kBinInt2 = 'M';
constexpr std::uint8_t kLong1 = 0x8a;
constexpr std::uint8_t kBinFloat = 'G';
constexpr std::uint8_t kShortBinUnicode = 0x8c;
constexpr std::uint8_t kBinUnicode = 'X';
constexpr std::uint8_t kBinUnicode8 = 0x8d;
constexpr std::uint8_t kEmptyList = ']';
constexpr std::uint8_t kAppend = 'a';
constexpr std::uint8_t kAppends = 'e';
constexpr std::uint8_t kEmptyDict = '}';
constexpr std::uint8_t kSetItem = 's';
constexpr std::uint8_t kSetItems = 'u';
constexpr std::uint8_t kEmptyTuple = ')';
constexpr std::uint8_t kTuple = 't';
constexpr std::uint8_t kTuple1 = 0x85;    // TUPLE2 and TUPLE3 follow it
constexpr std::size_t kBatchSize = 1000;  // pickle.Pickler._BATCHSIZE: bounds the unpickler's stack

class Encoder {
 public:
  explicit Encoder(std::span<const std::string_view> tuple_keys) : tuple_keys_(tuple_keys) {}

  std::vector<std::uint8_t> encode(const nlohmann::json& value) {
    out_ = {kProto, 4};
    write_value(value, 0);
    out_.push_back(kStop);
    return std::move(out_);
  }

 private:
  void put_le(std::uint64_t value, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i, value >>= 8) {
      out_.push_back(static_cast<std::uint8_t>(value & 0xff));
    }
  }

  // Invalid UTF-8 (which nlohmann strings built in code, not parsed, can hold) is written as U+FFFD, like
  // the JSON writer does: read_pickle and Python reject it, and a writer must not make unreadable files.
  void write_string(std::string_view text) {
    if (!is_valid_utf8(text)) {
      const std::string valid = to_valid_utf8(text);
      write_string(valid);
      return;
    }
    if (text.size() < 256) {
      out_.push_back(kShortBinUnicode);
      put_le(text.size(), 1);
    } else if (text.size() <= 0xffffffffU) {
      out_.push_back(kBinUnicode);
      put_le(text.size(), 4);
    } else {
      out_.push_back(kBinUnicode8);
      put_le(text.size(), 8);
    }
    out_.insert(out_.end(), text.begin(), text.end());
  }

  // Same choice of opcode as Python's save_long; LONG1 holds the shortest two's complement form.
  void write_int(std::int64_t value) {
    if (value >= 0 && value <= 0xff) {
      out_.push_back(kBinInt1);
      put_le(static_cast<std::uint64_t>(value), 1);
    } else if (value >= 0 && value <= 0xffff) {
      out_.push_back(kBinInt2);
      put_le(static_cast<std::uint64_t>(value), 2);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      out_.push_back(kBinInt);
      put_le(static_cast<std::uint32_t>(static_cast<std::int32_t>(value)), 4);
    } else {
      const auto bits = std::bit_cast<std::uint64_t>(value);
      const std::uint8_t sign_byte = value < 0 ? 0xff : 0x00;
      std::size_t n = 8;
      // Drop high bytes that only repeat the sign, keeping the sign bit in the top byte left.
      while (n > 1 && ((bits >> (8 * (n - 1))) & 0xff) == sign_byte &&
             (((bits >> (8 * (n - 2))) & 0x80) != 0) == (value < 0)) {
        --n;
      }
      out_.push_back(kLong1);
      put_le(n, 1);
      put_le(bits, n);
    }
  }

  void write_uint(std::uint64_t value) {
    if (value <= static_cast<std::uint64_t>(INT64_MAX)) {
      write_int(static_cast<std::int64_t>(value));
      return;
    }
    out_.push_back(kLong1);  // bit 63 set: a ninth, zero byte keeps it positive
    put_le(9, 1);
    put_le(value, 8);
    out_.push_back(0);
  }

  void write_value(const nlohmann::json& value, int depth) {
    switch (value.type()) {
      case nlohmann::json::value_t::null:
        out_.push_back(kNone);
        return;
      case nlohmann::json::value_t::boolean:
        out_.push_back(value.get<bool>() ? kNewTrue : kNewFalse);
        return;
      case nlohmann::json::value_t::number_integer:
        write_int(value.get<std::int64_t>());
        return;
      case nlohmann::json::value_t::number_unsigned:
        write_uint(value.get<std::uint64_t>());
        return;
      case nlohmann::json::value_t::number_float: {
        out_.push_back(kBinFloat);
        const auto bits = std::bit_cast<std::uint64_t>(value.get<double>());
        for (int shift = 56; shift >= 0; shift -= 8) {  // big-endian, unlike every other argument
          out_.push_back(static_cast<std::uint8_t>((bits >> shift) & 0xff));
        }
        return;
      }
      case nlohmann::json::value_t::string:
        write_string(value.get_ref<const std::string&>());
        return;
      case nlohmann::json::value_t::array:
      case nlohmann::json::value_t::object:
        write_container(value, depth + 1);
        return;
      default:
        throw InputError(
            fmt::format("write_pickle: a JSON {} value has no plain-pickle form", value.type_name()));
    }
  }

  // Python's _batch_appends / _batch_setitems: MARK ... APPENDS per batch, a lone APPEND for a batch of one.
  void write_container(const nlohmann::json& value, int depth) {
    if (depth > kMaxPickleDepth) {
      throw InputError(fmt::format("write_pickle: value nests deeper than {} levels", kMaxPickleDepth));
    }
    const bool is_object = value.is_object();
    out_.push_back(is_object ? kEmptyDict : kEmptyList);
    const std::size_t size = value.size();
    auto it = value.begin();
    for (std::size_t done = 0; done < size;) {
      const std::size_t batch = std::min(kBatchSize, size - done);
      if (batch > 1) {
        out_.push_back(kMark);
      }
      for (std::size_t i = 0; i < batch; ++i, ++it) {
        if (is_object) {
          write_string(it.key());
          if (it->is_array() && is_tuple_key(it.key())) {
            write_tuple(*it, depth + 1);
            continue;
          }
        }
        write_value(*it, depth);
      }
      out_.push_back(batch > 1 ? (is_object ? kSetItems : kAppends) : (is_object ? kSetItem : kAppend));
      done += batch;
    }
  }

  bool is_tuple_key(std::string_view key) const {
    return std::find(tuple_keys_.begin(), tuple_keys_.end(), key) != tuple_keys_.end();
  }

  // Python's save_tuple at protocol 4: EMPTY_TUPLE, TUPLE1/2/3 after the items, or MARK ... TUPLE.
  void write_tuple(const nlohmann::json& value, int depth) {
    if (depth > kMaxPickleDepth) {
      throw InputError(fmt::format("write_pickle: value nests deeper than {} levels", kMaxPickleDepth));
    }
    const std::size_t size = value.size();
    if (size == 0) {
      out_.push_back(kEmptyTuple);
      return;
    }
    if (size > 3) {
      out_.push_back(kMark);
    }
    for (const nlohmann::json& item : value) {
      write_value(item, depth);
    }
    out_.push_back(size > 3 ? kTuple : static_cast<std::uint8_t>(kTuple1 + size - 1));
  }

  std::span<const std::string_view> tuple_keys_;
  std::vector<std::uint8_t> out_;
};

}  // namespace

std::vector<std::uint8_t> write_pickle(const nlohmann::json& value,
                                       std::span<const std::string_view> tuple_keys) {
  return Encoder(tuple_keys).encode(value);
}

}  // namespace vramsim
