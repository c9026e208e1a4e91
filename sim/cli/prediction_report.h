// The report `predict` and `trace` print: the same figures, the same words and the same JSON keys, whether
// the allocations came from the simulated op graph or from a traced program.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/predict/step_prediction.h"

namespace vramsim::cli {

struct ReportText {
  std::string phases_note;  // how the phase figures were observed
  std::string steps_note;   // how the per-step figures were observed
};

// The machine-readable form (`--json`): model, gpu, peaks, fits, headroom, bill{}, peak{}, phases{},
// steps[], timing, ops, events.
nlohmann::ordered_json prediction_json(const Prediction& p, const ReportText& text);

// Everything from the device line on; the caller prints what ran (model and options, or the script) first.
void print_prediction(const Prediction& p, const ReportText& text);

// Writes `text` to `path` (--html, --perfetto); throws InputError "PATH: cannot write the WHAT".
void write_output_file(const std::string& path, const std::string& text, const char* what);

}  // namespace vramsim::cli
