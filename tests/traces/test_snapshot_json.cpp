// snapshot_from_json / snapshot_to_json: hand-made dicts with values computed by hand, every error path with
// its exact message, round trips, and robustness against arbitrary JSON values.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

using nlohmann::json;

constexpr Bytes kA = 0x7f0000000000;  // the small segment of tests/data/snap_small.json
constexpr Bytes kB = 0x7f0000200000;  // its large segment

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// A valid 2 MiB small segment at 0x1000000: [512 allocated, requested 100][2096640 free].
json base_segment() {
  json blocks = json::array();
  blocks.push_back(
      {{"address", 0x1000000}, {"size", 512}, {"requested_size", 100}, {"state", "active_allocated"}});
  blocks.push_back({{"address", 0x1000200}, {"size", 2096640}, {"requested_size", 0}, {"state", "inactive"}});
  return {{"device", 0},
          {"address", 0x1000000},
          {"total_size", 2097152},
          {"allocated_size", 512},
          {"active_size", 512},
          {"requested_size", 100},
          {"stream", 0},
          {"segment_type", "small"},
          {"segment_pool_id", json::array({0, 0})},
          {"is_expandable", false},
          {"frames", json::array()},
          {"blocks", std::move(blocks)}};
}

json base_root() {
  json event = {{"action", "alloc"}, {"addr", 0x1000000}, {"size", 100}, {"stream", 0}, {"time_us", 5}};
  json trace = json::array();
  trace.push_back(std::move(event));
  json traces = json::array();
  traces.push_back(std::move(trace));
  json segments = json::array();
  segments.push_back(base_segment());
  return {{"segments", std::move(segments)}, {"device_traces", std::move(traces)}};
}

std::string error_of(const json& root) {
  try {
    snapshot_from_json(root, "x.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// The Snapshot of tests/data/snap_small.json, written out by hand.
Snapshot expected_small(const std::string& source) {
  Snapshot s;
  s.source = source;
  s.segments.push_back(SnapshotSegment{.device = 0,
                                       .address = kA,
                                       .total_size_bytes = 2097152,
                                       .allocated_bytes = 512,
                                       .active_bytes = 512 + 1024,
                                       .requested_bytes = 500 + 1000,
                                       .stream = 0,
                                       .is_small_pool = true,
                                       .blocks = {{kA, 512, 500, BlockState::kActiveAllocated},
                                                  {kA + 512, 1024, 1000, BlockState::kActivePendingFree},
                                                  {kA + 1536, 2097152 - 1536, 0, BlockState::kInactive}}});
  s.segments.push_back(
      SnapshotSegment{.device = 0,
                      .address = kB,
                      .total_size_bytes = 20971520,
                      .allocated_bytes = 5242880,
                      .active_bytes = 5242880,
                      .requested_bytes = 5000000,
                      .stream = 7,
                      .is_small_pool = false,
                      .blocks = {{kB, 5242880, 5000000, BlockState::kActiveAllocated},
                                 {kB + 5242880, 20971520 - 5242880, 0, BlockState::kInactive}}});
  s.strings = {"", "linear", "activation", "forward", "N/A"};
  s.device_traces.resize(1);
  // The tagged alloc's compile_context "N/A" (its user_metadata "" is none).
  s.device_traces[0].notes = {EventNote{.event = 1, .metadata_tag = kNoTag, .context_tag = 4}};
  s.device_traces[0].events = {
      {TraceAction::kSegmentAlloc, kB, 20971520, 7, 1000000},
      {TraceAction::kAlloc, kB, 5000000, 7, 1001000, 1, 2, 3, 0},
      {TraceAction::kAlloc, kA, 500, 0, 1002000},
      {TraceAction::kAlloc, kA + 512, 1000, 0, 1003000},
      {TraceAction::kFreeRequested, kA + 512, 1000, 0, 1004000},
      {TraceAction::kOom, 123456, 104857600, 0, 1005000},
  };
  RecordedAllocatorSettings settings;
  settings.alloc_conf = "max_split_size_mb:128, garbage_collection_threshold:0.6";
  settings.max_split_size = 134217728;
  settings.garbage_collection_threshold = 0.6;
  settings.roundup_power2_divisions = {4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 0, 0, 0, 0, 0, 0};
  s.allocator_settings = settings;
  return s;
}

// Every node of `value` as a JSON pointer (the documents here are small).
void collect_pointers(const json& value, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      collect_pointers(child, at / key, out);
    }
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      collect_pointers(value[i], at / i, out);
    }
  }
}

