// From an op graph to the allocation schedule the allocator model replays: one kAlloc when a tensor's
// producer op starts, one kFreeRequested + kFreeCompleted after its last consumer (never for persistent
// tensors). Within an op, allocations come first (tensor order), then the frees.
//
// Events use the trace vocabulary of traces/trace_event.h: addr = a synthetic address unique per tensor,
// size = the tensor's bytes (requested, unrounded, as PyTorch records them), stream 0, op_tag = the op's
// name, category_tag = the tensor's category and phase_tag = phase_name() of the op's phase, all indices into
// `strings` (index 0 = ""), and layer = the op's decoder layer (kNoLayer outside the layers). The op is the
// producer for an allocation and the last consumer for a free.
// Cost: O(ops + tensors).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/workload.h"
#include "sim/graph/op_graph.h"
#include "traces/snapshot.h"
#include "traces/trace_event.h"

namespace vramsim {

struct PhaseMarker {
  int step = 0;
  int micro_batch = 0;
  Phase phase = Phase::kSetup;
  std::size_t event_index = 0;  // index of the phase's first event (== events.size() if it has none left)
};

struct AllocationSchedule {
  std::vector<TraceEvent> events;
  std::vector<std::string> strings{""};
  std::vector<TensorId> event_tensor;          // per event
  std::vector<PhaseMarker> phases;             // in execution order
  std::vector<std::int64_t> live_bytes_after;  // allocated bytes after each event
  std::int64_t peak_live_bytes = 0;
  std::size_t peak_event_index = 0;  // the event after which the peak was first reached

  // Allocated bytes just before event `event_index` (0 before the first event).
  std::int64_t live_bytes_before(std::size_t event_index) const;
  // The first marker of (step, phase) over all micro-batches, or of the given micro-batch.
  std::optional<PhaseMarker> phase_begin(int step, Phase phase,
                                         std::optional<int> micro_batch = std::nullopt) const;
  // Allocated bytes where (step, phase) begins: "after forward" = live_bytes_at(step, kLoss) etc.
  std::optional<std::int64_t> live_bytes_at(int step, Phase phase) const;
};

// Synthetic address of a tensor's block in generated traces.
constexpr Bytes synthetic_address(TensorId id) { return (static_cast<Bytes>(id) + 1) * 512; }

AllocationSchedule build_allocation_schedule(const OpGraph& graph);

// The schedule as the allocator model takes it: one request per allocation and one per free (the schedule
// never delays a free, so its free_requested and free_completed are one request), labelled with the event's
// op, category, phase and layer; its phase markers (named by phase_name()) at the request where each phase
// begins. `request_tensor`, when given, receives the tensor of each request. O(events).
Workload workload_from_schedule(const AllocationSchedule& schedule, std::string source,
                                std::vector<TensorId>* request_tensor = nullptr);
// The same, taking over `schedule`'s string table instead of copying it (its other fields stay as they were).
Workload workload_from_schedule(AllocationSchedule&& schedule, std::string source,
                                std::vector<TensorId>* request_tensor = nullptr);

// The schedule in the recording format (has_final_state = false, one device): what `--trace-out` writes.
Snapshot schedule_to_snapshot(const AllocationSchedule& schedule, std::string source);

}  // namespace vramsim
