// read_vtrace / write_vtrace: the documented example, the exact text the writer produces, every error path
// with its exact message, and exact round trips (hand-made and real snapshots).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/core/error.h"
#include "test_paths.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string error_of(const std::string& text) {
  try {
    read_vtrace(text, "t.vtrace");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// A snapshot exercising every field: two devices, tags that need escaping, settings, a pool id.
Snapshot rich_snapshot() {
  Snapshot s;
  s.source = "rich";
  s.strings = {"", "attention block", "50%#x", "act", "zero grad"};
  s.segments.push_back(SnapshotSegment{.device = 0,
                                       .address = 0x200000,
                                       .total_size_bytes = 2097152,
                                       .allocated_bytes = 1024,
                                       .active_bytes = 1024,
                                       .requested_bytes = 1000,
                                       .stream = 0,
                                       .is_small_pool = true,
                                       .blocks = {{0x200000, 1024, 1000, BlockState::kActiveAllocated},
                                                  {0x200400, 2097152 - 1024, 7, BlockState::kInactive}}});
  s.segments.push_back(SnapshotSegment{.device = 1,
                                       .address = 0x100000,
                                       .total_size_bytes = 20971520,
                                       .stream = 94000000000000,
                                       .is_expandable = true,
                                       .pool_id_first = -1,
                                       .pool_id_second = 42,
                                       .blocks = {{0x100000, 20971520, 0, BlockState::kInactive}}});
  s.device_traces.resize(3);
  s.device_traces[0].events = {{TraceAction::kAlloc, 0x200000, 1000, 0, -5, 1, 3, 4, 12},
                               {TraceAction::kSnapshot, 0, 1024, 0, 0, 2, 0}};
  s.device_traces[1].events = {{TraceAction::kSegmentMap, 0x100000, 20971520, 94000000000000, 99},
                               {TraceAction::kOom, 1 << 20, 1 << 30, 0, 100, 0, 0, 0, 0},
                               {TraceAction::kAlloc, 0x100000, 64, 0, 101, 0, 0, 3, kNoLayer}};
  RecordedAllocatorSettings settings;
  settings.alloc_conf = "expandable_segments:True, roundup_power2_divisions:[256:1,>:8]";
  settings.max_split_size = 209715200;
  settings.garbage_collection_threshold = 0.1 + 0.2;  // not exactly 0.3: needs the shortest exact text
  settings.expandable_segments = true;
  settings.roundup_power2_divisions = {1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8};
  s.allocator_settings = settings;
  return s;
}

}  // namespace

TEST_CASE("read_vtrace reads the documented example like its JSON twin", "[quick][traces]") {
  const auto vtrace_path = test::test_data("vtrace_small.vtrace");
  const auto json_path = test::test_data("snap_small.json");
  const Snapshot from_vtrace = read_vtrace(read_text(vtrace_path), "small");
  Snapshot from_json = load_snapshot(json_path.string());
  from_json.source = "small";
  CHECK(from_vtrace == from_json);
  CHECK(from_vtrace.has_final_state);
  REQUIRE(from_vtrace.segments.size() == 2);
  CHECK(from_vtrace.segments[0].active_bytes == 1536);
  CHECK(from_vtrace.device_traces[0].events[1].op_tag == 1);
  CHECK(from_vtrace.device_traces[0].events[1].category_tag == 2);
  CHECK(from_vtrace.device_traces[0].events[1].phase_tag == 3);
  CHECK(from_vtrace.device_traces[0].events[1].layer == 0);
  CHECK(from_vtrace.device_traces[0].events[2].phase_tag == kNoTag);
  CHECK(from_vtrace.device_traces[0].events[2].layer == kNoLayer);
  CHECK(from_vtrace.device_traces[0].events[5].addr == 123456);
}

