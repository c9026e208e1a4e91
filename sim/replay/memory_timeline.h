// What the allocator model did over a run, for the pictures (`--html`, `--perfetto`) of predict, trace and
// replay: its allocated, reserved and active bytes after every event, the requested bytes alive per tensor
// category (from the trace's category tags; a recording has none), its own device calls (cudaMalloc,
// cudaFree, map, unmap) and OOMs, and its segments and blocks at the peak of allocated memory. Everything is
// observed on the model replaying the trace (replay_snapshot), nothing re-counted from request sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/alloc/workload.h"
#include "sim/replay/trace_replay.h"
#include "sim/simulate/policy_run.h"
#include "traces/snapshot.h"

namespace vramsim {

struct MemoryTimeline {
  struct Sample {
    std::size_t event_index = 0;  // into the replayed device's trace, or the workload's requests
    TimeNs time_ns = 0;           // the event's or request's time (0 when the run has none)
    std::int64_t allocated_bytes = 0;
    std::int64_t reserved_bytes = 0;
    std::int64_t active_bytes = 0;
    std::vector<std::int64_t> requested_bytes;  // per category, in `categories` order
  };
  // A call the model made to the device: segment_alloc (cudaMalloc), segment_free (cudaFree), segment_map,
  // segment_unmap, or an OOM (size = the rounded request).
  struct DeviceCall {
    std::size_t event_index = 0;  // the trace event that caused it
    TimeNs time_ns = 0;
    TraceAction action = TraceAction::kSegmentAlloc;
    Bytes size_bytes = 0;
    StreamId stream = 0;
  };
  // The requested-bytes series: the trace's tensor categories in the order category tags first appear, and
  // "untagged" for allocations without one (every allocation of a real recording); a category's allocation
  // is alive from its alloc to its free_completed.
  std::vector<std::string> categories;
  bool tagged = false;  // some allocation had a category tag
  // Requested bytes alive at the start of the trace (a recording that starts mid-run: the blocks the model
  // adopted). When > 0, categories[0] is "live at trace start": those bytes, less the ones the trace frees.
  std::int64_t requested_at_start_bytes = 0;
  std::vector<Sample> samples;  // one per event the model took, in trace order
  std::vector<DeviceCall> device_calls;
  std::size_t peak_sample = 0;  // the first sample with the highest allocated bytes
  // The model's state right after the peak sample, and the category index (into `categories`) of every block
  // allocated then, by block address (-1: allocated before the trace).
  std::vector<SnapshotSegment> segments_at_peak;
  std::vector<std::pair<Bytes, int>> block_category_at_peak;  // sorted by address
};

// Replays device `options.device` of `trace` through the allocator model (twice: once to observe, once to
// stop at the peak) and returns what it did. Throws InputError as replay_snapshot does. Deterministic.
MemoryTimeline observe_memory_timeline(const Snapshot& trace, ReplayOptions options);

// The same for a workload (predict's and trace's runs) driving the caching allocator model as
// run_policy() does with `options` (capacity, allocator settings): samples after every request, requested
// bytes per category from the requests' labels. Runs the model twice. Deterministic.
MemoryTimeline observe_workload_timeline(const Workload& workload, PolicyRunOptions options);

}  // namespace vramsim
