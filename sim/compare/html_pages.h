// The `--html FILE` pages of compare and sweep (drawn with sim/report/html_page.h): self-contained, no
// script, nothing fetched, readable in print.
//   compare: the table of every policy's figures and, per policy, its reserved bytes over the requests (with
//            the requested bytes alive, the same for every policy), from PolicyRunOptions::keep_curve runs;
//   sweep:   the distribution of the shapes drawn (sequence lengths, batch sizes, tokens per step), and per
//            policy its reserved bytes and running fragmentation after every step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/compare/dynamic_shapes.h"
#include "sim/simulate/policy_run.h"

namespace vramsim {

// `results` from runs with keep_curve. Deterministic.
std::string compare_html(const std::vector<PolicyRunResult>& results, const std::string& source,
                         std::int64_t peak_live_bytes, const std::string& title);

std::string sweep_html(const std::vector<PolicyRunResult>& results, const DynamicRun& run,
                       std::int64_t peak_live_bytes, const std::string& title);

}  // namespace vramsim
