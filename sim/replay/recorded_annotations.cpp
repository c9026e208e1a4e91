#include "sim/replay/recorded_annotations.h"

#include <algorithm>
#include <unordered_set>

namespace vramsim {

RecordedAnnotations recorded_annotations(const Snapshot& snapshot, int device, std::size_t at_event) {
  RecordedAnnotations out;
  if (device < 0 || static_cast<std::size_t>(device) >= snapshot.device_traces.size()) {
    return out;
  }
  const DeviceTrace& trace = snapshot.device_traces[static_cast<std::size_t>(device)];
  std::unordered_set<std::uint32_t> texts;
  for (const EventNote& note : trace.notes) {
    if (note.metadata_tag != kNoTag) {
      ++out.events_with_metadata;
      texts.insert(note.metadata_tag);
      if (note.event <= at_event) {
        out.metadata = snapshot.strings[note.metadata_tag];
      }
    }
    // PyTorch writes compile_context "N/A" on every entry recorded outside torch.compile
    // (CUDACachingAllocator.cpp's TraceEntry default): it says nothing, so it is not counted.
    out.events_with_compile_context +=
        note.context_tag != kNoTag && snapshot.strings[note.context_tag] != "N/A" ? 1 : 0;
  }
  for (const TraceAnnotation& a : trace.annotations) {
    ++out.annotate_entries;
    if (a.metadata_tag != kNoTag) {
      texts.insert(a.metadata_tag);
    }
    out.annotated.push_back({a.before_event, a.addr, snapshot.strings[a.metadata_tag]});
  }
  out.distinct_metadata = texts.size();

  // record_function ranges: START pushes, END pops the innermost open range of that name (ranges nest per
  // thread; an END without a START, from before the recording began, is ignored).
  const bool has_events = !trace.events.empty();
  const TimeNs at_time = has_events ? trace.events[std::min(at_event, trace.events.size() - 1)].time_ns : 0;
  for (const ExternalAnnotation& a : snapshot.external_annotations) {
    if (a.device != device) {
      continue;
    }
    ++out.external;
    if (!has_events || a.time_ns > at_time) {
      continue;
    }
    const auto stage = a.metadata.find("stage");
    const auto name = a.metadata.find("name");
    if (stage == a.metadata.end() || name == a.metadata.end()) {
      continue;
    }
    if (stage->second == "START") {
      out.open_ranges.push_back(name->second);
    } else if (stage->second == "END") {
      const auto open = std::find(out.open_ranges.rbegin(), out.open_ranges.rend(), name->second);
      if (open != out.open_ranges.rend()) {
        out.open_ranges.erase(std::next(open).base());
      }
    }
  }
  return out;
}

}  // namespace vramsim
