// PickleDocument / PickleValue: a decoded pickle read in place, and snapshot_from_pickle, which reads a
// snapshot through it instead of through its JSON form. Expected values are what Python's pickle.loads
// returns for the same bytes (checked with python3 when the bytes were written), what the independent
// .pickle.json conversions of the real snapshots hold, or what the JSON path reports for the same content.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

using nlohmann::json;
using vramsim::InputError;
using vramsim::PickleDocument;
using vramsim::PickleValue;
using Bytes = std::vector<std::uint8_t>;

namespace {

constexpr std::string_view kFrames[] = {"frames"};

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// pickle.dumps({'a': [1, (2, 3)]}, protocol=4)
const Bytes kSmallP4 = {0x80, 0x04, 0x95, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                        0x7d, 0x94, 0x8c, 0x01, 0x61, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01,
                        0x4b, 0x02, 0x4b, 0x03, 0x86, 0x94, 0x65, 0x73, 0x2e};

// {'frames': L, 'x': L} with L = [7], built right after the key "frames" and memoised (slot 0), then
// referenced again under "x": PROTO 4, EMPTY_DICT, MARK, SHORT_BINUNICODE "frames", EMPTY_LIST (byte 12),
// MEMOIZE, BININT1 7, APPEND, SHORT_BINUNICODE "x", BINGET 0, SETITEMS, STOP. pickle.loads: the dict above.
const Bytes kFramesAlsoRead = {0x80, 0x04, '}', '(', 0x8c, 6,    'f', 'r', 'a', 'm', 'e', 's',
                               ']',  0x94, 'K', 7,   'a',  0x8c, 1,   'x', 'h', 0,   'u', '.'};
// The same list built under "x" first and referenced under "frames": {'x': [7], 'frames': [7]}.
const Bytes kFramesSharedLater = {0x80, 0x04, '}', '(', 0x8c, 1,   'x', ']', 0x94, 'K', 7,   'a',
                                  0x8c, 6,    'f', 'r', 'a',  'm', 'e', 's', 'h',  0,   'u', '.'};

}  // namespace

