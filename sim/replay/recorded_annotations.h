// What a recording says about itself beyond memory: PyTorch's record_function ranges (external_annotations),
// the text attached to allocations after the fact ("annotate" entries, torch.cuda.memory._annotate_memory),
// and the user_metadata / compile_context stamped on trace entries (traces/snapshot.h). replay reports them
// and places its peak among them: which record_function ranges were open, and which user_metadata was in
// force, when reserved memory peaked.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "traces/snapshot.h"

namespace vramsim {

struct RecordedAnnotations {
  std::size_t external = 0;              // external_annotations of the device
  std::size_t annotate_entries = 0;      // "annotate" trace entries
  std::size_t events_with_metadata = 0;  // events carrying user_metadata
  std::size_t distinct_metadata = 0;     // distinct user_metadata texts on events and annotate entries
  std::size_t events_with_compile_context = 0;
  // At the event `at_event` (replay's reserved peak): the record_function ranges open then, outermost first
  // (a START not yet matched by an END of the same name, at a time at or before the event's), and the
  // user_metadata of the last event up to it that carried one ("" = none).
  std::vector<std::string> open_ranges;
  std::string metadata;
  // The annotate entries' texts, in recorded order: the allocation (its base address) and what was said of it.
  struct Annotated {
    std::size_t before_event = 0;
    Bytes addr = 0;
    std::string text;
  };
  std::vector<Annotated> annotated;

  bool any() const {
    return external + annotate_entries + events_with_metadata + events_with_compile_context > 0;
  }
};

// `device`'s annotations; `at_event` indexes its trace's events (clamped to the last).
RecordedAnnotations recorded_annotations(const Snapshot& snapshot, int device, std::size_t at_event);

}  // namespace vramsim
