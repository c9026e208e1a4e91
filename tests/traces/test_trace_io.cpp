// load_snapshot / save_snapshot / format_from_path: sniffing, file errors, round trips through files in every
// format, the trace_plot alloc_data special case, and the real snapshots against INDEX.json.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

namespace fs = std::filesystem;

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("vramsim_trace_io_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::string& contents) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << contents;
    return p.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string load_error(const std::string& path) {
  try {
    load_snapshot(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::map<TraceAction, std::size_t> count_actions(const DeviceTrace& trace) {
  std::map<TraceAction, std::size_t> counts;
  for (const TraceEvent& event : trace.events) {
    ++counts[event.action];
  }
  return counts;
}

}  // namespace

TEST_CASE("format_from_path and trace_format_name", "[quick][traces]") {
  CHECK(format_from_path("a/b.pickle") == TraceFormat::kPickle);
  CHECK(format_from_path("b.PKL") == TraceFormat::kPickle);
  CHECK(format_from_path("b.pickle.json") == TraceFormat::kJson);
  CHECK(format_from_path("b.vtrace") == TraceFormat::kVtrace);
  CHECK_THROWS_WITH(format_from_path("b.txt"),
                    "b.txt: cannot tell the trace format from the file name (expected "
                    ".pickle, .pkl, .json or .vtrace)");
  CHECK(trace_format_name(TraceFormat::kPickle) == "pickle");
  CHECK(trace_format_name(TraceFormat::kJson) == "json");
  CHECK(trace_format_name(TraceFormat::kVtrace) == "vtrace");
}

TEST_CASE("load_snapshot sniffs the format and reports unreadable files", "[quick][traces]") {
  const TempDir dir;
  CHECK(load_error(dir.path("missing.json")) ==
        dir.path("missing.json") + ": cannot open: No such file or directory");
  CHECK(load_error(dir.path("")) == dir.path("") + ": is a directory, not a trace file");
  const std::string junk = dir.file("junk.json", "hello");
  CHECK(load_error(junk) == junk + ": not a PyTorch snapshot (pickle or JSON) or vramsim trace");
  const std::string empty = dir.file("empty.pickle", "");
  CHECK(load_error(empty) == empty + ": not a PyTorch snapshot (pickle or JSON) or vramsim trace");
  const std::string bad_json = dir.file("bad.json", "{\"segments\": [}");
  CHECK(load_error(bad_json) ==
        bad_json +
            ": byte 15: invalid JSON: syntax error while parsing value - unexpected '}'; "
            "expected '[', '{', or a literal");
  const std::string truncated = dir.file("cut.json", "  [1, 2");
  CHECK(load_error(truncated) ==
        truncated +
            ": byte 8: invalid JSON: syntax error while parsing array - unexpected end of "
            "input; expected ']'");
  const std::string deep = dir.file("deep.json", std::string(200000, '[') + std::string(200000, ']'));
  CHECK(load_error(deep) == deep + ": [0]: expected an object, got array");
  const std::string bad_vtrace = dir.file("bad.vtrace", "vramsim-trace 1\n0 alloc\n");
  CHECK(load_error(bad_vtrace) ==
        bad_vtrace +
            ": line 2: an event line needs 6 fields (device action addr size stream time_ns), got 2");

  // Content decides, not the name.
  const std::string json_named_vtrace = dir.file("list.vtrace", " \n[]");
  const Snapshot s = load_snapshot(json_named_vtrace);
  CHECK(s.segments.empty());
  CHECK(s.source == json_named_vtrace);
}

TEST_CASE("save_snapshot and load_snapshot round-trip json and vtrace files", "[quick][traces]") {
  const TempDir dir;
  const Snapshot original = load_snapshot(test::test_data("snap_small.json").string());
  for (const TraceFormat format : {TraceFormat::kJson, TraceFormat::kVtrace}) {
    const std::string path = dir.path(std::string("out.") + std::string(trace_format_name(format)));
    save_snapshot(original, path, format);
    Snapshot back = load_snapshot(path);
    back.source = original.source;
    CHECK(back == original);
  }
  CHECK_THROWS_WITH(save_snapshot(original, dir.path("no/such/dir/x.json"), TraceFormat::kJson),
                    dir.path("no/such/dir/x.json") + ": cannot write: No such file or directory");
}

TEST_CASE("save_snapshot and load_snapshot round-trip pickle files", "[quick][traces][pickle]") {
  const TempDir dir;
  const Snapshot original = load_snapshot(test::test_data("snap_small.json").string());
  const std::string path = dir.path("out.pickle");
  save_snapshot(original, path, TraceFormat::kPickle);
  Snapshot back = load_snapshot(path);
  back.source = original.source;
  CHECK(back == original);
}

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A generated trace whose events carry every tag: op, layer, phase and category, some of them absent.
Snapshot tagged_generated() {
  Snapshot s;
  s.source = "generated";
  s.has_final_state = false;
  s.strings = {"",         "layers.1.attn.q_proj", "activation", "forward", "layers.1.attn.q_proj.backward",
               "backward", "zero grad%#"};
  s.device_traces.resize(2);
  s.device_traces[0].events = {
      {TraceAction::kAlloc, 0x200, 4096, 0, 1000, 1, 2, 3, 1},
      {TraceAction::kAlloc, 0x400, 512, 0, 2000, 4, 2, 5, 1},
      {TraceAction::kFreeRequested, 0x200, 4096, 0, 3000, 4, 2, 5, 1},
      {TraceAction::kFreeCompleted, 0x200, 4096, 0, 3000, 4, 2, 5, 1},
      {TraceAction::kAlloc, 0x600, 64, 0, 4000, 0, 0, 6, kNoLayer},
      {TraceAction::kAlloc, 0x800, 64, 0, 5000, 0, 0, 0, 0},
      {TraceAction::kAlloc, 0xa00, 64, 0, 6000},
  };
  s.device_traces[1].events = {{TraceAction::kAlloc, 0x200, 8, 3, 7000, 1, 0, 3, 2147483647}};
  return s;
}

}  // namespace

TEST_CASE("pickle -> vtrace -> json -> pickle keeps op, layer, phase and category tags byte-identical",
          "[quick][traces][pickle]") {
  const TempDir dir;
  for (const Snapshot& original :
       {tagged_generated(), load_snapshot(test::test_data("snap_small.json").string())}) {
    INFO(original.source);
    const std::string first = dir.path("first.pickle");
    save_snapshot(original, first, TraceFormat::kPickle);
    const Snapshot from_pickle = load_snapshot(first);
    save_snapshot(from_pickle, dir.path("t.vtrace"), TraceFormat::kVtrace);
    const Snapshot from_vtrace = load_snapshot(dir.path("t.vtrace"));
    save_snapshot(from_vtrace, dir.path("t.json"), TraceFormat::kJson);
    const Snapshot from_json = load_snapshot(dir.path("t.json"));
    const std::string second = dir.path("second.pickle");
    save_snapshot(from_json, second, TraceFormat::kPickle);
    CHECK(file_bytes(first) == file_bytes(second));

    Snapshot back = load_snapshot(second);
    back.source = original.source;
    CHECK(back.device_traces == original.device_traces);  // events compared by string index ...
    CHECK(back.strings == original.strings);              // ... over the same table
    for (const Snapshot* s : {&from_pickle, &from_vtrace, &from_json}) {
      Snapshot same = *s;
      same.source = original.source;
      CHECK(same == original);
    }
  }
  const std::string text = file_bytes(dir.path("t.vtrace"));  // snap_small: one tagged event
  CHECK(text.find(" op=linear layer=0 phase=forward cat=activation ctx=N/A\n") != std::string::npos);

  save_snapshot(tagged_generated(), dir.path("g.vtrace"), TraceFormat::kVtrace);
  const std::string generated_text = file_bytes(dir.path("g.vtrace"));
  CHECK(generated_text.find("0 alloc 0x600 64 0 4000 phase=zero%20grad%25%23\n") != std::string::npos);
  CHECK(generated_text.find("0 alloc 0x800 64 0 5000 layer=0\n") != std::string::npos);
  CHECK(generated_text.find("0 alloc 0xa00 64 0 6000\n") != std::string::npos);
  save_snapshot(tagged_generated(), dir.path("g.json"), TraceFormat::kJson);
  const nlohmann::json generated_json = nlohmann::json::parse(file_bytes(dir.path("g.json")));
  const nlohmann::json& entries = generated_json["device_traces"][0];
  CHECK(entries[1]["op"] == "layers.1.attn.q_proj.backward");
  CHECK(entries[1]["phase"] == "backward");
  CHECK(entries[1]["layer"] == 1);
  CHECK(entries[1]["category"] == "activation");
  CHECK_FALSE(entries[4].contains("layer"));
  CHECK(entries[5]["layer"] == 0);
  CHECK_FALSE(entries[5].contains("phase"));
  for (const char* key : {"op", "layer", "phase", "category"}) {
    CHECK_FALSE(entries[6].contains(key));
  }
}

TEST_CASE("load_snapshot reads trace_plot alloc_data with synthetic addresses", "[quick][traces]") {
  const Snapshot s = load_snapshot(test::test_data("snap_alloc_data.json").string());
  CHECK_FALSE(s.has_final_state);
  CHECK(s.segments.empty());
  REQUIRE(s.device_traces.size() == 1);
  // Sizes 1000, 2048, 1, 600000 -> slots of 1024, 2048, 512, ... bytes from 0x100000000.
  constexpr Bytes kBase = 0x100000000;
  const std::vector<TraceEvent> expected = {
      {TraceAction::kAlloc, kBase + 3584, 600000},  // initially_allocated
      {TraceAction::kAlloc, kBase, 1000},
      {TraceAction::kAlloc, kBase + 1024, 2048},
      {TraceAction::kFreeRequested, kBase, 1000},
      {TraceAction::kFreeCompleted, kBase, 1000},
      {TraceAction::kFreeRequested, kBase + 3584, 600000},
      {TraceAction::kFreeCompleted, kBase + 3584, 600000},
      {TraceAction::kAlloc, kBase + 3072, 1},
      {TraceAction::kFreeRequested, kBase + 1024, 2048},
      {TraceAction::kFreeCompleted, kBase + 1024, 2048},
  };
  CHECK(s.device_traces[0].events == expected);

  const TempDir dir;
  const std::string bare = dir.file("bare.json", R"({"actions": [1, 0, 1], "elements_size": [10, 20]})");
  CHECK(load_snapshot(bare).device_traces[0].events.size() == 4);
  const std::string bad =
      dir.file("bad.json", R"({"alloc_data": {"actions": [0, 2], "elements_size": [10, 20]}})");
  CHECK(load_error(bad) == bad + ": alloc_data.actions[1]: expected an element id below 2, got 2");
  const std::string bad_size = dir.file("bad2.json", R"({"actions": [], "elements_size": ["x"]})");
  CHECK(load_error(bad_size) ==
        bad_size + ": elements_size[0]: expected a size in bytes below 1152921504606846976, got string");
}

TEST_CASE("real snapshots load with the counts in INDEX.json", "[quick][traces]") {
  if (!test::shared_or_skip("real snapshots load with the counts in INDEX.json")) {
    return;
  }
  const fs::path dir = test::shared_real_traces();
  std::ifstream index_file(dir / "INDEX.json");
  const nlohmann::json index = nlohmann::json::parse(index_file);
  REQUIRE(index.size() >= 29);
  for (const nlohmann::json& entry : index) {
    const std::string name = entry["json"];
    INFO(name);
    const Snapshot s = load_snapshot((dir / name).string());
    if (entry.contains("derived")) {  // trace_plot alloc_data: sizes and order only
      const auto counts = count_actions(s.device_traces.at(0));
      CHECK(counts.at(TraceAction::kAlloc) == entry["derived"]["n_alloc"].get<std::size_t>());
      CHECK(counts.at(TraceAction::kFreeRequested) == entry["derived"]["n_free"].get<std::size_t>());
      CHECK_FALSE(s.has_final_state);
      continue;
    }
    CHECK(s.segments.size() == entry["n_segments"].get<std::size_t>());
    std::size_t blocks = 0;
    for (const SnapshotSegment& seg : s.segments) {
      blocks += seg.blocks.size();
    }
    CHECK(blocks == entry["n_blocks"].get<std::size_t>());
    for (const auto& [device_text, device] : entry["devices"].items()) {
      const std::size_t d = std::stoul(device_text);
      REQUIRE(d < s.device_traces.size());
      const DeviceTrace& trace = s.device_traces[d];
      CHECK(trace.events.size() == device["trace_events"].get<std::size_t>());
      std::map<TraceAction, std::size_t> expected;
      for (const auto& [action, count] : device["trace_actions"].items()) {
        expected[parse_trace_action(action).value()] = count.get<std::size_t>();
      }
      CHECK(count_actions(trace) == expected);
      Bytes reserved = 0;
      Bytes allocated = 0;
      for (const SnapshotSegment& seg : s.segments) {
        if (seg.device == static_cast<int>(d)) {
          reserved += seg.total_size_bytes;
          allocated += seg.allocated_bytes;
        }
      }
      CHECK(reserved == device["final_reserved_bytes"].get<Bytes>());
      CHECK(allocated == device["final_allocated_bytes"].get<Bytes>());
    }
  }
}

namespace {

// Loads every real pickle under `max_bytes` and its JSON conversion; returns how many pairs were compared.
int compare_real_pickles_with_json(std::uintmax_t max_bytes) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(test::shared_real_traces())) {
    if (entry.path().extension() != ".pickle" || entry.file_size() > max_bytes) {
      continue;
    }
    INFO(entry.path().filename().string());
    Snapshot from_pickle = load_snapshot(entry.path().string());
    Snapshot from_json = load_snapshot(entry.path().string() + ".json");
    from_pickle.source = from_json.source;
    CHECK(from_pickle == from_json);
    ++files;
  }
  return files;
}

}  // namespace

// The small pickles cover PyTorch 2.0 (Yiyi-philosophy), 2.6 (kkaitlyn111) and 2.11 (MAGMA27); the big ones
// take seconds each, because the pickle expands to every stack frame.
TEST_CASE("small real pickles load to the same Snapshot as their JSON conversions",
          "[quick][traces][pickle]") {
  if (!test::shared_or_skip("small real pickles load to the same Snapshot as their JSON conversions")) {
    return;
  }
  CHECK(compare_real_pickles_with_json(600 * 1000) == 9);
}

TEST_CASE("every real pickle loads to the same Snapshot as its JSON conversion", "[slow][traces][pickle]") {
  if (!test::shared_or_skip("every real pickle loads to the same Snapshot as its JSON conversion")) {
    return;
  }
  CHECK(compare_real_pickles_with_json(std::numeric_limits<std::uintmax_t>::max()) == 27);
}

}  // namespace vramsim
