// `vramsim replay`: run a recorded or generated trace through an allocator model and, with --check, score
// the model against what the recording says the real allocator did.
//
// Mapping a recorded trace to model commands (spec Appendix A):
//   alloc            -> allocate(size, stream); its preceding segment events are the device's answers
//   free_requested   -> free; when free_completed does not follow at once, the block was record_stream'ed:
//                       the free is deferred until that free_completed (spec ST3)
//   oom              -> allocate, with the device refusing as it did on the GPU
//   a burst of segment_free / segment_unmap not followed by an alloc -> empty_cache(); a burst at the very
//                       start of a trace is an empty_cache too (the usual recipe: record, empty_cache, run);
//                       a burst right before an alloc is that alloc's OOM retry, and a warning says that the
//                       reading is ambiguous unless the trace has explicit empty_cache events
//   empty_cache (vtrace) -> empty_cache(pool); the segment_free / segment_unmap entries after it are its
//   answers pool_create, pool_use_on_oom, capture_begin, pool_begin, pool_end, pool_release (vtrace)
//                    -> createOrIncrefPool, setUseOnOOM, beginAllocateToPool(stream / every stream),
//                       endAllocateToPool, releasePool (sim/alloc/private_pool.h); with a use_on_oom pool in
//                       the trace, a cudaMalloc the recording does not show counts as refused
//                       (try_mempool_fallback served the request, which PyTorch does not trace)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/private_pool.h"
#include "sim/replay/recorded_device.h"
#include "sim/report/memory_stats.h"
#include "sim/report/peak_tracker.h"
#include "traces/snapshot.h"

namespace vramsim {

struct ReplayOptions {
  int device = -1;  // -1: the first device whose trace has events (else 0); a device without a trace is an
                    // InputError listing the devices that have one
  std::optional<std::string> alloc_conf;  // overrides the recorded allocator_settings
  // The PyTorch release whose allocator rules the replay follows (--torch-version). nullopt: the snapshot's
  // release where it records one, else the newest modelled. No snapshot format records the release (PyTorch's
  // torch.cuda.memory._snapshot() returns segments, device_traces, allocator_settings and
  // external_annotations: none carries torch.__version__), so nullopt is the newest modelled release.
  std::optional<TorchVersion> torch_version;
  Bytes capacity_bytes = 0;  // 0: follow the recorded cudaMalloc outcomes
  // Called after the model has taken each event of the trace (index into the device's events; an
  // alloc's own free_completed and the segment events that feed an alloc are reported with it), with the
  // model's statistics at that point. Reports observe the allocator through this, not a re-count.
  std::function<void(std::size_t event_index, const DeviceStats& stats)> on_event;
  // Also told every allocator event of the model (its cudaMalloc / cudaFree / map / unmap and OOMs among
  // them), before the on_event of the trace event that caused it. Not owned; nullptr: none.
  IAllocObserver* observer = nullptr;
  // The model's segments and blocks right after this event (the first event the model takes at or after it)
  // are kept in ReplayResult::segments_at_event: the state at a peak, for the segment map of a report.
  std::optional<std::size_t> segments_after_event;
};

struct CheckReport {
  std::size_t segment_events_recorded = 0;
  std::size_t segment_events_matched = 0;
  std::size_t model_segment_events = 0;
  std::size_t allocs_recorded = 0;
  std::size_t allocs_same_offset = 0;
  std::size_t frees_recorded = 0;
  std::size_t ooms_recorded = 0;
  bool has_final_state = false;
  std::size_t final_segments_recorded = 0;
  std::size_t final_segments_matched = 0;
  std::size_t final_blocks_recorded = 0;
  std::size_t final_blocks_matched = 0;
  std::int64_t recorded_peak_reserved_bytes = 0;   // rebuilt from the trace's segment events
  std::int64_t recorded_peak_requested_bytes = 0;  // rebuilt from alloc / free_completed sizes
  std::optional<Divergence> first_divergence;
  std::vector<std::string> invariant_violations;  // static checks of the recorded snapshot

  bool identical(const PeakSummary& model) const;
};

struct ReplayResult {
  std::string source;
  int device = 0;
  std::size_t events = 0;
  std::string policy = "pytorch";
  CachingConfig config;
  std::string config_origin;         // "recorded allocator_settings", "--alloc-conf", "default"
  std::string torch_version_origin;  // "--torch-version" or why the default was taken (config.torch_version)
  bool starts_mid_run = false;
  Bytes reserved_at_start_bytes = 0;
  std::int64_t requested_at_start_bytes = 0;  // requested bytes of the blocks live at trace start
  std::size_t guessed_block_sizes = 0;
  std::size_t placed_block_sizes = 0;          // of those, ended where a later allocation in the trace starts
  std::size_t recorded_failures_followed = 0;  // cudaMalloc / map calls refused because the GPU refused them
  std::size_t capacity_refusals = 0;           // ... refused because --capacity was exceeded
  Bytes capacity_bytes = 0;                    // --capacity, 0 = not given
  // The device limit the recording implies for this allocator: at least the recorded peak reserved; below the
  // smallest reserved + request whose cudaMalloc failed (0 = no failure recorded, no upper bound).
  Bytes inferred_capacity_below_bytes = 0;
  DeviceStats stats;
  PeakSummary peaks;
  CheckReport check;
  std::vector<SnapshotSegment> final_segments;  // the model's state at the end
  // With ReplayOptions::segments_after_event: the model's state after that event (empty when the trace ends
  // before it).
  std::vector<SnapshotSegment> segments_at_event;
  std::size_t pool_events = 0;  // pool_* / capture_begin events taken
  std::vector<PrivatePool>
      private_pools;                  // every private pool the replay made, in creation order, at the end
  std::vector<std::string> warnings;  // one line each, naming the file
};

// The allocator settings a replay uses: --alloc-conf when given, else the recording's allocator_settings,
// else PyTorch's defaults; `origin` says which. Without --alloc-conf, expandable_segments is on whenever the
// recording shows expandable memory on the replayed device (options.device; -1: the first one with a trace):
// a segment with is_expandable, or a segment_map / segment_unmap entry.
CachingConfig resolve_config(const Snapshot& snapshot, const ReplayOptions& options, std::string& origin);
// The recording's allocator_settings alone (PyTorch's defaults when it has none).
CachingConfig resolve_recorded_config(const Snapshot& snapshot, std::string& origin);
// True when one of `device`'s segments is expandable or its trace maps / unmaps pages.
bool recorded_expandable_segments(const Snapshot& snapshot, int device);

// The device a replay of `snapshot` uses: `requested` when >= 0 (InputError when it has neither a trace nor
// segments there), else the first device whose trace has events, else the device of the first segment.
int replay_device(const Snapshot& snapshot, int requested);

// Throws InputError for traces that contradict themselves (free of an unknown address, ...) and bad options.
ReplayResult replay_snapshot(const Snapshot& snapshot, const ReplayOptions& options);

}  // namespace vramsim
