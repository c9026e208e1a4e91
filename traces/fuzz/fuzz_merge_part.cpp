// libFuzzer target for `vramsim merge`'s part reader: the bounded JSON parser, the value check, then the
// sweep or plan merge of the part on its own. Any input must either merge or throw InputError - no crash,
// hang, sanitizer report or other exception. (Run with -close_fd_mask=1: a part that merges is printed.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/cli/commands.h"
#include "sim/core/error.h"
#include "traces/json_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> names = {"fuzz.json"};
  try {
    std::vector<nlohmann::json> parts;
    parts.push_back(vramsim::parse_json_input(std::string_view(reinterpret_cast<const char*>(data), size),
                                              names[0], vramsim::kMaxSmallJsonMemory));
    vramsim::check_json_values(parts.back(), names[0]);
    if (vramsim::cli::is_sweep_shard(parts.front())) {
      (void)vramsim::cli::merge_sweep_shards(parts, names, /*json=*/true, "");
    } else {
      vramsim::PlanRequest request;
      (void)vramsim::merge_plan_shards(parts, names, request);
    }
  } catch (const vramsim::InputError&) {
  }
  return 0;
}