TEST_CASE("write_vtrace writes the documented text", "[quick][traces]") {
  Snapshot s = read_vtrace(read_text(test::test_data("vtrace_small.vtrace")), "small");
  const std::string expected =
      "vramsim-trace 1\n"
      "# format: traces/FORMAT.md\n"
      "devices 1\n"
      "final_state yes\n"
      "settings max_split_size_mb:128,%20garbage_collection_threshold:0.6\n"
      "settings.max_split_size 134217728\n"
      "settings.garbage_collection_threshold 0.6\n"
      "settings.expandable_segments 0\n"
      "settings.roundup_power2_divisions 4 4 4 4 4 4 4 2 2 2 0 0 0 0 0 0\n"
      "tag linear\n"
      "tag activation\n"
      "tag forward\n"
      "tag N/A\n"
      "segment 0 0x7f0000000000 2097152 0 small 0 0 0\n"
      "block 0x7f0000000000 512 500 allocated\n"
      "block 0x7f0000000200 1024 1000 pending_free\n"
      "block 0x7f0000000600 2095616 0 inactive\n"
      "segment 0 0x7f0000200000 20971520 7 large 0 0 0\n"
      "block 0x7f0000200000 5242880 5000000 allocated\n"
      "block 0x7f0000700000 15728640 0 inactive\n"
      "0 segment_alloc 0x7f0000200000 20971520 7 1000000\n"
      "0 alloc 0x7f0000200000 5000000 7 1001000 op=linear layer=0 phase=forward cat=activation ctx=N/A\n"
      "0 alloc 0x7f0000000000 500 0 1002000\n"
      "0 alloc 0x7f0000000200 1000 0 1003000\n"
      "0 free_requested 0x7f0000000200 1000 0 1004000\n"
      "0 oom 0x1e240 104857600 0 1005000\n";
  CHECK(write_vtrace(s) == expected);
}

TEST_CASE("vtrace round trips are exact", "[quick][traces]") {
  const Snapshot rich = rich_snapshot();
  const std::string text = write_vtrace(rich);
  CHECK(text.find("tag attention%20block\n") != std::string::npos);
  CHECK(text.find("tag 50%25%23x\n") != std::string::npos);
  CHECK(text.find("0 alloc 0x200000 1000 0 -5 op=attention%20block layer=12 phase=zero%20grad cat=act\n") !=
        std::string::npos);
  CHECK(text.find("1 oom 0x100000 1073741824 0 100 layer=0\n") != std::string::npos);
  CHECK(text.find("1 alloc 0x100000 64 0 101 phase=act\n") != std::string::npos);
  CHECK(read_vtrace(text, rich.source) == rich);
  CHECK(write_vtrace(read_vtrace(text, rich.source)) == text);

  Snapshot empty;
  empty.has_final_state = false;
  CHECK(read_vtrace(write_vtrace(empty), "") == empty);

  Snapshot generated;  // what the step simulator writes: events only
  generated.has_final_state = false;
  generated.strings = {"", "op", "backward"};
  generated.device_traces.resize(1);
  generated.device_traces[0].events = {{TraceAction::kAlloc, 0, 4096, 0, 0, 1, 0, 2, 7},
                                       {TraceAction::kFreeRequested, 0, 4096, 0, 10, 1, 0, 2, 7},
                                       {TraceAction::kFreeCompleted, 0, 4096, 0, 10, 1, 0}};
  CHECK(read_vtrace(write_vtrace(generated), "") == generated);
}

TEST_CASE("read_vtrace accepts hand-written variations", "[quick][traces]") {
  const Snapshot s = read_vtrace(
      "vramsim-trace 1\r\n"
      "\t# indented comment\r\n"
      "\r\n"
      "1   alloc\t4096 512 0x10 -7 cat=weights%3a op=mm\r\n"
      "0 free_requested 0X1000 0x200 16 3\r\n"
      "0 alloc 0x2000 64 0 4 phase=zero_grad cat=weights%3a layer=0x1F\r\n"
      "0 alloc 0x3000 64 0 5 layer=2147483647 op=mm\t phase=loss%20scale",
      "hand");
  REQUIRE(s.device_traces.size() == 2);  // no 'devices' line: 1 + the highest index
  CHECK_FALSE(s.has_final_state);
  CHECK_FALSE(s.allocator_settings.has_value());
  CHECK(s.strings == std::vector<std::string>{"", "weights:", "mm", "zero_grad", "loss scale"});
  CHECK(s.device_traces[1].events[0] == TraceEvent{TraceAction::kAlloc, 4096, 512, 16, -7, 2, 1});
  CHECK(s.device_traces[0].events[0] == TraceEvent{TraceAction::kFreeRequested, 4096, 512, 16, 3});
  CHECK(s.device_traces[0].events[1] == TraceEvent{TraceAction::kAlloc, 0x2000, 64, 0, 4, 0, 1, 3, 31});
  CHECK(s.device_traces[0].events[2] ==
        TraceEvent{TraceAction::kAlloc, 0x3000, 64, 0, 5, 2, 0, 4, 2147483647});

  const Snapshot settings_only = read_vtrace("vramsim-trace 1\nsettings.expandable_segments 1\n", "");
  REQUIRE(settings_only.allocator_settings.has_value());
  CHECK(settings_only.allocator_settings->expandable_segments);
  CHECK(settings_only.allocator_settings->max_split_size == -1);
  CHECK(settings_only.allocator_settings->alloc_conf.empty());
}

