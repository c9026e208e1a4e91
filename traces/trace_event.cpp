#include "traces/trace_event.h"

#include <array>
#include <utility>

namespace vramsim {
namespace {
constexpr std::array<std::pair<std::string_view, TraceAction>, 16> kActionNames{{
    {"alloc", TraceAction::kAlloc},
    {"free_requested", TraceAction::kFreeRequested},
    {"free_completed", TraceAction::kFreeCompleted},
    {"segment_alloc", TraceAction::kSegmentAlloc},
    {"segment_free", TraceAction::kSegmentFree},
    {"segment_map", TraceAction::kSegmentMap},
    {"segment_unmap", TraceAction::kSegmentUnmap},
    {"oom", TraceAction::kOom},
    {"snapshot", TraceAction::kSnapshot},
    {"pool_create", TraceAction::kPoolCreate},
    {"pool_use_on_oom", TraceAction::kPoolUseOnOom},
    {"capture_begin", TraceAction::kCaptureBegin},
    {"pool_begin", TraceAction::kPoolBegin},
    {"pool_end", TraceAction::kPoolEnd},
    {"pool_release", TraceAction::kPoolRelease},
    {"empty_cache", TraceAction::kEmptyCache},
}};
}  // namespace

std::optional<TraceAction> parse_trace_action(std::string_view name) {
  for (const auto& [text, action] : kActionNames) {
    if (text == name) {
      return action;
    }
  }
  return std::nullopt;
}

std::string_view trace_action_name(TraceAction action) {
  for (const auto& [text, a] : kActionNames) {
    if (a == action) {
      return text;
    }
  }
  return "?";
}

}  // namespace vramsim
