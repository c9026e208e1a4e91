// Snapshot content PyTorch added after 2.5: external_annotations (record_function ranges,
// pytorch/pytorch#130964), user_metadata on trace entries (torch.cuda.memory._set_memory_metadata,
// pytorch/pytorch#165490), compile_context (_record_memory_history(compile_context=True)), "annotate" entries
// (torch.cuda.memory._annotate_memory / _annotate_tensor, pytorch/pytorch#190575) and snapshots taken with
// include_traces=False (pytorch/pytorch#172672: segments only). Each is read from the dict (JSON and pickle)
// and from .vtrace, and written back by every writer: read -> write -> read gives the same Snapshot.
// Expected values are the hand-made inputs below, read by eye; the real file's count and first entry were
// read with Python's json module from shared/traces/real/kkaitlyn111_memory_small_forward.pickle.json.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/trace_io.h"

using namespace vramsim;

namespace {

// One segment of 2 MiB with a 512-byte live block; a trace of alloc (with user_metadata and compile_context),
// an annotate entry on that block, a free_requested with user_metadata "" (= none), and two
// external_annotations.
const char* const kDict = R"({
  "segments": [{"device": 0, "address": 1048576, "total_size": 2097152, "allocated_size": 512,
                "active_size": 512, "requested_size": 500, "stream": 0, "segment_type": "small",
                "segment_pool_id": [0, 0], "is_expandable": false, "frames": [],
                "blocks": [{"address": 1048576, "size": 512, "requested_size": 500, "state": "active_allocated",
                            "frames": []},
                           {"address": 1049088, "size": 2096640, "requested_size": 0, "state": "inactive",
                            "frames": []}]}],
  "device_traces": [[
    {"action": "segment_alloc", "addr": 1048576, "size": 2097152, "stream": 0, "time_us": 10,
     "compile_context": "N/A"},
    {"action": "alloc", "addr": 1048576, "size": 500, "stream": 0, "time_us": 11,
     "user_metadata": "{\"step\": 3}", "compile_context": "0/1 forward"},
    {"action": "annotate", "addr": 1048576, "size": 500, "stream": 0, "time_us": 12,
     "user_metadata": "saved for backward", "frames": [{"name": "f", "filename": "x.py", "line": 1,
                                                         "fx_node_op": "call_function"}]},
    {"action": "alloc", "addr": 1049088, "size": 100, "stream": 0, "time_us": 13, "user_metadata": ""},
    {"action": "free_requested", "addr": 1049088, "size": 100, "stream": 0, "time_us": 14, "user_metadata": null},
    {"action": "free_completed", "addr": 1049088, "size": 100, "stream": 0, "time_us": 14}
  ]],
  "external_annotations": [
    {"stage": "START", "name": "## forward ##", "device": 0, "time_us": 9},
    {"stage": "END", "name": "## forward ##", "device": 0, "time_us": 15}
  ]
})";

void check_hand_made(const Snapshot& s) {
  REQUIRE(s.device_traces.size() == 1);
  const DeviceTrace& t = s.device_traces[0];
  REQUIRE(t.events.size() == 5);  // the annotate entry is not an event
  REQUIRE(t.annotations.size() == 1);
  CHECK(t.annotations[0].before_event == 2);  // between the first alloc and the second
  CHECK(t.annotations[0].addr == 1048576);
  CHECK(t.annotations[0].size_bytes == 500);
  CHECK(t.annotations[0].time_ns == 12000);
  CHECK(s.strings[t.annotations[0].metadata_tag] == "saved for backward");
  CHECK(t.annotations[0].context_tag == kNoTag);
  // Notes on events 0 (compile_context "N/A") and 1 (both); "" and null are no metadata.
  REQUIRE(t.notes.size() == 2);
  CHECK(t.notes[0].event == 0);
  CHECK(t.notes[0].metadata_tag == kNoTag);
  CHECK(s.strings[t.notes[0].context_tag] == "N/A");
  CHECK(t.notes[1].event == 1);
  CHECK(s.strings[t.notes[1].metadata_tag] == "{\"step\": 3}");
  CHECK(s.strings[t.notes[1].context_tag] == "0/1 forward");
  REQUIRE(s.external_annotations.size() == 2);
  CHECK(s.external_annotations[0].device == 0);
  CHECK(s.external_annotations[0].time_ns == 9000);
  CHECK(s.external_annotations[0].metadata ==
        std::map<std::string, std::string>{{"name", "## forward ##"}, {"stage", "START"}});
  CHECK(s.external_annotations[1].metadata.at("stage") == "END");
}