// The reader looks known tags up without decoding them and reuses the last op / cat / phase of the previous
// event (issue 40): a tag must name the same string whether it is written escaped or not, repeated or new,
// and the same token under another key must not borrow that key's id.
TEST_CASE("read_vtrace tags: escaped, plain, repeated and new spellings name the same strings",
          "[quick][traces]") {
  const Snapshot s = read_vtrace(
      "vramsim-trace 1\n"
      "tag a%20b\n"
      "tag mm\n"
      "0 alloc 0x0 1 0 0 op=mm cat=mm phase=a%20b\n"         // declared tags, one escaped
      "0 alloc 0x200 1 0 0 op=mm cat=new phase=a%20b\n"      // repeated op and phase, a new cat
      "0 alloc 0x400 1 0 0 op=new cat=mm phase=mm\n"         // the same token under other keys
      "0 alloc 0x600 1 0 0 op=n%65w cat=new phase=a%20b\n",  // 'new' escaped
      "tags");
  // strings: [0] "", [1] "a b", [2] "mm", [3] "new" (first met at the second event)
  CHECK(s.strings == std::vector<std::string>{"", "a b", "mm", "new"});
  const std::vector<TraceEvent>& e = s.device_traces[0].events;
  REQUIRE(e.size() == 4);
  const auto tags = [](const TraceEvent& x) {
    return std::vector<std::uint32_t>{x.op_tag, x.category_tag, x.phase_tag};
  };
  CHECK(tags(e[0]) == std::vector<std::uint32_t>{2, 2, 1});
  CHECK(tags(e[1]) == std::vector<std::uint32_t>{2, 3, 1});
  CHECK(tags(e[2]) == std::vector<std::uint32_t>{3, 2, 2});
  CHECK(tags(e[3]) == std::vector<std::uint32_t>{3, 3, 1});
}

