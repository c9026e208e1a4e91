// The `--html FILE` pages of predict, trace and replay: one self-contained page each (no script, nothing
// fetched, readable in print; drawn with sim/report/html_page.h) with the memory over the run (requested
// bytes alive stacked by tensor category, the allocator model's allocated and reserved bytes as lines), the
// peak marked with its op, phase and layer, the segment map at the peak (blocks coloured by category; free
// and inactive-split space visible), and the bill (predict, trace) or the replay's figures (replay).
#pragma once

#include <string>

#include "sim/predict/step_prediction.h"
#include "sim/replay/memory_timeline.h"
#include "sim/replay/recorded_annotations.h"
#include "sim/replay/trace_replay.h"

namespace vramsim {

// predict and trace (deterministic: same input, same bytes). `t` is the allocator model over the run
// (PredictedTimeline::memory, or observe_run()).
std::string html_report(const Prediction& p, const MemoryTimeline& t, const std::string& title);

// replay: the recording replayed through the model; with `notes`, a section of what the recording says about
// itself (record_function ranges open at the reserved peak, user_metadata, annotate entries).
std::string replay_html(const ReplayResult& r, const MemoryTimeline& t, const std::string& title,
                        const RecordedAnnotations* notes = nullptr);

// The memory sections alone: the chart over the run with the peak marked by `peak_label`, and the segment map
// at the peak.
std::string memory_sections(const MemoryTimeline& t, const std::string& peak_label);

}  // namespace vramsim