json deeply_nested(int depth) {
  json value = json::array();
  for (int i = 0; i < depth; ++i) {
    json outer = json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

}  // namespace

TEST_CASE("snapshot_from_json reads a hand-made dict with values computed by hand", "[quick][traces]") {
  const std::string path = test::test_data("snap_small.json").string();
  const Snapshot s = snapshot_from_json(read_json_file(path), path);
  CHECK(s == expected_small(path));
}

TEST_CASE("snapshot_from_json skips a pinned-host section (PyTorch 2.14 record_pinned_host_memory)",
          "[quick][traces]") {
  // pytorch/pytorch#182407: host memory comes in the snapshot dict's own host_segments / host_traces keys. Their
  // entries' fields are not known here (docs/replay.md), so any content must leave the device reading as it was.
  const std::string path = test::test_data("snap_small.json").string();
  json root = read_json_file(path);
  root["host_segments"] = json::array({json{{"address", 4096}, {"total_size", 8192}, {"blocks", json::array()}}});
  root["host_traces"] = json::array({json{{"action", "alloc"}, {"addr", 4096}, {"size", 100}}});
  CHECK(snapshot_from_json(root, path) == expected_small(path));
}

TEST_CASE("snapshot_from_json recomputes block addresses and segment sums", "[quick][traces]") {
  const Snapshot s = snapshot_from_json(base_root(), "x.json");
  REQUIRE(s.segments.size() == 1);
  const SnapshotSegment& seg = s.segments[0];
  CHECK(seg.address == 0x1000000);
  REQUIRE(seg.blocks.size() == 2);
  CHECK(seg.blocks[1].address == 0x1000000 + 512);
  CHECK(seg.allocated_bytes == 512);
  CHECK(seg.active_bytes == 512);
  CHECK(seg.requested_bytes == 100);
  CHECK(seg.is_small_pool);
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE(s.device_traces[0].events.size() == 1);
  CHECK(s.device_traces[0].events[0].time_ns == 5000);
  CHECK(s.has_final_state);
  CHECK_FALSE(s.allocator_settings.has_value());
  CHECK(s.source == "x.json");
}

TEST_CASE("snapshot_from_json accepts the legacy list and PyTorch 2.0 blocks", "[quick][traces]") {
  SECTION("a bare list of segments: no traces, one empty trace per device") {
    json seg = base_segment();
    seg["device"] = 2;
    const Snapshot s = snapshot_from_json(json::array({seg}), "x.json");
    CHECK(s.segments.size() == 1);
    CHECK(s.device_traces.size() == 3);
    for (const DeviceTrace& trace : s.device_traces) {
      CHECK(trace.events.empty());
    }
  }
  SECTION("2.0 blocks have history, no address; segments lack is_expandable, pool id and segment_type") {
    json small = base_segment();
    json large = base_segment();
    for (json* seg : {&small, &large}) {
      seg->erase("is_expandable");
      seg->erase("segment_pool_id");
      seg->erase("segment_type");
      seg->erase("frames");
      for (json& block : (*seg)["blocks"]) {
        block.erase("address");
        block["history"] = json::array({{{"addr", 1}, {"real_size", 2}, {"frames", json::array()}}});
      }
    }
    large["address"] = 0x4000000;
    large["total_size"] = 20971520;
    large["blocks"][1]["size"] = 20971520 - 512;
    const Snapshot s =
        snapshot_from_json(json{{"segments", {small, large}}, {"device_traces", {json::array()}}}, "y");
    REQUIRE(s.segments.size() == 2);
    CHECK(s.segments[0].is_small_pool);
    CHECK_FALSE(s.segments[1].is_small_pool);
    CHECK_FALSE(s.segments[1].is_expandable);
    CHECK(s.segments[1].pool_id_first == 0);
    CHECK(s.segments[1].blocks[1].address == 0x4000000 + 512);
  }
}

TEST_CASE("snapshot_from_json reads traces, settings and order", "[quick][traces]") {
  json root = base_root();
  json& trace = root["device_traces"][0];
  trace.push_back({{"action", "annotate"}, {"addr", 0}, {"size", 0}, {"stream", 0}});  // skipped
  trace.push_back(
      {{"action", "oom"}, {"device_free", 4096}, {"size", 1 << 30}, {"stream", 3}, {"pool_id", {0, 0}}});
  trace.push_back({{"action", "segment_free"}, {"addr", 0x1000000}, {"size", 2097152}, {"stream", 0}});
  json seg2 = base_segment();  // listed first but at a higher address: the reader sorts
  seg2["address"] = 0x400000;
  for (json& block : seg2["blocks"]) {
    block.erase("address");
  }
  root["segments"].insert(root["segments"].begin(), seg2);
  json divisions = json::object();
  for (int i = 0; i < 16; ++i) {
    divisions[std::to_string(1 << i)] = i < 4 ? 8 : 1;
  }
  root["allocator_settings"] = {{"PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:[8:8,>:1]"},
                                {"max_split_size", -1},
                                {"garbage_collection_threshold", 0},
                                {"expandable_segments", true},
                                {"pinned_num_register_threads", 1},
                                {"roundup_power2_divisions", divisions}};
  const Snapshot s = snapshot_from_json(root, "x.json");
  REQUIRE(s.segments.size() == 2);
  CHECK(s.segments[0].address == 0x400000);
  CHECK(s.segments[1].address == 0x1000000);
  const std::vector<TraceEvent>& events = s.device_traces[0].events;
  REQUIRE(events.size() == 3);
  CHECK(events[0].action == TraceAction::kAlloc);
  CHECK(events[1] == TraceEvent{TraceAction::kOom, 4096, Bytes{1} << 30, 3, 0});
  CHECK(events[2].action == TraceAction::kSegmentFree);
  REQUIRE(s.allocator_settings.has_value());
  CHECK(s.allocator_settings->alloc_conf == "roundup_power2_divisions:[8:8,>:1]");
  CHECK(s.allocator_settings->max_split_size == -1);
  CHECK(s.allocator_settings->expandable_segments);
  CHECK(s.allocator_settings->roundup_power2_divisions ==
        std::array<std::uint64_t, 16>{8, 8, 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("snapshot_from_json errors name the file, the JSON path and the problem", "[quick][traces]") {
  using Mutation = std::function<void(json&)>;
  const std::vector<std::pair<Mutation, std::string>> cases = {
      {[](json& r) { r = "hello"; },
       "x.json: expected a snapshot dict or a list of segments at the top level, got string"},
      {[](json& r) { r = json::object(); }, "x.json: missing key \"segments\""},
      {[](json& r) { r["segments"] = json::object(); }, "x.json: segments: expected a list, got object"},
      {[](json& r) { r["segments"][0] = nullptr; }, "x.json: segments[0]: expected an object, got null"},
      {[](json& r) { r["segments"][0]["blocks"][0]["size"] = "512"; },
       "x.json: segments[0].blocks[0].size: expected a non-negative integer, got string"},
      {[](json& r) { r["segments"][0]["blocks"][0]["size"] = -512; },
       "x.json: segments[0].blocks[0].size: expected a non-negative integer, got -512"},
      {[](json& r) { r["segments"][0]["blocks"][0]["size"] = std::int64_t{1} << 60; },
       "x.json: segments[0].blocks[0].size: expected a non-negative integer below 2^60, got "
       "1152921504606846976"},
      {[](json& r) { r["segments"][0]["blocks"][0]["size"] = 512.0; },
       "x.json: segments[0].blocks[0].size: expected a non-negative integer, got float"},
      {[](json& r) { r["segments"][0]["blocks"][0]["size"] = 0; },
       "x.json: segments[0].blocks[0].size: a block cannot be empty"},
      {[](json& r) { r["segments"][0]["blocks"][1]["state"] = "free"; },
       "x.json: segments[0].blocks[1].state: unknown block state \"free\" (expected active_allocated, "
       "active_pending_free or inactive)"},
      {[](json& r) { r["segments"][0]["blocks"][1]["size"] = 1024; },
       "x.json: segments[0].blocks: the blocks of segment 0x1000000 cover 1536 of its 2097152 bytes"},
      {[](json& r) { r["segments"][0]["blocks"][1]["size"] = 2097152; },
       "x.json: segments[0].blocks[1].size: block 0x1000200 + 2097152 extends past the end of its segment "
       "(0x1200000)"},
      {[](json& r) { r["segments"][0]["blocks"][1]["address"] = 0x1000400; },
       "x.json: segments[0].blocks[1].address: recorded address 0x1000400 disagrees with segment address + "
       "earlier block sizes (0x1000200)"},
      {[](json& r) { r["segments"][0]["allocated_size"] = 1024; },
       "x.json: segments[0].allocated_size: recorded 1024 disagrees with the blocks (512)"},
      {[](json& r) { r["segments"][0]["active_size"] = 0; },
       "x.json: segments[0].active_size: recorded 0 disagrees with the blocks (512)"},
      {[](json& r) { r["segments"][0]["requested_size"] = 512; },
       "x.json: segments[0].requested_size: recorded 512 disagrees with the blocks (100)"},
      {[](json& r) { r["segments"][0].erase("total_size"); },
       "x.json: segments[0]: missing key \"total_size\""},
      {[](json& r) { r["segments"][0]["total_size"] = 0; },
       "x.json: segments[0].total_size: a segment cannot be empty"},
      {[](json& r) { r["segments"][0]["blocks"][0].erase("state"); },
       "x.json: segments[0].blocks[0]: missing key \"state\""},
      {[](json& r) { r["segments"][0]["segment_type"] = "medium"; },
       "x.json: segments[0].segment_type: expected \"small\" or \"large\", got \"medium\""},
      {[](json& r) { r["segments"][0]["segment_pool_id"] = {1}; },
       "x.json: segments[0].segment_pool_id: expected a pair of integers, got a list of 1"},
      {[](json& r) { r["segments"][0]["is_expandable"] = 1; },
       "x.json: segments[0].is_expandable: expected true or false, got integer"},
      {[](json& r) { r["segments"][0]["device"] = 5000; },
       "x.json: segments[0].device: device index 5000 is out of range (below 1024 expected)"},
      {[](json& r) { r["segments"][0]["address"] = std::uint64_t{1} << 63; },
       "x.json: segments[0].address: expected a non-negative integer below 2^63, got 9223372036854775808"},
      {[](json& r) {
         json seg = base_segment();
         seg["address"] = 0x1100000;
         for (json& block : seg["blocks"]) {
           block.erase("address");
         }
         r["segments"].push_back(seg);
       },
       "x.json: segments at 0x1000000 (2097152 bytes) and 0x1100000 on device 0 overlap"},
      {[](json& r) { r["device_traces"] = {json::object()}; },
       "x.json: device_traces[0]: expected a list, got object"},
      {[](json& r) { r["device_traces"][0][0] = 1; },
       "x.json: device_traces[0][0]: expected an object, got integer"},
      {[](json& r) { r["device_traces"][0][0]["action"] = "malloc"; },
       "x.json: device_traces[0][0].action: unknown action \"malloc\""},
      {[](json& r) {
         r["device_traces"][0][0] = {{"action", "oom"}, {"size", 1}, {"stream", 0}};
       },
       "x.json: device_traces[0][0]: missing key \"device_free\""},
      {[](json& r) { r["device_traces"][0][0].erase("addr"); },
       "x.json: device_traces[0][0]: missing key \"addr\""},
      {[](json& r) { r["device_traces"][0][0]["time_us"] = "now"; },
       "x.json: device_traces[0][0].time_us: expected a non-negative integer, got string"},
      {[](json& r) { r["device_traces"][0][0]["layer"] = "3"; },
       "x.json: device_traces[0][0].layer: expected a non-negative integer, got string"},
      {[](json& r) { r["device_traces"][0][0]["layer"] = nullptr; },
       "x.json: device_traces[0][0].layer: expected a non-negative integer, got null"},
      {[](json& r) { r["device_traces"][0][0]["layer"] = 1.5; },
       "x.json: device_traces[0][0].layer: expected a non-negative integer, got float"},
      {[](json& r) { r["device_traces"][0][0]["layer"] = -1; },
       "x.json: device_traces[0][0].layer: expected a non-negative integer, got -1"},
      {[](json& r) { r["device_traces"][0][0]["layer"] = std::int64_t{1} << 31; },
       "x.json: device_traces[0][0].layer: expected a non-negative integer below 2^31, got 2147483648"},
      {[](json& r) { r["device_traces"][0][0]["phase"] = 2; },
       "x.json: device_traces[0][0].phase: expected a string, got integer"},
      {[](json& r) { r["device_traces"][0][0]["phase"] = nullptr; },
       "x.json: device_traces[0][0].phase: expected a string, got null"},
      {[](json& r) { r["device_traces"][0][0]["phase"] = ""; },
       "x.json: device_traces[0][0].phase: expected a phase name, got an empty string"},
      {[](json& r) {
         r["allocator_settings"] = {{"roundup_power2_divisions", {{"3", 1}}}};
       },
       "x.json: allocator_settings.roundup_power2_divisions: unknown interval \"3\" (expected \"1\", \"2\", "
       "\"4\", "
       "..., \"32768\")"},
      {[](json& r) {
         r["allocator_settings"] = {{"garbage_collection_threshold", 2.0}};
       },
       "x.json: allocator_settings.garbage_collection_threshold: expected a fraction in [0, 1], got 2"},
      {[](json& r) {
         r["allocator_settings"] = {{"max_split_size", -2}};
       },
       "x.json: allocator_settings.max_split_size: expected -1 (unlimited) or a size, got -2"},
      {[](json& r) { r["vramsim_has_final_state"] = "no"; },
       "x.json: vramsim_has_final_state: expected true or false, got string"},
      {[](json& r) {
         json seg = base_segment();
         seg["blocks"][0]["size"] = "x";
         r = json::array({seg});
       },
       "x.json: [0].blocks[0].size: expected a non-negative integer, got string"},
  };
  for (const auto& [mutate, expected] : cases) {
    json root = base_root();
    mutate(root);
    CHECK(error_of(root) == expected);
  }
}

TEST_CASE("snapshot_to_json writes the PyTorch dict and round-trips", "[quick][traces]") {
  const std::string path = test::test_data("snap_small.json").string();
  const Snapshot s = snapshot_from_json(read_json_file(path), path);
  const json out = snapshot_to_json(s);

  const json& seg = out["segments"][0];
  for (const char* key :
       {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
        "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}) {
    CHECK(seg.contains(key));
  }
  CHECK(seg["active_size"] == 1536);
  CHECK(seg["requested_size"] == 1500);
  CHECK(seg["segment_pool_id"] == json::array({0, 0}));
  CHECK(seg["blocks"][1] == json{{"address", kA + 512},
                                 {"size", 1024},
                                 {"requested_size", 1000},
                                 {"state", "active_pending_free"},
                                 {"frames", json::array()}});
  const json& oom = out["device_traces"][0][5];
  CHECK(oom == json{{"action", "oom"},
                    {"device_free", 123456},
                    {"size", 104857600},
                    {"stream", 0},
                    {"time_us", 1005},
                    {"frames", json::array()}});
  CHECK(out["device_traces"][0][1]["op"] == "linear");
  CHECK(out["device_traces"][0][1]["category"] == "activation");
  CHECK(out["device_traces"][0][1]["phase"] == "forward");
  CHECK(out["device_traces"][0][1]["layer"] == 0);
  CHECK(out["device_traces"][0][1]["layer"].is_number_integer());
  CHECK_FALSE(out["device_traces"][0][2].contains("phase"));
  CHECK_FALSE(out["device_traces"][0][2].contains("layer"));
  CHECK(out["allocator_settings"]["roundup_power2_divisions"]["128"] == 2);
  CHECK(out["allocator_settings"]["roundup_power2_divisions"].size() == 16);
  CHECK_FALSE(out.contains("vramsim_has_final_state"));

  const Snapshot back = snapshot_from_json(out, path);
  CHECK(back == s);
  CHECK(snapshot_to_json(back).dump() == out.dump());  // deterministic bytes

  Snapshot generated;
  generated.has_final_state = false;
  generated.device_traces.resize(1);
  generated.strings = {"", "backward"};
  generated.device_traces[0].events.push_back({TraceAction::kAlloc, 0x200000, 100, 0, 2000});
  generated.device_traces[0].events.push_back({TraceAction::kAlloc, 0x400000, 100, 0, 3000, 0, 0, 1, 5});
  const json gen_json = snapshot_to_json(generated);
  CHECK(gen_json["vramsim_has_final_state"] == false);
  CHECK(gen_json["device_traces"][0][1] == json{{"action", "alloc"},
                                                {"addr", 0x400000},
                                                {"size", 100},
                                                {"stream", 0},
                                                {"time_us", 3},
                                                {"frames", json::array()},
                                                {"phase", "backward"},
                                                {"layer", 5}});
  CHECK(snapshot_from_json(gen_json, "") == generated);
  // JSON holds microseconds: sub-microsecond times are truncated.
  generated.device_traces[0].events[0].time_ns = 2999;
  CHECK(snapshot_to_json(generated)["device_traces"][0][0]["time_us"] == 2);
}

TEST_CASE("snapshot_from_json never crashes on arbitrary values", "[quick][traces]") {
  json root = base_root();
  root["allocator_settings"] = {{"PYTORCH_CUDA_ALLOC_CONF", ""},
                                {"max_split_size", -1},
                                {"garbage_collection_threshold", 0.5},
                                {"expandable_segments", false},
                                {"roundup_power2_divisions", {{"1", 0}, {"32768", 2}}}};
  root["device_traces"][0].push_back({{"action", "oom"}, {"device_free", 1}, {"size", 2}, {"stream", 0}});
  root["device_traces"][0][0]["phase"] = "forward";
  root["device_traces"][0][0]["layer"] = 1;
  std::vector<json::json_pointer> pointers;
  collect_pointers(root, json::json_pointer(), pointers);
  const std::vector<json> junk = {nullptr,
                                  true,
                                  -1,
                                  0,
                                  1.5,
                                  std::numeric_limits<std::uint64_t>::max(),
                                  "text\n",
                                  json::array(),
                                  json::object(),
                                  json::array({nullptr}),
                                  deeply_nested(1000)};
  int accepted = 0;
  int rejected = 0;
  for (const json::json_pointer& at : pointers) {
    for (const json& value : junk) {
      json mutated = root;
      mutated[at] = value;
      try {
        snapshot_from_json(mutated, "x.json");
        ++accepted;
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
        ++rejected;
      }
    }
  }
  CHECK(rejected > accepted);  // most junk is rejected; some lands in ignored or lenient places
  CHECK(error_of(deeply_nested(100000)) == "x.json: [0]: expected an object, got array");
}

}  // namespace vramsim
