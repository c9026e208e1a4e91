// read_pickle / write_pickle. Expected values are what Python's pickle.loads returns for the same bytes
// (byte arrays below are pickle.dumps output or hand-assembled and checked with pickletools), never what
// the decoder itself printed.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

using nlohmann::json;
using vramsim::InputError;
using vramsim::read_pickle;
using vramsim::write_pickle;
using Bytes = std::vector<std::uint8_t>;

namespace {

json decode(const Bytes& bytes) { return read_pickle(bytes, "t.pickle"); }

// The InputError message for `bytes`, or "decoded" when it decodes.
std::string error_of(const Bytes& bytes) {
  try {
    decode(bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "decoded";
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes repeat(const Bytes& unit, std::size_t times) {
  Bytes out;
  for (std::size_t i = 0; i < times; ++i) {
    out.insert(out.end(), unit.begin(), unit.end());
  }
  return out;
}

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const Bytes kProto4 = {0x80, 0x04};

// pickle.dumps({'a': [1, (2, 3)]}, protocol=4): PROTO FRAME EMPTY_DICT MEMOIZE SHORT_BINUNICODE MEMOIZE
// EMPTY_LIST MEMOIZE MARK BININT1 BININT1 BININT1 TUPLE2 MEMOIZE APPENDS SETITEM STOP
const Bytes kSmallP4 = {0x80, 0x04, 0x95, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                        0x7d, 0x94, 0x8c, 0x01, 0x61, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01,
                        0x4b, 0x02, 0x4b, 0x03, 0x86, 0x94, 0x65, 0x73, 0x2e};

}  // namespace

TEST_CASE("read_pickle decodes the same dict in protocols 2 to 5", "[quick][traces][pickle]") {
  const json expected = json::parse(R"({"a": [1, [2, 3]]})");
  // pickle.dumps({'a': [1, (2, 3)]}, protocol=2); protocol 3 differs only in the PROTO byte.
  Bytes p2 = {0x80, 0x02, 0x7d, 0x71, 0x00, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61, 0x71, 0x01, 0x5d, 0x71,
              0x02, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x86, 0x71, 0x03, 0x65, 0x73, 0x2e};
  CHECK(decode(p2) == expected);
  p2[1] = 3;
  CHECK(decode(p2) == expected);
  CHECK(decode(kSmallP4) == expected);
  Bytes p5 = kSmallP4;
  p5[1] = 5;
  CHECK(decode(p5) == expected);
}

TEST_CASE("read_pickle decodes scalars and 64-bit ints", "[quick][traces][pickle]") {
  // pickle.dumps([None, True, False, 0, 255, 256, 65535, 65536, -1, -2**31, 2**31-1, 2**31, -2**31-1,
  //               2**63, 2**64-1, -2**63, 1.5, -0.25, 'h\u00e9llo \u2713', ''], protocol=4)
  const Bytes bytes = {
      0x80, 0x04, 0x95, 0x76, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5d, 0x94, 0x28, 0x4e, 0x88, 0x89,
      0x4b, 0x00, 0x4b, 0xff, 0x4d, 0x00, 0x01, 0x4d, 0xff, 0xff, 0x4a, 0x00, 0x00, 0x01, 0x00, 0x4a, 0xff,
      0xff, 0xff, 0xff, 0x4a, 0x00, 0x00, 0x00, 0x80, 0x4a, 0xff, 0xff, 0xff, 0x7f, 0x8a, 0x05, 0x00, 0x00,
      0x00, 0x80, 0x00, 0x8a, 0x05, 0xff, 0xff, 0xff, 0x7f, 0xff, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x80, 0x00, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x8a, 0x08,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x47, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x47, 0xbf, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8c, 0x0a, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f,
      0x20, 0xe2, 0x9c, 0x93, 0x94, 0x8c, 0x00, 0x94, 0x65, 0x2e};
  const json value = decode(bytes);
  REQUIRE(value.size() == 20);
  CHECK(value[0].is_null());
  CHECK(value[1] == true);
  CHECK(value[2] == false);
  CHECK(value[3] == 0);
  CHECK(value[4] == 255);
  CHECK(value[5] == 256);
  CHECK(value[6] == 65535);
  CHECK(value[7] == 65536);
  CHECK(value[8] == -1);
  CHECK(value[9] == INT64_C(-2147483648));
  CHECK(value[10] == 2147483647);
  CHECK(value[11] == INT64_C(2147483648));
  CHECK(value[12] == INT64_C(-2147483649));
  CHECK(value[13].get<std::uint64_t>() == UINT64_C(9223372036854775808));
  CHECK(value[13].is_number_unsigned());
  CHECK(value[14].get<std::uint64_t>() == UINT64_MAX);
  CHECK(value[15].get<std::int64_t>() == INT64_MIN);
  CHECK(value[15].is_number_integer());
  CHECK(value[16] == 1.5);
  CHECK(value[17] == -0.25);
  CHECK(value[18] == "h\xc3\xa9llo \xe2\x9c\x93");
  CHECK(value[19] == "");
}

TEST_CASE("read_pickle range-checks LONG1 and LONG4", "[quick][traces][pickle]") {
  // Python's int.from_bytes(..., 'little', signed=True) of each payload.
  CHECK(decode(kProto4 + Bytes{0x8a, 0x00, '.'}) == 0);
  CHECK(decode(kProto4 + Bytes{0x8a, 0x01, 0xfe, '.'}) == -2);
  CHECK(decode(kProto4 + Bytes{0x8a, 0x0c, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '.'}) == 5);  // padded
  CHECK(decode(kProto4 +
               Bytes{0x8a, 0x0a, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'}) == -5);
  CHECK(decode(kProto4 + Bytes{0x8b, 0x03, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, '.'}) == 197121);  // LONG4
  // 2**64 and -2**63-1 are valid Python ints but not 64-bit ones.
  CHECK(error_of(kProto4 + Bytes{0x8a, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, '.'}) ==
        "t.pickle: byte 2: LONG1 integer does not fit in 64 bits");
  CHECK(error_of(kProto4 + Bytes{0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, '.'}) ==
        "t.pickle: byte 2: LONG1 integer does not fit in 64 bits");
  CHECK(error_of(kProto4 + Bytes{0x8b, 0xff, 0xff, 0xff, 0xff, '.'}) ==
        "t.pickle: byte 2: LONG4 has a negative byte count");
}

TEST_CASE("read_pickle decodes protocol 0 and 1 text opcodes", "[quick][traces][pickle]") {
  // pickle.dumps([1, -5, 1.5, True, None, (1, 2), 12345678901234567890, -3], protocol=0):
  // MARK LIST PUT INT APPEND ... FLOAT ... INT 01 ... NONE ... TUPLE ... LONG ... STOP
  const Bytes p0 = {0x28, 0x6c, 0x70, 0x30, 0x0a, 0x49, 0x31, 0x0a, 0x61, 0x49, 0x2d, 0x35, 0x0a, 0x61,
                    0x46, 0x31, 0x2e, 0x35, 0x0a, 0x61, 0x49, 0x30, 0x31, 0x0a, 0x61, 0x4e, 0x61, 0x28,
                    0x49, 0x31, 0x0a, 0x49, 0x32, 0x0a, 0x74, 0x70, 0x31, 0x0a, 0x61, 0x4c, 0x31, 0x32,
                    0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36,
                    0x37, 0x38, 0x39, 0x30, 0x4c, 0x0a, 0x61, 0x49, 0x2d, 0x33, 0x0a, 0x61, 0x2e};
  const json list = decode(p0);
  CHECK(list == json::parse("[1, -5, 1.5, true, null, [1, 2], 12345678901234567890, -3]"));
  CHECK(list[3].is_boolean());
  // pickle.dumps({1: 2, 3: [4]}, protocol=0): MARK DICT PUT INT INT SETITEM ...; int keys become text.
  const Bytes dict = {0x28, 0x64, 0x70, 0x30, 0x0a, 0x49, 0x31, 0x0a, 0x49, 0x32, 0x0a, 0x73, 0x49,
                      0x33, 0x0a, 0x28, 0x6c, 0x70, 0x31, 0x0a, 0x49, 0x34, 0x0a, 0x61, 0x73, 0x2e};
  CHECK(decode(dict) == json::parse(R"({"1": 2, "3": [4]})"));
  // pickle.dumps([1, (), {}, 2**40, 'ab'], protocol=1): EMPTY_LIST BINPUT MARK ... EMPTY_TUPLE ... LONG
  const Bytes p1 = {0x5d, 0x71, 0x00, 0x28, 0x4b, 0x01, 0x29, 0x7d, 0x71, 0x01, 0x4c, 0x31, 0x30,
                    0x39, 0x39, 0x35, 0x31, 0x31, 0x36, 0x32, 0x37, 0x37, 0x37, 0x36, 0x4c, 0x0a,
                    0x58, 0x02, 0x00, 0x00, 0x00, 0x61, 0x62, 0x71, 0x02, 0x65, 0x2e};
  CHECK(decode(p1) == json::parse(R"([1, [], {}, 1099511627776, "ab"])"));
  // GET reads a text memo index: [PUT 0 of 7, GET 0] -> [7, 7].
  CHECK(decode(Bytes{'(', 'I', '7', '\n', 'p', '0', '\n', 'g', '0', '\n', 'l', '.'}) ==
        json::parse("[7, 7]"));
  CHECK(error_of(Bytes{'I', '0', 'x', '1', '0', '\n', '.'}) == "t.pickle: byte 0: malformed INT argument");
  CHECK(error_of(Bytes{'F', '1', '.', '5', 'x', '\n', '.'}) == "t.pickle: byte 0: malformed FLOAT argument");
  CHECK(error_of(Bytes{'I', '1', '2'}) == "t.pickle: byte 3: data ends inside the INT argument (no newline)");
  CHECK(error_of(Bytes{'L', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9',  '9', '9',
                       '9', '9', '9', '9', '9', '9', '9', '9', '9', 'L', '\n', '.'}) ==
        "t.pickle: byte 0: LONG argument is not a 64-bit decimal integer");
}

TEST_CASE("read_pickle decodes tuples, sets and MARK-built containers", "[quick][traces][pickle]") {
  CHECK(decode(Bytes{0x80, 0x02, 0x29, 0x2e}) == json::array());                               // ()
  CHECK(decode(Bytes{0x80, 0x02, 0x4b, 0x01, 0x85, 0x71, 0x00, 0x2e}) == json::parse("[1]"));  // (1,)
  // (1, 2, 3) and (1, 2, 3, 4), protocol 2: TUPLE3, then MARK ... TUPLE
  CHECK(decode(Bytes{0x80, 0x02, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x87, 0x71, 0x00, 0x2e}) ==
        json::parse("[1, 2, 3]"));
  CHECK(decode(Bytes{0x80, 0x02, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x4b, 0x04, 0x74, 0x71, 0x00,
                     0x2e}) == json::parse("[1, 2, 3, 4]"));
  // pickle.dumps({1, 2, 3}, protocol=4): EMPTY_SET MEMOIZE MARK ... ADDITEMS
  CHECK(decode(Bytes{0x80, 0x04, 0x95, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                     0x8f, 0x94, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x90, 0x2e}) ==
        json::parse("[1, 2, 3]"));
  // pickle.dumps(frozenset({5}), protocol=4): MARK BININT1 FROZENSET
  CHECK(decode(Bytes{0x80, 0x04, 0x95, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, 0x4b, 0x05, 0x91,
                     0x94, 0x2e}) == json::parse("[5]"));
  // MARK 1 2 DICT -> {1: 2}; SETITEMS with a repeated key keeps the last value, as a Python dict does.
  CHECK(decode(kProto4 + Bytes{'(', 'K', 1, 'K', 2, 'd', '.'}) == json::parse(R"({"1": 2})"));
  CHECK(decode(kProto4 + Bytes{'}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'a', 'K', 2, 'u', '.'}) ==
        json::parse(R"({"a": 2})"));
  // A str longer than 255 bytes is BINUNICODE; BINUNICODE8 has an 8-byte length.
  const Bytes x300(300, 'x');
  CHECK(decode(kProto4 + Bytes{'X', 0x2c, 0x01, 0, 0} + x300 + Bytes{'.'}) == std::string(300, 'x'));
  CHECK(decode(kProto4 + Bytes{0x8d, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', '.'}) == "abc");
}

TEST_CASE("read_pickle runs the stack opcodes DUP, POP and POP_MARK", "[quick][traces][pickle]") {
  CHECK(decode(kProto4 + Bytes{'K', 5, '2', 0x86, '.'}) == json::parse("[5, 5]"));  // DUP TUPLE2
  CHECK(decode(kProto4 + Bytes{'K', 1, 'K', 2, '0', '.'}) == 1);                    // POP
  CHECK(decode(kProto4 + Bytes{'K', 1, '(', 'K', 2, 'K', 3, '1', '.'}) == 1);       // POP_MARK
  CHECK(decode(kProto4 + Bytes{'K', 7, '(', '0', '.'}) == 7);  // POP of an empty MARK drops the MARK
}

TEST_CASE("read_pickle shares memoised values", "[quick][traces][pickle]") {
  const json expected = json::parse("[[1, 2], [1, 2], [1, 2]]");
  // x = [1, 2]; pickle.dumps([x, x, x], protocol=4) and protocol=2 (BINPUT/BINGET)
  CHECK(decode(Bytes{0x80, 0x04, 0x95, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5d, 0x94, 0x28,
                     0x5d, 0x94, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x65, 0x68, 0x01, 0x68, 0x01, 0x65, 0x2e}) ==
        expected);
  CHECK(decode(Bytes{0x80, 0x02, 0x5d, 0x71, 0x00, 0x28, 0x5d, 0x71, 0x01, 0x28, 0x4b,
                     0x01, 0x4b, 0x02, 0x65, 0x68, 0x01, 0x68, 0x01, 0x65, 0x2e}) == expected);
  // A list appended to after it was memoised: both references see the later items (Python shares it).
  CHECK(decode(kProto4 + Bytes{']', 'q', 0, ']', 'h', 0, 'a', 'h', 0, 'K', 9, 'a', '0', '.'}) ==
        json::parse("[[9]]"));
  // LONG_BINPUT / LONG_BINGET with an index far beyond the input size.
  CHECK(decode(kProto4 + Bytes{'K', 7, 'r', 0, 0,   1, 0, '0', ']', '(', 'j',
                               0,   0, 1,   0, 'j', 0, 0, 1,   0,   'e', '.'}) == json::parse("[7, 7]"));
  // MEMOIZE writes slot len(memo): after BINPUT 5 that is slot 1.
  CHECK(decode(kProto4 + Bytes{'K', 1, 'q', 5, '0', 'K', 2, 0x94, '0', ']', '(', 'h', 5, 'h', 1, 'e', '.'}) ==
        json::parse("[1, 2]"));
  CHECK(error_of(kProto4 + Bytes{'h', 3, '.'}) ==
        "t.pickle: byte 2: BINGET of memo slot 3, which was never set");
  CHECK(error_of(kProto4 + Bytes{0x94, '.'}) == "t.pickle: byte 2: stack underflow in MEMOIZE");
}

TEST_CASE("read_pickle rejects code-running opcodes at their offset", "[quick][traces][pickle]") {
  // class Evil: __reduce__ = lambda self: (os.system, ('echo pwned',)); pickle.dumps(Evil(), protocol=2)
  const Bytes evil2 = {0x80, 0x02, 0x63, 0x70, 0x6f, 0x73, 0x69, 0x78, 0x0a, 0x73, 0x79, 0x73, 0x74, 0x65,
                       0x6d, 0x0a, 0x71, 0x00, 0x58, 0x0a, 0x00, 0x00, 0x00, 0x65, 0x63, 0x68, 0x6f, 0x20,
                       0x70, 0x77, 0x6e, 0x65, 0x64, 0x71, 0x01, 0x85, 0x71, 0x02, 0x52, 0x71, 0x03, 0x2e};
  CHECK(error_of(evil2) ==
        "t.pickle: byte 2: unsupported pickle opcode 0x63 ('c' GLOBAL): vramsim reads data only");
  // The same at protocol 4: SHORT_BINUNICODE 'posix' ... 'system', then STACK_GLOBAL at byte 28.
  const Bytes evil4 = {0x80, 0x04, 0x95, 0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8c,
                       0x05, 0x70, 0x6f, 0x73, 0x69, 0x78, 0x94, 0x8c, 0x06, 0x73, 0x79, 0x73,
                       0x74, 0x65, 0x6d, 0x94, 0x93, 0x94, 0x8c, 0x0a, 0x65, 0x63, 0x68, 0x6f,
                       0x20, 0x70, 0x77, 0x6e, 0x65, 0x64, 0x94, 0x85, 0x94, 0x52, 0x94, 0x2e};
  CHECK(error_of(evil4) ==
        "t.pickle: byte 28: unsupported pickle opcode 0x93 (STACK_GLOBAL): vramsim reads data only");
  CHECK(error_of(Bytes{0x80, 0x02, ')', ')', 'R', '.'}) ==
        "t.pickle: byte 4: unsupported pickle opcode 0x52 ('R' REDUCE): vramsim reads data only");
  // pickle.dumps({1}, protocol=2) builds the set with GLOBAL __builtin__.set + REDUCE.
  CHECK_THROWS_WITH(decode(Bytes{0x80, 0x02, 0x63, 0x5f, 0x5f, 0x62, 0x75, 0x69, 0x6c, 0x74, 0x69, 0x6e,
                                 0x5f, 0x5f, 0x0a, 0x73, 0x65, 0x74, 0x0a, 0x71, 0x00, 0x5d, 0x71, 0x01,
                                 0x4b, 0x01, 0x61, 0x85, 0x71, 0x02, 0x52, 0x71, 0x03, 0x2e}),
                    "t.pickle: byte 2: unsupported pickle opcode 0x63 ('c' GLOBAL): vramsim reads data only");
  for (const std::uint8_t op : Bytes{'P', 'Q', 'R', 'b', 'c', 'i', 'o', 0x81, 0x82, 0x83, 0x84, 0x92, 0x93,
                                     0x97, 0x98, 0x99, 0xff, 'z', 0x00}) {
    CAPTURE(op);
    const std::string message = error_of(kProto4 + Bytes{op, 0, 0, 0, 0, 0, 0, 0, 0, '.'});
    CHECK_THAT(message,
               Catch::StartsWith(fmt::format("t.pickle: byte 2: unsupported pickle opcode 0x{:02x}", op)));
    CHECK_THAT(message, Catch::EndsWith(": vramsim reads data only"));
  }
  CHECK(error_of(kProto4 + Bytes{0xff, '.'}) ==
        "t.pickle: byte 2: unsupported pickle opcode 0xff: vramsim reads data only");
  CHECK(error_of(kProto4 + Bytes{'z', '.'}) ==
        "t.pickle: byte 2: unsupported pickle opcode 0x7a ('z'): vramsim reads data only");
  // pickle.dumps(b'ab', protocol=3) and pickle.dumps('a', protocol=0): data, but outside the subset.
  CHECK(error_of(Bytes{0x80, 0x03, 0x43, 0x02, 0x61, 0x62, 0x71, 0x00, 0x2e}) ==
        "t.pickle: byte 2: unsupported pickle opcode 0x43 ('C' SHORT_BINBYTES): vramsim reads str values, "
        "not bytes");
  CHECK_THAT(error_of(Bytes{0x56, 0x61, 0x0a, 0x70, 0x30, 0x0a, 0x2e}),
             Catch::StartsWith("t.pickle: byte 0: unsupported pickle opcode 0x56 ('V' UNICODE)"));
}

TEST_CASE("read_pickle rejects malformed structure with the byte offset", "[quick][traces][pickle]") {
  CHECK(error_of({}) == "t.pickle: byte 0: data ends without a STOP opcode");
  CHECK(error_of(kProto4) == "t.pickle: byte 2: data ends without a STOP opcode");
  CHECK(error_of(Bytes{0x80, 0x06, 'N', '.'}) == "t.pickle: byte 0: unsupported pickle protocol 6");
  CHECK(error_of(kProto4 + Bytes{'N', '.', 'N'}) == "t.pickle: byte 4: 1 bytes of trailing data after STOP");
  CHECK(error_of(kProto4 + Bytes{'.'}) == "t.pickle: byte 2: stack underflow in STOP");
  CHECK(error_of(kProto4 + Bytes{'N', '(', '.'}) == "t.pickle: byte 4: stack underflow in STOP");
  CHECK(error_of(kProto4 + Bytes{'a', '.'}) == "t.pickle: byte 2: stack underflow in APPEND");
  CHECK(error_of(kProto4 + Bytes{'K', 1, 0x86, '.'}) == "t.pickle: byte 4: stack underflow in TUPLE2");
  CHECK(error_of(kProto4 + Bytes{']', 'K', 1, 'e', '.'}) ==
        "t.pickle: byte 5: APPENDS without a matching MARK");
  CHECK(error_of(kProto4 + Bytes{']', '(', '(', 'K', 1, 'e', '.'}) ==
        "t.pickle: byte 7: stack underflow in APPENDS");
  CHECK(error_of(kProto4 + Bytes{'0', '.'}) == "t.pickle: byte 2: stack underflow in POP");
  CHECK(error_of(kProto4 + Bytes{'1', '.'}) == "t.pickle: byte 2: POP_MARK without a matching MARK");
  CHECK(error_of(kProto4 + Bytes{'}', 'K', 1, 'a', '.'}) ==
        "t.pickle: byte 5: APPEND onto a dict, not a list");
  CHECK(error_of(kProto4 + Bytes{')', '(', 'K', 1, 'e', '.'}) ==
        "t.pickle: byte 6: APPENDS onto a tuple, not a list");
  CHECK(error_of(kProto4 + Bytes{']', '(', 'K', 1, 'K', 2, 'u', '.'}) ==
        "t.pickle: byte 8: SETITEMS onto a list, not a dict");
  CHECK(error_of(kProto4 + Bytes{'}', '(', 'K', 1, 'K', 2, 'K', 3, 'u', '.'}) ==
        "t.pickle: byte 10: odd number of items (3) for SETITEMS");
  CHECK(error_of(kProto4 + Bytes{'(', 'K', 1, 'd', '.'}) ==
        "t.pickle: byte 5: odd number of items (1) for DICT");
  CHECK(error_of(kProto4 + Bytes{'(', 'K', 1, 0x91, '(', 'K', 2, 0x90, '.'}) ==
        "t.pickle: byte 9: ADDITEMS onto a frozenset, not a set");
  CHECK(error_of(kProto4 + Bytes{'}', ')', 'K', 1, 's', '.'}) ==
        "t.pickle: byte 6: dict key must be str or int, not tuple");
  CHECK(error_of(kProto4 + Bytes{'}', 0x88, 'K', 1, 's', '.'}) ==
        "t.pickle: byte 6: dict key must be str or int, not bool");
  CHECK(error_of(kProto4 + Bytes{'}', 'N', 'K', 1, 's', '.'}) ==
        "t.pickle: byte 6: dict key must be str or int, not None");
  // Invalid UTF-8 (a lone continuation byte, and an encoded surrogate JSON cannot hold).
  CHECK(error_of(kProto4 + Bytes{0x8c, 1, 0x80, '.'}) ==
        "t.pickle: byte 2: SHORT_BINUNICODE is not valid UTF-8");
  CHECK(error_of(kProto4 + Bytes{0x8c, 3, 0xed, 0xa0, 0x80, '.'}) ==
        "t.pickle: byte 2: SHORT_BINUNICODE is not valid UTF-8");
}

TEST_CASE("read_pickle checks declared lengths before using them", "[quick][traces][pickle]") {
  CHECK(error_of(kProto4 + Bytes{'X', 0xe8, 0x03, 0, 0, 'a', 'b', '.'}) ==
        "t.pickle: byte 2: BINUNICODE declares 1000 bytes but only 3 remain");
  CHECK(error_of(kProto4 + Bytes{0x8d, 0, 0, 0, 0, 0, 0, 0, 0x80, '.'}) ==
        "t.pickle: byte 2: BINUNICODE8 declares 9223372036854775808 bytes but only 1 remain");
  CHECK(error_of(kProto4 + Bytes{0x8b, 0xff, 0xff, 0xff, 0x7f, '.'}) ==
        "t.pickle: byte 2: LONG4 declares 2147483647 bytes but only 1 remain");
  CHECK(error_of(kProto4 + Bytes{0x95, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'N', '.'}) ==
        "t.pickle: byte 2: FRAME declares 18446744073709551615 bytes but only 2 remain");
  CHECK(error_of(kProto4 + Bytes{0x8c, 5, 'a', 'b'}) ==
        "t.pickle: byte 2: SHORT_BINUNICODE declares 5 bytes but only 2 remain");
}

TEST_CASE("read_pickle rejects every truncation of a valid pickle", "[quick][traces][pickle]") {
  for (std::size_t n = 0; n < kSmallP4.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(decode(Bytes(kSmallP4.begin(), kSmallP4.begin() + static_cast<std::ptrdiff_t>(n))),
                    InputError);
  }
  const auto prefix = [](std::size_t n) {
    return Bytes(kSmallP4.begin(), kSmallP4.begin() + static_cast<std::ptrdiff_t>(n));
  };
  CHECK(error_of(prefix(1)) == "t.pickle: byte 1: data ends inside the PROTO argument");
  CHECK(error_of(prefix(5)) == "t.pickle: byte 5: data ends inside the FRAME argument");
  CHECK(error_of(prefix(11)) == "t.pickle: byte 2: FRAME declares 20 bytes but only 0 remain");
  CHECK(error_of(prefix(30)) == "t.pickle: byte 2: FRAME declares 20 bytes but only 19 remain");
}

TEST_CASE("read_pickle limits nesting depth", "[quick][traces][pickle]") {
  // 256 (then 257) EMPTY_LISTs, each APPENDed into the one before it.
  const auto nested = [](std::size_t depth) {
    return kProto4 + repeat({']'}, depth) + repeat({'a'}, depth - 1) + Bytes{'.'};
  };
  json value = decode(nested(vramsim::kMaxPickleDepth));
  int depth = 0;
  for (const json* v = &value; v->is_array(); v = &(*v)[0]) {
    ++depth;
    if (v->empty()) {
      break;
    }
  }
  CHECK(depth == vramsim::kMaxPickleDepth);
  CHECK(error_of(nested(vramsim::kMaxPickleDepth + 1)) ==
        "t.pickle: byte 258: containers nest deeper than 256 levels");
  // A 200-deep chain C, seen first at depth 2 and then again at depth 102 through a 100-deep wrapper:
  // [C, [[...[C]...]]] is 301 deep although every container was within bounds on its first visit.
  const Bytes chain = repeat({']'}, 200) + repeat({'a'}, 199) + Bytes{0x94, '0'};
  const Bytes wrapper = Bytes{']', 'h', 0, 'a'} + repeat({']'}, 100) + Bytes{'h', 0} + repeat({'a'}, 101);
  CHECK(error_of(kProto4 + chain + wrapper + Bytes{'.'}) ==
        "t.pickle: byte 2: containers nest deeper than 256 levels");
}

TEST_CASE("read_pickle rejects containers that contain themselves", "[quick][traces][pickle]") {
  // l = []; l.append(l); pickle.dumps(l, protocol=4)
  CHECK(error_of(Bytes{0x80, 0x04, 0x95, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5d, 0x94, 0x68,
                       0x00, 0x61, 0x2e}) ==
        "t.pickle: byte 11: this list contains itself, which JSON cannot represent");
  // d = {}; d['me'] = d; pickle.dumps(d, protocol=4)
  CHECK(error_of(Bytes{0x80, 0x04, 0x95, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                       0x7d, 0x94, 0x8c, 0x02, 0x6d, 0x65, 0x94, 0x68, 0x00, 0x73, 0x2e}) ==
        "t.pickle: byte 11: this dict contains itself, which JSON cannot represent");
  // a = []; a.append([a]); pickle.dumps(a, protocol=4)
  CHECK(error_of(Bytes{0x80, 0x04, 0x95, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                       0x00, 0x5d, 0x94, 0x5d, 0x94, 0x68, 0x00, 0x61, 0x61, 0x2e}) ==
        "t.pickle: byte 11: this list contains itself, which JSON cannot represent");
}

TEST_CASE("read_pickle bounds the expansion of shared memo values", "[quick][traces][pickle]") {
  // Memo bomb: level 0 = [1]; level k+1 = [level k, level k]. Level 60 would expand to ~2**61 values.
  Bytes bomb = kProto4 + Bytes{']', 'K', 1, 'a', 0x94};
  for (std::uint8_t level = 0; level < 60; ++level) {
    bomb = bomb + Bytes{']', '(', 'h', level, 'h', level, 'e', 0x94};
  }
  bomb = bomb + Bytes{'.'};
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(error_of(bomb), Catch::Matches("t\\.pickle: byte [0-9]+: output would exceed [0-9]+ bytes: .*"));
  // A flat list of 1000 ints referenced 2000 times: 2 million values from a 5 KB input.
  const Bytes big = kProto4 + Bytes{']', 0x94, '('} + repeat({'K', 7}, 1000) + Bytes{'e', ']', '('};
  CHECK_THAT(error_of(big + repeat({'h', 0}, 2000) + Bytes{'e', '.'}),
             Catch::Matches("t\\.pickle: byte [0-9]+: output would exceed [0-9]+ bytes: .*"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // Within the budget the shared list is expanded faithfully.
  const json shared = decode(big + repeat({'h', 0}, 300) + Bytes{'e', '.'});
  REQUIRE(shared.size() == 300);
  CHECK(shared[299].size() == 1000);
  CHECK(shared[299][999] == 7);
}

// SHORT_BINUNICODE / BINUNICODE of `n` copies of 'a', then MEMOIZE.
Bytes memoised_str(std::uint32_t n) {
  Bytes out = n < 256 ? Bytes{0x8c, static_cast<std::uint8_t>(n)}
                      : Bytes{'X', static_cast<std::uint8_t>(n), static_cast<std::uint8_t>(n >> 8),
                              static_cast<std::uint8_t>(n >> 16), static_cast<std::uint8_t>(n >> 24)};
  return out + Bytes(n, 'a') + Bytes{0x94};
}

// EMPTY_LIST MARK, `refs` x BINGET `slot`, APPENDS: a list of `refs` references to one memo slot.
Bytes list_of_refs(std::uint8_t slot, std::size_t refs) {
  return Bytes{']', '('} + repeat({'h', slot}, refs) + Bytes{'e'};
}

TEST_CASE("read_pickle counts the bytes of strs that memo references copy", "[quick][traces][pickle]") {
  // Within the cap the copies come out faithfully: a 1024-byte str in a list 1000 times (3 KB of input) is
  // 1000 x 1024 = 1,024,000 bytes of text.
  const Bytes one_level = kProto4 + memoised_str(1024) + list_of_refs(0, 1000);
  const json shared = decode(one_level + Bytes{'.'});
  REQUIRE(shared.size() == 1000);
  CHECK(shared[999] == std::string(1024, 'a'));

  // One more level: that list memoised and referenced 1000 times would be 1000 x 1000 x 1024 bytes (1 GB)
  // from 5 KB. The cap: 256 bytes per input byte + 32 MiB = 256 * 5040 + 33,554,432 = 34,844,672 bytes,
  // where every value costs 32 bytes plus its text. The outer list is the EMPTY_LIST at byte 3036 (2 PROTO
  // + 5 BINUNICODE header + 1024 text + 1 MEMOIZE + 2 ']' '(' + 2000 BINGET + 1 APPENDS + 1 MEMOIZE).
  const Bytes bomb = one_level + Bytes{0x94} + list_of_refs(1, 1000) + Bytes{'.'};
  REQUIRE(bomb.size() == 5040);
  const auto start = std::chrono::steady_clock::now();
  CHECK(
      error_of(bomb) ==
      "t.pickle: byte 3036: output would exceed 34844672 bytes: memo references copy the values they share");

  // The issue's case: a 1 MiB str referenced 50,000 times, ~52 GB of output from 1.15 MB. Cap: 256 *
  // 1,148,588 + 33,554,432 = 327,592,960 bytes; the list starts at byte 1,048,584 (2 + 5 + 1,048,576 + 1) and
  // takes 2 + 100,000 + 1 bytes, then STOP.
  const Bytes mib = kProto4 + memoised_str(1 << 20) + list_of_refs(0, 50'000) + Bytes{'.'};
  REQUIRE(mib.size() == 1'148'588);
  CHECK(error_of(mib) ==
        "t.pickle: byte 1048584: output would exceed 327592960 bytes: memo references copy "
        "the values they share");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("read_pickle charges a skipped value as the empty list it becomes", "[quick][traces][pickle]") {
  // [d] * 40 with d = {"frames": [s] * 1000} and s a 1024-byte str: each d expands to 32 + (32 + 6) + (32 +
  // 1000 x (32 + 1024)) = 1,056,102 bytes, the list to 32 + 40 x 1,056,102 = 42,244,112, over the cap of
  // 256 x 3133 + 33,554,432 = 34,356,480. Replay skips "frames", and then it is 40 small dicts.
  static constexpr std::string_view kSkip[] = {"frames"};
  const Bytes d = Bytes{'}', 0x8c, 6, 'f', 'r', 'a', 'm', 'e', 's', 'h', 1, 's', 0x94};  // memo slot 2
  const Bytes input = kProto4 + memoised_str(1024) + list_of_refs(0, 1000) + Bytes{0x94} + d +
                      list_of_refs(2, 40) + Bytes{'.'};
  REQUIRE(input.size() == 3133);
  // The outer list: after 2 PROTO + 1030 str + 2003 list + 1 MEMOIZE + 13 dict bytes = byte 3049.
  CHECK(
      error_of(input) ==
      "t.pickle: byte 3049: output would exceed 34356480 bytes: memo references copy the values they share");
  const json skipped = read_pickle(input, "t.pickle", kSkip);
  REQUIRE(skipped.size() == 40);
  CHECK(skipped[39] == json::parse(R"({"frames": []})"));
}

TEST_CASE("read_pickle survives random bytes", "[quick][traces][pickle]") {
  std::mt19937 rng(20240601);
  // Half pure noise, half noise built from valid data opcodes so that it gets past the first byte.
  const Bytes ops = {'(',  '.',  '0',  '1',  '2',  'K',  'M',  'J',  'N',  ']',  '}',
                     ')',  'a',  'e',  's',  'u',  'h',  'q',  0x94, 0x85, 0x86, 0x87,
                     0x88, 0x89, 0x8a, 0x8c, 0x8f, 0x90, 0x91, 0x95, 'l',  'd',  't'};
  int decoded = 0;
  for (int i = 0; i < 2000; ++i) {
    Bytes input = kProto4;
    const std::size_t length = rng() % 64;
    for (std::size_t k = 0; k < length; ++k) {
      const bool opcode = i % 2 == 1 && rng() % 3 != 0;
      input.push_back(opcode ? ops[rng() % ops.size()]
                             : static_cast<std::uint8_t>(rng() % 8 == 0 ? rng() : rng() % 4));
    }
    if (i % 4 == 3) {
      input.push_back('.');
    }
    try {
      decode(input);
      ++decoded;
    } catch (const InputError&) {
    }
  }
  CHECK(decoded > 0);
}

TEST_CASE("write_pickle emits protocol 4 that read_pickle reads back", "[quick][traces][pickle]") {
  // Python's pickler without MEMOIZE/FRAME: EMPTY_DICT SHORT_BINUNICODE EMPTY_LIST MARK .. APPENDS SETITEM
  CHECK(write_pickle(json::parse(R"({"a": [1, 2]})")) ==
        Bytes{0x80, 0x04, '}', 0x8c, 1, 'a', ']', '(', 'K', 1, 'K', 2, 'e', 's', '.'});
  // Python's encode_long: LONG1 with the shortest two's complement payload.
  CHECK(write_pickle(json(UINT64_C(9223372036854775808))) ==
        Bytes{0x80, 0x04, 0x8a, 0x09, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, '.'});
  CHECK(write_pickle(json(INT64_MIN)) == Bytes{0x80, 0x04, 0x8a, 0x08, 0, 0, 0, 0, 0, 0, 0, 0x80, '.'});
  CHECK(write_pickle(json(INT64_C(-2147483649))) ==
        Bytes{0x80, 0x04, 0x8a, 0x05, 0xff, 0xff, 0xff, 0x7f, 0xff, '.'});
  CHECK(write_pickle(json(INT64_C(2147483648))) == Bytes{0x80, 0x04, 0x8a, 0x05, 0, 0, 0, 0x80, 0, '.'});
  CHECK(write_pickle(json(-1)) == Bytes{0x80, 0x04, 'J', 0xff, 0xff, 0xff, 0xff, '.'});
  CHECK(write_pickle(json(1.5)) == Bytes{0x80, 0x04, 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, '.'});
  CHECK(write_pickle(json(nullptr)) == Bytes{0x80, 0x04, 'N', '.'});

  json value = json::parse(R"({"segments": [{"address": 139637976727552, "total_size": 2097152,
      "blocks": [{"size": 512, "state": "active_allocated"}]}], "device_traces": [[], [{"action": "alloc",
      "addr": -5, "time_us": 1.25, "ok": true, "frames": null}]], "caf\u00e9": "\u2713"})");
  value["big"] = UINT64_MAX;
  value["small"] = INT64_MIN;
  value["long_string"] = std::string(70000, 'y');
  value["batched_list"] = json::array();
  value["batched_dict"] = json::object();
  for (int i = 0; i < 2500; ++i) {
    value["batched_list"].push_back(i * 1000);
    value["batched_dict"][std::to_string(i)] = i;
  }
  CHECK(read_pickle(write_pickle(value), "roundtrip") == value);
  CHECK_THROWS_AS(write_pickle(json::binary({1, 2})), InputError);
  json deep = json::array();
  for (int i = 0; i < vramsim::kMaxPickleDepth; ++i) {
    deep = json::array({deep});
  }
  CHECK_THROWS_WITH(write_pickle(deep), "write_pickle: value nests deeper than 256 levels");
}

TEST_CASE("write_pickle writes text that is not UTF-8 as U+FFFD", "[quick][traces][pickle]") {
  // A string built in code (a file path, a tag) can hold any bytes; read_pickle and Python reject those, so
  // the writer replaces each byte that starts no valid sequence, as nlohmann's replace handler does.
  json value = json::object();
  value["a\xff"] = std::string("x\xfe\xc3\xa9y");  // \xc3\xa9 (e-acute) is valid and kept
  const Bytes written = write_pickle(value);
  // EMPTY_DICT, SHORT_BINUNICODE 4 "a" EF BF BD, SHORT_BINUNICODE 7 "x" EF BF BD C3 A9 "y", SETITEM
  CHECK(written == Bytes{0x80, 0x04, '}',  0x8c, 4,    'a',  0xef, 0xbf, 0xbd, 0x8c,
                         7,    'x',  0xef, 0xbf, 0xbd, 0xc3, 0xa9, 'y',  's',  '.'});
  CHECK(read_pickle(written, "t.pickle") == json::parse("{\"a\\ufffd\": \"x\\ufffd\\u00e9y\"}"));
}

TEST_CASE("every file in the fuzz corpus decodes or throws InputError", "[quick][traces][pickle]") {
  const auto dir = vramsim::test::test_data("fuzz_pickle_corpus");
  REQUIRE(std::filesystem::is_directory(dir));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CAPTURE(entry.path().filename().string());
    ++files;
    try {
      read_pickle(read_file(entry.path()), entry.path().filename().string());
    } catch (const InputError&) {
    }
  }
  CHECK(files >= 10);
}

TEST_CASE("read_pickle matches the JSON conversions of the real snapshots", "[slow][traces][pickle]") {
  if (!vramsim::test::shared_or_skip("read_pickle matches the JSON conversions of the real snapshots")) {
    return;
  }
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(vramsim::test::shared_real_traces())) {
    if (entry.path().extension() != ".pickle") {
      continue;
    }
    CAPTURE(entry.path().filename().string());
    ++files;
    const Bytes bytes = read_file(entry.path());
    const json snapshot = read_pickle(bytes, entry.path().filename().string());
    const Bytes converted = read_file(entry.path().string() + ".json");
    // And what load_snapshot reads, in place (PickleDocument, frames not kept), equals the Snapshot read from
    // the JSON conversion.
    const vramsim::Snapshot from_json = vramsim::load_snapshot(entry.path().string() + ".json");
    CHECK(vramsim::snapshot_from_pickle(bytes, from_json.source) == from_json);
    json expected = json::parse(converted.begin(), converted.end());
    expected.erase("_conversion_note");
    expected.erase("_source");
    std::vector<std::string> keys;
    std::vector<std::string> expected_keys;
    for (const auto& [key, unused] : snapshot.items()) {
      keys.push_back(key);
    }
    for (const auto& [key, unused] : expected.items()) {
      expected_keys.push_back(key);
    }
    CHECK(keys == expected_keys);
    CHECK(snapshot["segments"].size() == expected["segments"].size());
    const json& traces = snapshot["device_traces"];
    const json& expected_traces = expected["device_traces"];
    REQUIRE(traces.size() == expected_traces.size());
    for (std::size_t device = 0; device < traces.size(); ++device) {
      REQUIRE(traces[device].size() == expected_traces[device].size());
      if (traces[device].empty()) {
        continue;
      }
      for (const std::size_t i : {std::size_t{0}, traces[device].size() - 1}) {
        CHECK(traces[device][i]["action"] == expected_traces[device][i]["action"]);
        CHECK(traces[device][i]["addr"] == expected_traces[device][i]["addr"]);
        CHECK(traces[device][i]["size"] == expected_traces[device][i]["size"]);
      }
    }
  }
  CHECK(files == 27);  // the pickles among the 29 recordings of shared/traces/real/INDEX.json
}

TEST_CASE("read_pickle skips the values of listed keys but still checks them", "[quick][traces][pickle]") {
  // pickle.dumps({'a': [1, (2, 3)]}, protocol=4) again: skipping "a" keeps the key with an empty list.
  static constexpr std::string_view kSkip[] = {"a"};
  CHECK(read_pickle(kSmallP4, "t.pickle", kSkip) == json::parse(R"({"a": []})"));
  CHECK(read_pickle(kSmallP4, "t.pickle") == json::parse(R"({"a": [1, [2, 3]]})"));
  // A skipped value is still decoded: a GLOBAL inside it is rejected as anywhere else.
  Bytes evil = kSmallP4;
  evil[20] = 'c';  // the BININT1 at byte 20 (inside the skipped list) becomes GLOBAL
  CHECK_THROWS_WITH(read_pickle(evil, "t.pickle", kSkip), Catch::Contains("byte 20"));
}
