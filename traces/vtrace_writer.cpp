// The vtrace writer (traces/FORMAT.md): one line per setting, tag, segment, block and event, in the order
// the reader expects; read_vtrace(write_vtrace(s), s.source) == s (traces/vtrace_reader.h).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/assert.h"
#include "traces/trace_io.h"
#include "traces/vtrace_reader.h"

namespace vramsim {
namespace {

using vtrace::kMagic;
using vtrace::kVersion;

// Bytes that would break the whitespace-separated, '#'-commented line structure are written as %XX.
bool needs_escape(unsigned char c) { return c <= 0x20 || c == 0x7f || c == '%' || c == '#'; }

std::string encode_field(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (needs_escape(c)) {
      out += fmt::format("%{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

std::string_view state_keyword(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated:
      return "allocated";
    case BlockState::kActivePendingFree:
      return "pending_free";
    case BlockState::kInactive:
      return "inactive";
  }
  return "inactive";
}

// An annotation key: as encode_field, and '=' too (it ends the key).
std::string encode_key(std::string_view key) {
  std::string out;
  for (const char ch : encode_field(key)) {
    out += ch == '=' ? std::string("%3D") : std::string(1, ch);
  }
  return out;
}

// DEVICE ACTION ADDR SIZE STREAM TIME_NS and the tags the event carries, without the line end.
void write_event(std::back_insert_iterator<std::string> it, std::size_t device, const TraceEvent& event,
                 const std::vector<std::string>& strings) {
  fmt::format_to(it, "{} {} {:#x} {} {} {}", device, trace_action_name(event.action), event.addr,
                 event.size_bytes, event.stream, event.time_ns);
  if (event.op_tag != kNoTag) {
    SIM_ASSERT(event.op_tag < strings.size());
    fmt::format_to(it, " op={}", encode_field(strings[event.op_tag]));
  }
  if (event.layer != kNoLayer) {
    SIM_ASSERT(event.layer >= 0);
    fmt::format_to(it, " layer={}", event.layer);
  }
  if (event.phase_tag != kNoTag) {
    SIM_ASSERT(event.phase_tag < strings.size());
    fmt::format_to(it, " phase={}", encode_field(strings[event.phase_tag]));
  }
  if (event.category_tag != kNoTag) {
    SIM_ASSERT(event.category_tag < strings.size());
    fmt::format_to(it, " cat={}", encode_field(strings[event.category_tag]));
  }
}

// The meta= (user_metadata) and ctx= (compile_context) fields, when set.
void write_notes(std::back_insert_iterator<std::string> it, std::uint32_t metadata_tag,
                 std::uint32_t context_tag, const std::vector<std::string>& strings) {
  if (metadata_tag != kNoTag) {
    SIM_ASSERT(metadata_tag < strings.size());
    fmt::format_to(it, " meta={}", encode_field(strings[metadata_tag]));
  }
  if (context_tag != kNoTag) {
    SIM_ASSERT(context_tag < strings.size());
    fmt::format_to(it, " ctx={}", encode_field(strings[context_tag]));
  }
}

}  // namespace

std::string write_vtrace(const Snapshot& snapshot) {
  SIM_ASSERT(!snapshot.strings.empty() && snapshot.strings[0].empty());
  std::string out;
  std::size_t n_blocks = 0;
  std::size_t n_events = 0;
  for (const SnapshotSegment& seg : snapshot.segments) {
    n_blocks += seg.blocks.size();
  }
  for (const DeviceTrace& trace : snapshot.device_traces) {
    n_events += trace.events.size();
  }
  out.reserve(256 + 64 * (snapshot.segments.size() + n_blocks + n_events));
  auto it = std::back_inserter(out);

  std::size_t devices = snapshot.device_traces.size();
  for (const SnapshotSegment& seg : snapshot.segments) {
    devices = std::max(devices, static_cast<std::size_t>(seg.device) + 1);
  }
  fmt::format_to(it, "{} {}\n# format: traces/FORMAT.md\ndevices {}\nfinal_state {}\n", kMagic, kVersion,
                 devices, snapshot.has_final_state ? "yes" : "no");
  if (const auto& settings = snapshot.allocator_settings) {
    const std::string conf = encode_field(settings->alloc_conf);
    fmt::format_to(it, "settings{}{}\n", conf.empty() ? "" : " ", conf);
    fmt::format_to(it, "settings.max_split_size {}\n", settings->max_split_size);
    fmt::format_to(it, "settings.garbage_collection_threshold {}\n", settings->garbage_collection_threshold);
    fmt::format_to(it, "settings.expandable_segments {}\n", settings->expandable_segments ? 1 : 0);
    fmt::format_to(it, "settings.roundup_power2_divisions {}\n",
                   fmt::join(settings->roundup_power2_divisions, " "));
  }
  for (std::size_t i = 1; i < snapshot.strings.size(); ++i) {
    fmt::format_to(it, "tag {}\n", encode_field(snapshot.strings[i]));
  }
  for (const SnapshotSegment& seg : snapshot.segments) {
    fmt::format_to(it, "segment {} {:#x} {} {} {} {} {} {}\n", seg.device, seg.address, seg.total_size_bytes,
                   seg.stream, seg.is_small_pool ? "small" : "large", seg.is_expandable ? 1 : 0,
                   seg.pool_id_first, seg.pool_id_second);
    for (const SnapshotBlock& block : seg.blocks) {
      fmt::format_to(it, "block {:#x} {} {} {}\n", block.address, block.size_bytes, block.requested_bytes,
                     state_keyword(block.state));
    }
  }
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    const DeviceTrace& trace = snapshot.device_traces[d];
    std::size_t next_note = 0;
    std::size_t next_annotation = 0;
    for (std::size_t i = 0; i <= trace.events.size(); ++i) {
      for (;
           next_annotation < trace.annotations.size() && trace.annotations[next_annotation].before_event <= i;
           ++next_annotation) {
        const TraceAnnotation& a = trace.annotations[next_annotation];
        fmt::format_to(it, "{} annotate {:#x} {} {} {}", d, a.addr, a.size_bytes, a.stream, a.time_ns);
        write_notes(it, a.metadata_tag, a.context_tag, snapshot.strings);
        out += '\n';
      }
      if (i == trace.events.size()) {
        break;
      }
      write_event(it, d, trace.events[i], snapshot.strings);
      if (next_note < trace.notes.size() && trace.notes[next_note].event == i) {
        write_notes(it, trace.notes[next_note].metadata_tag, trace.notes[next_note].context_tag,
                    snapshot.strings);
        ++next_note;
      }
      out += '\n';
    }
  }
  for (const ExternalAnnotation& a : snapshot.external_annotations) {
    fmt::format_to(it, "annotation {} {}", a.device, a.time_ns);
    for (const auto& [key, text] : a.metadata) {
      fmt::format_to(it, " {}={}", encode_key(key), encode_field(text));
    }
    out += '\n';
  }
  return out;
}

}  // namespace vramsim