TEST_CASE("PickleValue reads a decoded pickle in JSON's terms", "[quick][traces][pickle]") {
  const PickleDocument doc(kSmallP4, "t.pickle");
  const PickleValue root = doc.root();
  CHECK(root.is_object());
  CHECK(root.type_name() == "object");
  REQUIRE(root.find("a"));
  CHECK_FALSE(root.find("b"));
  const PickleValue a = *root.find("a");
  REQUIRE(a.is_array());
  REQUIRE(a.size() == 2);
  CHECK(a.at(0).is_number_unsigned());
  CHECK(a.at(0).as_uint() == 1);
  CHECK(a.at(0).type_name() == "integer");
  CHECK(a.at(1).type_name() == "array");  // a tuple
  CHECK(a.at(1).at(1).as_int() == 3);
  CHECK(doc.to_json() == json::parse(R"({"a": [1, [2, 3]]})"));

  // {'a': 1, 'a': 2} as SETITEMS writes a repeated key: Python keeps the last.
  const Bytes repeated = {0x80, 0x04, '}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'a', 'K', 2, 'u', '.'};
  const PickleDocument twice(repeated, "t.pickle");
  CHECK(twice.root().find("a")->as_uint() == 2);
  std::vector<std::string> keys;
  twice.root().for_each_member([&keys](std::string_view key, const PickleValue&) { keys.emplace_back(key); });
  CHECK(keys == std::vector<std::string>{"a", "a"});
}

TEST_CASE("values under skipped keys are not kept, and may not be read elsewhere",
          "[quick][traces][pickle]") {
  CHECK(vramsim::read_pickle(kFramesAlsoRead, "t.pickle") == json::parse(R"({"frames": [7], "x": [7]})"));
  CHECK(error_of([] { PickleDocument(kFramesAlsoRead, "t.pickle", kFrames); }) ==
        "t.pickle: byte 12: this list is stored under a key that is not read and also where values are read; "
        "vramsim does not keep such values");
  // Built where it is read, it is kept; under "frames" it still reads as the empty list.
  CHECK(vramsim::read_pickle(kFramesSharedLater, "t.pickle", kFrames) ==
        json::parse(R"({"frames": [], "x": [7]})"));
}

TEST_CASE("snapshot_from_pickle reports what the JSON reader reports", "[quick][traces][pickle]") {
  // One snapshot, damaged one way at a time, written both as a pickle and as JSON: the in-place pickle reader
  // and the JSON reader must agree on the message.
  const json good = json::parse(R"({"segments": [{"device": 0, "address": 1048576, "total_size": 2097152,
      "stream": 0, "segment_type": "small", "blocks": [{"size": 2097152, "requested_size": 100,
      "state": "active_allocated"}]}], "device_traces": [[{"action": "alloc", "addr": 1048576,
      "size": 2097152, "stream": 0, "time_us": 5, "frames": [{"filename": "f.py", "line": 1, "name": "g"}]}]],
      "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": null, "max_split_size": -1,
      "garbage_collection_threshold": 0.0, "expandable_segments": false,
      "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0, "8": 0, "16": 0, "32": 0, "64": 0, "128": 0,
      "256": 0, "512": 0, "1024": 0, "2048": 0, "4096": 0, "8192": 0, "16384": 0, "32768": 0}}})");
  const auto from_pickle = [](const json& value) {
    return vramsim::snapshot_from_pickle(vramsim::write_pickle(value), "s");
  };
  CHECK(from_pickle(good) == vramsim::snapshot_from_json(good, "s"));

  std::vector<json> damaged;
  damaged.push_back(good);
  damaged.back()["segments"][0]["blocks"][0]["size"] = -5;
  damaged.push_back(good);
  damaged.back()["segments"][0].erase("stream");
  damaged.push_back(good);
  damaged.back()["segments"][0]["segment_type"] = "medium";
  damaged.push_back(good);
  damaged.back()["device_traces"][0][0]["action"] = "explode";
  damaged.push_back(good);
  damaged.back()["device_traces"][0][0].erase("addr");
  damaged.push_back(good);
  damaged.back()["device_traces"][0][0]["size"] = "big";
  damaged.push_back(good);
  damaged.back()["device_traces"][0][0]["time_us"] = 1.5;
  damaged.push_back(good);
  damaged.back()["allocator_settings"]["roundup_power2_divisions"]["3"] = 1;
  damaged.push_back(good);
  damaged.back()["allocator_settings"]["garbage_collection_threshold"] = 2;
  damaged.push_back(good);
  damaged.back()["segments"] = json::object();
  for (const json& value : damaged) {
    CAPTURE(value.dump());
    const std::string expected = error_of([&value] { vramsim::snapshot_from_json(value, "s"); });
    REQUIRE(expected != "no error");
    CHECK(error_of([&] { from_pickle(value); }) == expected);
  }
}

TEST_CASE("snapshot_from_pickle survives damaged snapshots", "[quick][traces][pickle]") {
  // Truncations every 7,919 bytes and 250 single-byte changes of a real snapshot (traces/samples): each
  // either reads or ends in one InputError naming the file, never another exception or a crash.
  const Bytes sample =
      read_file(vramsim::test::source_dir() / "traces" / "samples" / "MAGMA27_memory_snapshot.pickle");
  REQUIRE(sample.size() > 1000);
  const auto outcome = [](const Bytes& bytes) {
    try {
      vramsim::snapshot_from_pickle(bytes, "d.pickle");
    } catch (const InputError& e) {
      return std::string_view(e.what()).starts_with("d.pickle: ") ? 1 : 2;
    }
    return 0;
  };
  CHECK(outcome(sample) == 0);
  for (std::size_t cut = 0; cut < sample.size(); cut += 7919) {
    // a cut pickle has no STOP
    CHECK(outcome(Bytes(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(cut))) == 1);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 250; ++i) {
    Bytes damaged = sample;
    damaged[rng() % damaged.size()] = static_cast<std::uint8_t>(rng());
    CHECK(outcome(damaged) != 2);
  }
}
