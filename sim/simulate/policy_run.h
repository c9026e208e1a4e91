// One allocator policy over one request sequence, measured the same way for every policy: what `vramsim
// compare` prints per row and `vramsim sweep` samples per step, and the road by which `predict` and `trace`
// drive the caching allocator model with their workloads (sim/alloc/workload.h) and observe it.
//
// The run starts from an empty device of `capacity_bytes`, or, on a recording (PolicyRunOptions::recording),
// from the state the recording began in: the sequence's first allocations are then the blocks live at trace
// start, which every policy allocates in that order, except the native policies (pytorch,
// pytorch-expandable), which adopt the recorded segments as they were, cached free blocks included, as
// `vramsim replay` does (a free of a block that was freed before the trace and completes in it then completes
// its stream events). A request the policy cannot serve is an OOM: it is counted, the tensor is dropped (its
// free is skipped) and the run goes on, so one sequence yields the number of failing requests rather than
// stopping at the first (a training job would stop there).
//
// Figures (bytes unless named otherwise):
//   * peaks of reserved, allocated, active and requested memory (sim/report/peak_tracker.h);
//   * fragmentation = 1 - peak active / peak reserved (the GMLake metric);
//   * at the moment reserved memory first reaches its peak: inactive-split bytes (free blocks inside split
//     segments that empty_cache cannot return);
//   * at the moment allocated memory first reaches its peak (the worst demand): the free bytes inside
//     reserved memory and the largest free block among them: a request larger than that block needs new
//     device memory even though the total free may cover it. (Not at the reserved peak: an arena policy
//     reserves its peak with its first request, when everything is still free.)
//   * device malloc / free counts (cudaMalloc/cudaFree, or maps/unmaps for virtual-memory policies count as
//     the policy reports them through its segment events), OOMs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/registry.h"
#include "sim/alloc/request_sequence.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/report/memory_stats.h"
#include "sim/report/peak_tracker.h"
#include "traces/snapshot.h"

namespace vramsim {

struct PolicyRunOptions {
  Bytes capacity_bytes = Bytes{1} << 60;  // the device the policy may cudaMalloc from; default: unlimited
  CachingConfig config;                   // for the policies that read allocator settings (pytorch*)
  // Op indices (into the sequence's ops) after which a step ends, ascending; a sample is taken at each.
  std::vector<std::size_t> step_ends;
  // A recording's requests and start state (its `sequence` must be the one run); empty_cache() is called
  // where it says. nullptr: a sequence that starts from an empty allocator.
  const TraceRequests* recording = nullptr;
  // Keep the reserved, allocated and requested bytes after every request (PolicyRunResult::curve), for the
  // per-policy curves of `compare --html`.
  bool keep_curve = false;
  // Called after the policy took each request (index into the sequence's ops), with its statistics then:
  // reports observe the allocator through this, never by re-counting request sizes.
  std::function<void(std::size_t request_index, const DeviceStats& stats)> on_request;
  // Also told every event of the policy (its cudaMalloc / cudaFree / map / unmap and OOMs among them), before
  // the on_request of the request that caused it. Not owned; nullptr: none.
  IAllocObserver* observer = nullptr;
  // Keep the policy's segments and blocks right after this request (PolicyRunResult::segments_at_request):
  // the state at a peak, for the segment map of a report.
  std::optional<std::size_t> segments_after_request;
  // Measure the free bytes and the largest free block at the allocated peak (a second pass up to it).
  bool free_space_at_allocated_peak = true;
};

// The state after one request (PolicyRunOptions::keep_curve).
struct CurvePoint {
  std::int64_t reserved_bytes = 0;
  std::int64_t allocated_bytes = 0;
  std::int64_t requested_bytes = 0;
};

// The state after a step's last request.
struct StepSample {
  std::size_t step = 0;  // 0-based index into PolicyRunOptions::step_ends
  std::int64_t reserved_bytes = 0;
  std::int64_t allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;  // running peak through this step
  std::int64_t peak_active_bytes = 0;    // running peak through this step
  std::int64_t num_ooms = 0;             // requests that failed in this step
  // 1 - peak active / peak reserved over the run so far.
  double fragmentation() const {
    return peak_reserved_bytes > 0
               ? 1.0 - static_cast<double>(peak_active_bytes) / static_cast<double>(peak_reserved_bytes)
               : 0.0;
  }
};

struct PolicyRunResult {
  std::string policy;
  PeakSummary peaks;
  std::int64_t free_bytes_at_allocated_peak = 0;          // reserved - allocated, counted from the blocks
  std::int64_t largest_free_block_at_allocated_peak = 0;  // one contiguous free block
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::int64_t num_ooms = 0;
  std::int64_t final_reserved_bytes = 0;
  std::vector<StepSample> steps;
  std::vector<CurvePoint> curve;  // one per request, with keep_curve
  // With PolicyRunOptions::segments_after_request (empty when the sequence ends before it).
  std::vector<SnapshotSegment> segments_at_request;
};

// "a,b,c" -> those registry entries, in that order; "all" or "" -> every registered policy. Throws InputError
// (naming `option` and the known policies) on an unknown or repeated name.
std::vector<const PolicyEntry*> parse_policy_list(std::string_view list, std::string_view option);

// Throws InputError when the options name a step end outside the sequence. Deterministic.
PolicyRunResult run_policy(const PolicyEntry& policy, const RequestSequence& sequence,
                           const PolicyRunOptions& options);

}  // namespace vramsim