TEST_CASE("read_vtrace errors name the line and the problem", "[quick][traces]") {
  const std::string h = "vramsim-trace 1\n";
  const std::string fs = h + "final_state yes\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "t.vtrace: line 1: expected the header \"vramsim-trace 1\" on the first line"},
      {"0 alloc 0x10 512 0 0\n" + h,
       "t.vtrace: line 1: expected the header \"vramsim-trace 1\" on the first line"},
      {"vramsim-trace 2\n",
       "t.vtrace: line 1: unsupported vtrace version \"2\" (this build reads version 1)"},
      {h + "0 malloc 0x0 512 0 0\n", "t.vtrace: line 2: unknown action \"malloc\""},
      {h + "0 alloc 0xZZ 512 0 0\n",
       "t.vtrace: line 2: bad address \"0xZZ\" (expected a decimal or 0x-hex integer)"},
      {h + "0 alloc 12ab 512 0 0\n",
       "t.vtrace: line 2: bad address \"12ab\" (expected a decimal or 0x-hex integer)"},
      {h + "0 alloc 0x0 -5 0 0\n", "t.vtrace: line 2: size must not be negative, got \"-5\""},
      {h + "0 alloc 0x0 1152921504606846976 0 0\n",
       "t.vtrace: line 2: size \"1152921504606846976\" is too large (must be below 2^60)"},
      {h + "0 alloc 0x0 99999999999999999999 0 0\n",
       "t.vtrace: line 2: size \"99999999999999999999\" is too large"},
      {h + "0 alloc 0x0 512 0 1.5\n", "t.vtrace: line 2: bad time_ns \"1.5\" (expected a decimal integer)"},
      {h + "0 alloc 0x0 512\n",
       "t.vtrace: line 2: an event line needs 6 fields (device action addr size stream time_ns), got 4"},
      {h + "0 alloc 0x0 512 0 0 x=1\n",
       "t.vtrace: line 2: unknown event field \"x=1\" (expected op=<name>, cat=<name>, phase=<name>, "
       "layer=<index>, meta=<text> or ctx=<text>)"},
      {h + "0 alloc 0x0 512 0 0 layers=1\n",
       "t.vtrace: line 2: unknown event field \"layers=1\" (expected op=<name>, cat=<name>, phase=<name>, "
       "layer=<index>, meta=<text> or ctx=<text>)"},
      {h + "0 alloc 0x0 512 0 0 forward\n",
       "t.vtrace: line 2: unknown event field \"forward\" (expected op=<name>, cat=<name>, phase=<name>, "
       "layer=<index>, meta=<text> or ctx=<text>)"},
      {h + "0 alloc 0x0 512 0 0 layer=abc\n",
       "t.vtrace: line 2: bad layer \"abc\" (expected a decimal or 0x-hex integer)"},
      {h + "0 alloc 0x0 512 0 0 layer=\n",
       "t.vtrace: line 2: bad layer \"\" (expected a decimal or 0x-hex integer)"},
      {h + "0 alloc 0x0 512 0 0 layer=1.5\n",
       "t.vtrace: line 2: bad layer \"1.5\" (expected a decimal or 0x-hex integer)"},
      {h + "0 alloc 0x0 512 0 0 layer=-1\n", "t.vtrace: line 2: layer must not be negative, got \"-1\""},
      {h + "0 alloc 0x0 512 0 0 layer=2147483648\n",
       "t.vtrace: line 2: layer \"2147483648\" is too large (must be below 2^31)"},
      {h + "0 alloc 0x0 512 0 0 layer=1 op=a layer=1\n", "t.vtrace: line 2: duplicate field \"layer=1\""},
      {h + "0 alloc 0x0 512 0 0 phase=forward phase=backward\n",
       "t.vtrace: line 2: duplicate field \"phase=backward\""},
      {h + "0 alloc 0x0 512 0 0 phase=\n", "t.vtrace: line 2: empty value in \"phase=\""},
      {h + "0 alloc 0x0 512 0 0 phase=a%zz\n",
       "t.vtrace: line 2: bad percent escape in tag \"a%zz\" (expected %XX)"},
      {h + "0 alloc 0x0 512 0 0 op=a op=b\n", "t.vtrace: line 2: duplicate field \"op=b\""},
      // a raw byte 0xff, and an escaped one: neither is UTF-8 (the JSON and pickle writers could not carry
      // it)
      {h + "0 alloc 0x0 512 0 0 phase=a\xff\n",
       "t.vtrace: line 2: tag is not valid UTF-8 (write other bytes as %XX)"},
      {h + "0 alloc 0x0 512 0 0 op=%C3\n",
       "t.vtrace: line 2: tag is not valid UTF-8 (write other bytes as %XX)"},
      {h + "0 alloc 0x0 512 0 0 op=\n", "t.vtrace: line 2: empty value in \"op=\""},
      {h + "0 alloc 0x0 512 0 0 op=a%2\n",
       "t.vtrace: line 2: bad percent escape in tag \"a%2\" (expected %XX)"},
      {h + "devices 1\n1 alloc 0x0 512 0 0\n",
       "t.vtrace: line 3: device 1 is out of range (the trace has 1 device)"},
      {h + "devices 2000\n", "t.vtrace: line 2: device count \"2000\" is too large (must be below 1025)"},
      {h + "0 alloc 0x0 512 0 0\ndevices 1\n",
       "t.vtrace: line 3: 'devices' must come before the first segment or event line"},
      {h + "final_state yes\nfinal_state no\n", "t.vtrace: line 3: duplicate 'final_state' line"},
      {h + "final_state maybe\n", "t.vtrace: line 2: bad final_state \"maybe\" (expected yes or no)"},
      {h + "tag a\ntag a\n", "t.vtrace: line 3: duplicate tag \"a\""},
      {h + "frobnicate 1\n", "t.vtrace: line 2: unknown line type \"frobnicate\""},
      {h + "settings.colour 1\n", "t.vtrace: line 2: unknown line type \"settings.colour\""},
      {h + "settings a b\n",
       "t.vtrace: line 2: 'settings' takes one percent-encoded string (write spaces as %20)"},
      {h + "settings.garbage_collection_threshold 1.5\n",
       "t.vtrace: line 2: bad garbage_collection_threshold \"1.5\" (expected a fraction in [0, 1])"},
      {h + "settings.max_split_size -2\n",
       "t.vtrace: line 2: max_split_size must be -1 (unlimited) or a size, got -2"},
      {h + "settings.roundup_power2_divisions 1 2 3\n",
       "t.vtrace: line 2: 'settings.roundup_power2_divisions' takes 16 fields (one value per size interval), "
       "got 3"},
      {h + "block 0x0 512 0 inactive\n",
       "t.vtrace: line 2: block line outside a segment (blocks must directly follow their segment line)"},
      {h + "segment 0 0x200000 2097152 0 small 0 0 0\n",
       "t.vtrace: line 2: segment line in a trace without final state (add 'final_state yes' to the header)"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0\n",
       "t.vtrace: line 3: 'segment' takes 8 fields (device address total_size stream small|large expandable "
       "pool_a "
       "pool_b), got 7"},
      {fs + "segment 0 0x200000 2097152 0 tiny 0 0 0\n",
       "t.vtrace: line 3: bad pool \"tiny\" (expected small or large)"},
      {fs + "segment 0 0x200000 0 0 small 0 0 0\n", "t.vtrace: line 3: a segment cannot be empty"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200000 512 0 inactive\n",
       "t.vtrace: line 3: the blocks of segment 0x200000 cover 512 of its 2097152 bytes"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200000 512 0 inactive\n0 alloc 0x0 1 0 0\n",
       "t.vtrace: line 3: the blocks of segment 0x200000 cover 512 of its 2097152 bytes"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200200 2097152 0 inactive\n",
       "t.vtrace: line 4: block at 0x200200 does not start where the previous block of its segment ends "
       "(0x200000)"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200000 4194304 0 inactive\n",
       "t.vtrace: line 4: block 0x200000 + 4194304 extends past the end of its segment (0x400000)"},
      {fs + "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200000 2097152 0 free\n",
       "t.vtrace: line 4: unknown block state \"free\" (expected allocated, pending_free or inactive)"},
      {fs +
           "segment 0 0x200000 2097152 0 small 0 0 0\n0 alloc 0x0 1 0 0\nblock 0x200000 2097152 0 inactive\n",
       "t.vtrace: line 3: the blocks of segment 0x200000 cover 0 of its 2097152 bytes"},
      {fs + "segment 0 0x300000 2097152 0 small 0 0 0\nblock 0x300000 2097152 0 inactive\n" +
           "segment 0 0x200000 2097152 0 small 0 0 0\nblock 0x200000 2097152 0 inactive\n",
       "t.vtrace: line 3: segment 0x300000 overlaps the segment at 0x200000 (line 5)"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK(error_of(text) == expected);
  }
}

