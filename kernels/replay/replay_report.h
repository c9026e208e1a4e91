// What vramsim-replay prints: the text summary and the --json object (keys documented in kernels/README.md).
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/replay/replay_plan.h"
#include "kernels/replay/replay_runner.h"

namespace vramsim::hw {

// What the run was asked to do, for the report header.
struct ReplaySetup {
  std::string backend_summary;
  std::string policy;             // "" unless the backend takes a policy
  std::string alloc_conf;         // the policy's settings as text
  std::string alloc_conf_origin;  // "--alloc-conf", "recorded allocator_settings", "default"
  bool verify = false;
};

void print_replay_text(std::ostream& out, const ReplayPlan& plan, const ReplaySetup& setup,
                       const ReplayRunResult& result);
nlohmann::ordered_json replay_json(const ReplayPlan& plan, const ReplaySetup& setup,
                                   const ReplayRunResult& result, bool with_rows);

}  // namespace vramsim::hw