Snapshot reread(const Snapshot& s, TraceFormat format) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       (std::string("vramsim_annotations_roundtrip.") + std::string(trace_format_name(format))))
          .string();
  save_snapshot(s, path, format);
  Snapshot back = load_snapshot(path);
  std::filesystem::remove(path);
  back.source = s.source;
  return back;
}

}  // namespace

TEST_CASE("annotations, user_metadata and compile_context are read from the snapshot dict",
          "[quick][traces][annotations]") {
  check_hand_made(snapshot_from_json(nlohmann::json::parse(kDict), "hand.json"));
}

TEST_CASE("annotations, user_metadata and compile_context survive every writer",
          "[quick][traces][annotations]") {
  const Snapshot s = snapshot_from_json(nlohmann::json::parse(kDict), "hand.json");
  for (const TraceFormat format : {TraceFormat::kJson, TraceFormat::kPickle, TraceFormat::kVtrace}) {
    INFO(trace_format_name(format));
    const Snapshot back = reread(s, format);
    check_hand_made(back);
    CHECK(back == s);
  }
}

TEST_CASE("vtrace: annotate lines, meta= and ctx= fields, annotation lines", "[quick][traces][annotations]") {
  const std::string text =
      "vramsim-trace 1\n"
      "0 alloc 0x100000 500 0 11000 meta=%7B%22step%22:%203%7D ctx=0/1%20forward\n"
      "0 annotate 0x100000 500 0 12000 meta=saved%20for%20backward\n"
      "0 free_requested 0x100000 500 0 13000 ctx=N/A\n"
      "annotation 0 9000 stage=START name=%23%23%20forward%20%23%23\n";
  const Snapshot s = read_vtrace(text, "t.vtrace");
  const DeviceTrace& t = s.device_traces.at(0);
  REQUIRE(t.events.size() == 2);
  REQUIRE(t.annotations.size() == 1);
  CHECK(t.annotations[0].before_event == 1);
  CHECK(s.strings[t.annotations[0].metadata_tag] == "saved for backward");
  REQUIRE(t.notes.size() == 2);
  CHECK(s.strings[t.notes[0].metadata_tag] == "{\"step\": 3}");
  CHECK(s.strings[t.notes[0].context_tag] == "0/1 forward");
  CHECK(t.notes[1].event == 1);
  CHECK(s.strings[t.notes[1].context_tag] == "N/A");
  REQUIRE(s.external_annotations.size() == 1);
  CHECK(s.external_annotations[0].metadata.at("name") == "## forward ##");
  CHECK(read_vtrace(write_vtrace(s), "t.vtrace") == s);
}

TEST_CASE("an annotation key holding '=' is escaped by the vtrace writer", "[quick][traces][annotations]") {
  Snapshot s;
  s.source = "k.vtrace";
  s.has_final_state = false;
  s.device_traces.resize(1);
  s.external_annotations.push_back(ExternalAnnotation{0, 5000, {{"a=b", "c=d"}, {"empty", ""}}});
  CHECK(read_vtrace(write_vtrace(s), "k.vtrace") == s);
}