// The reader takes common event lines by a fast road (one pass over the line, issue 40) and everything else
// by the general one (tokens first). A line with a leading blank means the same (the tokenizer skips it) but
// never takes the fast road, so the two readings of one text must agree: the same Snapshot, or the same error
// with the same line number. Cases near each limit of the fast road (digit counts, hex, signs, separators,
// repeated / unknown / escaped / new tags) and every single-byte change of a few lines.
std::string outcome_of(const std::string& text) {
  try {
    const Snapshot s = read_vtrace(text, "t.vtrace");
    std::string out = write_vtrace(s);
    for (const DeviceTrace& trace : s.device_traces) {
      out += '|';  // appended apart: GCC 12's -Wrestrict misreads "|" + std::to_string(...) (a false positive)
      out += std::to_string(trace.events.size());
    }
    return out;
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

std::string general_road(const std::string& text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line[0] >= '0' && line[0] <= '9') {
      out += ' ';
    }
    out.append(line);
    if (end < text.size()) {
      out += '\n';
    }
    pos = end + 1;
  }
  return out;
}

TEST_CASE("read_vtrace: the fast road for event lines reads as the general road does", "[quick][traces]") {
  const std::string head = "vramsim-trace 1\ndevices 2\ntag mm\ntag a%20b\ntag x=y\n";
  const std::vector<std::string> lines = {
      "0 alloc 0x200 512 0 0 op=mm phase=a%20b cat=mm layer=3",
      "1 alloc 0x400 512 7 -9 op=mm cat=mm",
      "0 alloc 512 0 0 0",
      "0 alloc 0x0 512 0 0 ",
      "0 alloc 0x0 512 0 0\t op=mm\t",
      "0\talloc  0x0 512 0 0",
      "0 alloc 0xfffffffffffffff 1 0 0",   // 15 hex digits: below 2^63
      "0 alloc 0x7fffffffffffffff 1 0 0",  // 16 hex digits
      "0 alloc 0x8000000000000000 1 0 0",  // 2^63: too large
      "0 alloc 0x0 1152921504606846975 0 0",
      "0 alloc 0x0 1152921504606846976 0 0",
      "0 alloc 0x0 1 9999999999999999999 0",   // 19 digits
      "0 alloc 0x0 1 18446744073709551615 0",  // 20 digits, the largest uint64
      "0 alloc 0x0 1 18446744073709551616 0",
      "0 alloc 0x0 1 0 999999999999999999",
      "0 alloc 0x0 1 0 -9223372036854775808",
      "0 alloc 0x0 1 0 9223372036854775808",
      "0 alloc 0x0 1 0 -",
      "0 alloc 0x0 1 0 +5",
      "0 alloc 0x 1 0 0",
      "0 alloc 0X1F 1 0 0",
      "0 alloc 0x1g 1 0 0",
      "00 alloc 0x0 1 0 0",
      "0x1 alloc 0x0 1 0 0",
      "2 alloc 0x0 1 0 0",
      "0 alloc 0x0 1 0 0 layer=0x1F",
      "0 alloc 0x0 1 0 0 layer=2147483647 layer=1",
      "0 alloc 0x0 1 0 0 layer=2147483648",
      "0 alloc 0x0 1 0 0 op=mm op=mm",
      "0 alloc 0x0 1 0 0 op=mm cat=mm phase=mm",
      "0 alloc 0x0 1 0 0 op=mmm",
      "0 alloc 0x0 1 0 0 op=m",
      "0 alloc 0x0 1 0 0 op=x=y",
      "0 alloc 0x0 1 0 0 op=mm#",
      "0 alloc 0x0 1 0 0 op=",
      "0 alloc 0x0 1 0 0 op=m%6D",
      "0 alloc 0x0 1 0 0 op=new cat=new",
      "0 alloc 0x0 1 0 0 ops=mm",
      "0 alloc 0x0 1 0 0 mm",
      "0 frees 0x0 1 0 0",
      "0 free_requested 0x0 1 0 0",
      "0 oom 0x10 1 0 0",
  };
  for (const std::string& line : lines) {
    const std::string text = head + "0 alloc 0x0 1 0 0 op=mm cat=x=y\n" + line + "\n" + line + "\n";
    INFO(text);
    CHECK(outcome_of(text) == outcome_of(general_road(text)));
  }
  // Every single-byte change of three lines, to each of a few bytes that matter to the fast road.
  const std::string base = head +
                           "0 alloc 0x200 512 0 -4 op=mm phase=a%20b layer=3\n0 free_requested 0x200 " +
                           "512 0 5 op=mm\n1 alloc 0x400 4096 0 6 cat=x=y op=mm\n";
  std::size_t compared = 0;
  for (std::size_t i = head.size(); i < base.size(); ++i) {
    for (const char c : std::string("0 9\tx-=%#\r")) {
      std::string text = base;
      text[i] = c;
      INFO(text);
      CHECK(outcome_of(text) == outcome_of(general_road(text)));
      ++compared;
    }
  }
  CHECK(compared > 1000);
}

TEST_CASE("vtrace round-trips every real snapshot exactly", "[quick][traces]") {
  if (!test::shared_or_skip("vtrace round-trips every real snapshot exactly")) {
    return;
  }
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::shared_real_traces())) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".pickle.json") && !name.ends_with(".alloc_data.json")) {
      continue;
    }
    INFO(name);
    const Snapshot s = load_snapshot(entry.path().string());
    const std::string text = write_vtrace(s);
    CHECK(read_vtrace(text, s.source) == s);
    ++files;
  }
  CHECK(files >= 29);
}

}  // namespace vramsim
