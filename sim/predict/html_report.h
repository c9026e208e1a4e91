// `predict --html FILE`: one self-contained page (no script, nothing fetched, readable in print) with the
// predicted memory over time stacked by tensor category (the project's own SVG), the peak marked with its
// op, phase and layer, and the bill at the peak.
#pragma once

#include <string>

#include "sim/predict/perfetto_trace.h"
#include "sim/predict/step_prediction.h"

namespace vramsim {

// The page (deterministic: same input, same bytes). `t` is the prediction's timeline (keep_timeline).
std::string html_report(const Prediction& p, const PredictedTimeline& t, const std::string& title);

}  // namespace vramsim