TEST_CASE("malformed annotations and notes are one-line errors naming file and position",
          "[quick][traces][annotations]") {
  using Catch::Matchers::Equals;
  CHECK_THROWS_WITH(read_vtrace("vramsim-trace 1\n0 annotate 0x0 0 0 0 op=x\n", "t.vtrace"),
                    Equals("t.vtrace: line 2: an annotate line takes only meta= and ctx= fields"));
  CHECK_THROWS_WITH(read_vtrace("vramsim-trace 1\n0 alloc 0x0 512 0 0 meta=\n", "t.vtrace"),
                    Equals("t.vtrace: line 2: empty value in \"meta=\""));
  CHECK_THROWS_WITH(read_vtrace("vramsim-trace 1\nannotation 0 0 stage\n", "t.vtrace"),
                    Equals("t.vtrace: line 2: bad annotation field \"stage\" (expected key=text)"));
  CHECK_THROWS_WITH(
      read_vtrace("vramsim-trace 1\nannotation 0 0 device=1\n", "t.vtrace"),
      Equals("t.vtrace: line 2: annotation field \"device=1\" is given by the line's own fields"));
  const auto dict = [](const char* traces, const char* annotations) {
    return nlohmann::json::parse(std::string(R"({"segments": [], "device_traces": )") + traces +
                                 R"(, "external_annotations": )" + annotations + "}");
  };
  CHECK_THROWS_WITH(snapshot_from_json(dict("[[]]", R"([{"device": 0, "time_us": 1, "name": 7}])"), "x.json"),
                    Equals("x.json: external_annotations[0].name: expected a string, got integer"));
  CHECK_THROWS_WITH(snapshot_from_json(dict("[[]]", R"([{"time_us": 1}])"), "x.json"),
                    Equals("x.json: external_annotations[0]: missing key \"device\""));
  CHECK_THROWS_WITH(
      snapshot_from_json(dict(R"([[{"action": "annotate", "size": 1, "stream": 0}]])", "[]"), "x.json"),
      Equals("x.json: device_traces[0][0]: missing key \"addr\""));
  CHECK_THROWS_WITH(
      snapshot_from_json(
          dict(R"([[{"action": "alloc", "addr": 0, "size": 1, "stream": 0, "user_metadata": {}}]])", "[]"),
          "x.json"),
      Equals("x.json: device_traces[0][0].user_metadata: expected a string, got object"));
}

TEST_CASE("a snapshot taken with include_traces=False (segments only) reads with empty traces",
          "[quick][traces][annotations]") {
  // torch.cuda.memory._snapshot(include_traces=False) (pytorch/pytorch#172672) leaves the trace entries and
  // annotations out: the segments are the whole file.
  const Snapshot s = snapshot_from_json(
      nlohmann::json::parse(R"({"segments": [{"device": 1, "address": 0, "total_size": 2097152, "stream": 0,
        "blocks": [{"size": 2097152, "state": "inactive"}]}], "device_traces": []})"),
      "fast.json");
  CHECK(s.segments.size() == 1);
  REQUIRE(s.device_traces.size() == 2);  // padded up to the segment's device
  CHECK(s.device_traces[1].events.empty());
  CHECK(s.external_annotations.empty());
}

TEST_CASE("a real PyTorch 2.6 snapshot's external_annotations are read and written back",
          "[quick][traces][annotations][real]") {
  if (!test::shared_or_skip("a real PyTorch 2.6 snapshot's external_annotations are read and written back")) {
    return;
  }
  const Snapshot s =
      load_snapshot((test::shared_real_traces() / "kkaitlyn111_memory_small_forward.pickle").string());
  // 714 entries; the first is {'stage': 'START', 'name': '_compile.compile_inner (dynamo_timed)', 'device':
  // 0, 'time_us': 1748474028616744} (Python: json.load(...)["external_annotations"]).
  REQUIRE(s.external_annotations.size() == 714);
  CHECK(s.external_annotations[0].time_ns == 1748474028616744LL * 1000);
  CHECK(s.external_annotations[0].metadata ==
        std::map<std::string, std::string>{{"name", "_compile.compile_inner (dynamo_timed)"},
                                           {"stage", "START"}});
  for (const TraceFormat format : {TraceFormat::kPickle, TraceFormat::kVtrace}) {
    INFO(trace_format_name(format));
    CHECK(reread(s, format) == s);
  }
}
