#include "sim/replay/request_sequence_from_trace.h"

#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

RequestSequence request_sequence_from_trace(const Snapshot& snapshot, int device) {
  if (device < 0) {
    device = 0;
    for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
      if (!snapshot.device_traces[d].events.empty()) {
        device = static_cast<int>(d);
        break;
      }
    }
  }
  const auto dev = static_cast<std::size_t>(device);
  if (dev >= snapshot.device_traces.size()) {
    if (device == 0) {
      return {};  // no trace at all: nothing was requested
    }
    throw InputError(fmt::format("{}: device {}: no trace for that device", snapshot.source, device));
  }
  RequestSequence sequence;
  std::unordered_map<Bytes, std::size_t> live;  // address -> allocation id
  const std::vector<TraceEvent>& events = snapshot.device_traces[dev].events;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.action == TraceAction::kAlloc) {
      if (e.size_bytes == 0) {
        continue;  // nothing requested (PyTorch does not record these; be lenient with generated traces)
      }
      const auto [it, inserted] = live.emplace(e.addr, 0);
      if (!inserted) {
        throw InputError(fmt::format("{}: device_traces[{}][{}]: alloc at 0x{:x}, which is still allocated",
                                     snapshot.source, device, i, e.addr));
      }
      it->second = sequence.add_alloc(e.size_bytes, e.stream);
    } else if (e.action == TraceAction::kFreeRequested) {
      auto it = live.find(e.addr);
      if (it != live.end()) {
        sequence.add_free(it->second);
        live.erase(it);
      }
    }
  }
  return sequence;
}

}  // namespace vramsim
