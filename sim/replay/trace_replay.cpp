#include "sim/replay/trace_replay.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/alloc/size_classes.h"
#include "sim/core/address_map.h"
#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/replay/adopt_initial_state.h"
#include "sim/replay/initial_state.h"
#include "sim/replay/model_snapshot.h"
#include "traces/snapshot_invariants.h"

namespace vramsim {
namespace {

// "0, 2": the devices whose trace has events.
std::string devices_with_a_trace(const Snapshot& snapshot) {
  std::string list;
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (!snapshot.device_traces[d].events.empty()) {
      list += fmt::format("{}{}", list.empty() ? "" : ", ", d);
    }
  }
  return list;
}

}  // namespace

int replay_device(const Snapshot& snapshot, int requested) {
  if (requested >= 0) {
    const auto d = static_cast<std::size_t>(requested);
    const bool has_trace = d < snapshot.device_traces.size() && !snapshot.device_traces[d].events.empty();
    const std::string traced = devices_with_a_trace(snapshot);
    if (!has_trace && !traced.empty()) {
      throw InputError(fmt::format("--device {}: {} has no trace for that device; devices with a trace: {}",
                                   requested, snapshot.source, traced));
    }
    bool has_segments = false;
    for (const SnapshotSegment& s : snapshot.segments) {
      has_segments = has_segments || s.device == requested;
    }
    if (!has_trace && !has_segments && requested != 0) {
      throw InputError(fmt::format("--device {}: {} has no trace or segments for that device", requested,
                                   snapshot.source));
    }
    return requested;
  }
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (!snapshot.device_traces[d].events.empty()) {
      return static_cast<int>(d);
    }
  }
  return snapshot.segments.empty() ? 0 : snapshot.segments.front().device;
}

namespace {

void compare_final_state(const Snapshot& snapshot, int device, const std::vector<SnapshotSegment>& model,
                         CheckReport& check) {
  std::map<Bytes, const SnapshotSegment*> by_addr;
  for (const SnapshotSegment& s : model) {
    by_addr[s.address] = &s;
  }
  std::map<Bytes, const SnapshotBlock*> model_blocks;
  for (const SnapshotSegment& s : model) {
    for (const SnapshotBlock& b : s.blocks) {
      model_blocks[b.address] = &b;
    }
  }
  for (const SnapshotSegment& rec : snapshot.segments) {
    if (rec.device != device) {
      continue;
    }
    ++check.final_segments_recorded;
    bool segment_same = false;
    if (auto it = by_addr.find(rec.address); it != by_addr.end()) {
      segment_same = it->second->total_size_bytes == rec.total_size_bytes &&
                     it->second->blocks.size() == rec.blocks.size() &&
                     it->second->pool_id_first == rec.pool_id_first &&
                     it->second->pool_id_second == rec.pool_id_second;
    }
    for (const SnapshotBlock& rb : rec.blocks) {
      ++check.final_blocks_recorded;
      auto it = model_blocks.find(rb.address);
      const bool same =
          it != model_blocks.end() && it->second->size_bytes == rb.size_bytes &&
          it->second->state == rb.state &&
          (rb.state == BlockState::kInactive || it->second->requested_bytes == rb.requested_bytes);
      check.final_blocks_matched += same ? 1 : 0;
      segment_same = segment_same && same;
    }
    check.final_segments_matched += segment_same ? 1 : 0;
  }
}

// The peaks the recording itself implies: reserved from the segment events, requested from the alloc and
// free_completed sizes, both starting from the rebuilt initial state.
void record_recorded_peaks(const std::vector<TraceEvent>& events, std::int64_t reserved,
                           std::int64_t requested, CheckReport& check) {
  check.recorded_peak_reserved_bytes = reserved;
  check.recorded_peak_requested_bytes = requested;
  for (const TraceEvent& e : events) {
    const auto size = static_cast<std::int64_t>(e.size_bytes);
    switch (e.action) {
      case TraceAction::kSegmentAlloc:
      case TraceAction::kSegmentMap:
        reserved += size;
        break;
      case TraceAction::kSegmentFree:
      case TraceAction::kSegmentUnmap:
        reserved -= size;
        break;
      case TraceAction::kAlloc:
        requested += size;
        break;
      case TraceAction::kFreeCompleted:
        requested -= size;
        break;
      default:
        break;
    }
    check.recorded_peak_reserved_bytes = std::max(check.recorded_peak_reserved_bytes, reserved);
    check.recorded_peak_requested_bytes = std::max(check.recorded_peak_requested_bytes, requested);
  }
}

// A pool event of the trace, told to the policy (names as in DeviceCachingAllocator).
void apply_pool_event(PyTorchCachingPolicy& policy, const TraceEvent& e) {
  const MempoolId id{static_cast<std::int64_t>(e.addr), static_cast<std::int64_t>(e.size_bytes)};
  switch (e.action) {
    case TraceAction::kPoolCreate:
      policy.create_or_incref_pool(id);
      break;
    case TraceAction::kPoolUseOnOom:
      if (e.stream > 1) {
        throw InputError(
            fmt::format("pool_use_on_oom: the stream field holds the flag, 0 or 1; got {}", e.stream));
      }
      policy.set_use_on_oom(id, e.stream == 1);
      break;
    case TraceAction::kCaptureBegin:
      policy.begin_allocate_to_pool(id, e.stream);
      break;
    case TraceAction::kPoolBegin:
      policy.begin_allocate_to_pool(id, std::nullopt);
      break;
    case TraceAction::kPoolEnd:
      policy.end_allocate_to_pool(id);
      break;
    case TraceAction::kPoolRelease:
      policy.release_pool(id);
      break;
    default:
      SIM_ASSERT(false);
  }
}

}  // namespace

bool recorded_expandable_segments(const Snapshot& snapshot, int device) {
  for (const SnapshotSegment& s : snapshot.segments) {
    if (s.device == device && s.is_expandable) {
      return true;
    }
  }
  const auto d = static_cast<std::size_t>(device);
  if (d < snapshot.device_traces.size()) {
    for (const TraceEvent& e : snapshot.device_traces[d].events) {
      if (e.action == TraceAction::kSegmentMap || e.action == TraceAction::kSegmentUnmap) {
        return true;
      }
    }
  }
  return false;
}

CachingConfig resolve_config(const Snapshot& snapshot, const ReplayOptions& options, std::string& origin) {
  const TorchVersion version = options.torch_version.value_or(kNewestModelledTorch);
  if (options.alloc_conf) {
    origin = "--alloc-conf";
    CachingConfig base;
    base.torch_version = version;
    return parse_alloc_conf(*options.alloc_conf, "--alloc-conf", base);
  }
  CachingConfig c = resolve_recorded_config(snapshot, origin);
  if (!c.expandable_segments &&
      recorded_expandable_segments(snapshot, replay_device(snapshot, options.device))) {
    c.expandable_segments = true;  // the segments say so, whatever the settings string says (spec E9)
    origin += "; expandable_segments from the recorded segments";
  }
  if (options.torch_version) {
    c = with_torch_version(c, version,
                           fmt::format("--torch-version {}: {}", version.text(), snapshot.source));
  }
  return c;
}

CachingConfig resolve_recorded_config(const Snapshot& snapshot, std::string& origin) {
  if (!snapshot.allocator_settings) {
    origin = "default (the file records no allocator_settings)";
    return CachingConfig{};
  }
  origin = "recorded allocator_settings";
  const RecordedAllocatorSettings& s = *snapshot.allocator_settings;
  CachingConfig c;
  c.text = s.alloc_conf;
  c.max_split_size_bytes = s.max_split_size < 0 ? kUnlimitedSplitSize : static_cast<Bytes>(s.max_split_size);
  c.garbage_collection_threshold = s.garbage_collection_threshold;
  c.expandable_segments = s.expandable_segments;
  c.roundup_power2_divisions = s.roundup_power2_divisions;
  return c;
}

bool CheckReport::identical(const PeakSummary& model) const {
  return segment_events_matched == segment_events_recorded &&
         model_segment_events == segment_events_recorded && allocs_same_offset == allocs_recorded &&
         final_segments_matched == final_segments_recorded && final_blocks_matched == final_blocks_recorded &&
         !first_divergence && invariant_violations.empty() &&
         model.peak_reserved_bytes == recorded_peak_reserved_bytes &&
         model.peak_requested_bytes == recorded_peak_requested_bytes;
}

ReplayResult replay_snapshot(const Snapshot& snapshot, const ReplayOptions& options) {
  ReplayResult result;
  result.source = snapshot.source;
  result.device = replay_device(snapshot, options.device);
  result.config = resolve_config(snapshot, options, result.config_origin);
  result.torch_version_origin = options.torch_version
                                    ? "--torch-version"
                                    : "newest modelled (the snapshot does not record its PyTorch release)";
  if (result.config.per_process_memory_fraction && options.capacity_bytes == 0) {
    throw InputError(
        "--alloc-conf: per_process_memory_fraction needs --capacity: the fraction is of the device "
        "total, which a snapshot does not record");
  }
  result.policy = result.config.expandable_segments ? "pytorch-expandable" : "pytorch";
  const std::size_t dev = static_cast<std::size_t>(result.device);
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      dev < snapshot.device_traces.size() ? snapshot.device_traces[dev].events : kNoEvents;
  result.events = events.size();

  // The state at trace start is rebuilt with the settings the run uses: with --alloc-conf that are not the
  // recording's, a block the recording sized one way may not fit another way. That is the option's doing,
  // not the file's.
  const InitialState initial = [&] {
    try {
      return rebuild_initial_state(snapshot, result.device, result.config);
    } catch (const InputError& e) {
      if (!options.alloc_conf) {
        throw;
      }
      throw InputError(fmt::format(
          "--alloc-conf: '{}' cannot rebuild the allocator state at the trace's start ({}): the recording "
          "was "
          "made with other settings; replay it without them, or compare its requests under them with vramsim "
          "compare",
          *options.alloc_conf, e.what()));
    }
  }();
  result.starts_mid_run = !initial.starts_empty();
  result.reserved_at_start_bytes = initial.reserved_bytes;
  result.guessed_block_sizes = initial.guessed_blocks;
  result.placed_block_sizes = initial.placed_blocks;

  // A device smaller than what the allocator already holds when the trace starts could never have run the
  // recording: its cudaMallocs would have failed before the trace began. No replay answers that.
  if (options.capacity_bytes != 0 && initial.reserved_bytes > options.capacity_bytes) {
    throw InputError(fmt::format(
        "--capacity: {} is below the {} {} held reserved at trace start: a device that small could not have "
        "run the recording",
        format_bytes_short(options.capacity_bytes), format_bytes_short(initial.reserved_bytes),
        snapshot.source));
  }
  RecordedDevice device(events, options.capacity_bytes, initial.reserved_bytes);
  device.set_refuse_unrecorded(std::any_of(events.begin(), events.end(), [](const TraceEvent& e) {
    return e.action == TraceAction::kPoolUseOnOom && e.stream == 1;
  }));
  MemoryStatsObserver stats(result.config.max_split_size_bytes == kUnlimitedSplitSize
                                ? -1
                                : static_cast<std::int64_t>(result.config.max_split_size_bytes));
  AllocObservers observers;
  observers.add(&stats);
  if (options.observer != nullptr) {
    observers.add(options.observer);
  }
  PyTorchCachingPolicy policy(result.config, device, observers);

  // Blocks live at trace start, by recorded address.
  AdoptedState adopted = adopt_initial_state(policy, initial, device.total_bytes(), snapshot.source);
  // Flat tables (sim/core/address_map.h): an alloc and its free allocate nothing.
  AddressMap<BlockId> live;
  for (const auto& [addr, block] : adopted.live) {
    live.insert(addr, block);
  }
  AddressMap<BlockId> pending;  // freed, waiting for free_completed
  // An OOM's synchronize_and_free_events frees every pending block at once; the block ids are recycled, so a
  // pending address whose id turns up pending again was freed by it. Its free_completed is then a no-op, as
  // is that of an alloc the model refused.
  std::unordered_map<BlockId, Bytes> pending_owner;
  std::unordered_set<Bytes> no_pending_free;
  std::unordered_set<Bytes> refused;  // recorded allocs the model could not serve
  const std::vector<Bytes>& pending_at_start = adopted.pending_at_start;
  const std::int64_t recorded_requested = adopted.requested_bytes;
  result.requested_at_start_bytes = recorded_requested;
  for (Bytes addr : pending_at_start) {  // freed before the trace, still waiting on stream events
    policy.record_stream(live[addr], kDeferredFreeStream);
    policy.free(live[addr], 0);
    pending[addr] = live[addr];
    pending_owner[live[addr]] = addr;
  }
  stats.seed_from(policy.blocks(), result.config.max_split_size_bytes);

  PeakTracker peaks;
  peaks.sample(stats.stats(), 0);
  // After the model took event i (and the events it took with it).
  bool segments_taken = false;
  const auto took = [&](std::size_t i) {
    peaks.sample(stats.stats(), i);
    if (options.on_event) {
      options.on_event(i, stats.stats());
    }
    if (!segments_taken && options.segments_after_event && i >= *options.segments_after_event) {
      result.segments_at_event = take_model_snapshot(policy.blocks(), result.device, policy.private_pools());
      segments_taken = true;
    }
  };
  CheckReport& check = result.check;
  record_recorded_peaks(events, static_cast<std::int64_t>(initial.reserved_bytes), recorded_requested, check);
  bool any_op_yet = false;
  std::size_t window_begin = 0;
  std::size_t window_end = 0;
  const auto where = [&](std::size_t i) {
    return fmt::format("{}: device_traces[{}][{}]", snapshot.source, result.device, i);
  };

  std::size_t retry_bursts = 0;  // release bursts read as an alloc's OOM retry
  std::size_t explicit_empty_caches = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.action == TraceAction::kEmptyCache) {
      // Its segment_free / segment_unmap entries follow it: they are the device's answers to it.
      ++explicit_empty_caches;
      std::size_t j = i + 1;
      while (j < events.size() && is_segment_release(events[j].action)) {
        ++j;
      }
      device.open_window(i + 1, j, i, false);
      policy.empty_cache(
          MempoolId{static_cast<std::int64_t>(e.addr), static_cast<std::int64_t>(e.size_bytes)});
      device.close_window();
      took(i);
      window_begin = window_end = j;
      i = j - 1;
      continue;
    }
    if (is_pool_event(e.action)) {
      ++result.pool_events;
      try {
        apply_pool_event(policy, e);
      } catch (const InputError& err) {
        throw InputError(fmt::format("{}: {}: {}", where(i), trace_action_name(e.action), err.what()));
      }
      took(i);
      continue;
    }
    if (is_segment_event(e.action)) {
      if (i < window_end) {
        continue;  // already assigned to the coming alloc / oom
      }
      std::size_t j = i;
      while (j < events.size() && is_segment_event(events[j].action)) {
        ++j;
      }
      const bool feeds_op = j < events.size() && (events[j].action == TraceAction::kAlloc ||
                                                  events[j].action == TraceAction::kOom);
      std::size_t releases_end = i;
      while (releases_end < j && is_segment_release(events[releases_end].action)) {
        ++releases_end;
      }
      const bool leading_empty_cache = !any_op_yet && releases_end > i;
      if (feeds_op && !leading_empty_cache) {
        retry_bursts += releases_end > i ? 1 : 0;
        window_begin = i;
        window_end = j;
        continue;
      }
      const std::size_t burst_end = feeds_op ? releases_end : j;
      device.open_window(i, burst_end, i, false);
      policy.empty_cache();
      device.close_window();
      took(i);
      window_begin = window_end = burst_end;
      if (burst_end < j) {
        window_end = j;  // the rest (segment_alloc / map) belongs to the alloc that follows
      }
      i = burst_end - 1;
      continue;
    }

    switch (e.action) {
      case TraceAction::kAlloc:
      case TraceAction::kOom: {
        any_op_yet = true;
        const bool is_oom = e.action == TraceAction::kOom;
        if (window_end <= window_begin || window_end != i) {
          window_begin = window_end = i;
        }
        device.open_window(window_begin, window_end, i, is_oom);
        const AllocResult r =
            policy.allocate(AllocRequest{std::max<Bytes>(e.size_bytes, 1), e.stream, e.time_ns});
        device.close_window();
        window_begin = window_end = 0;
        if (is_oom) {
          ++check.ooms_recorded;
          if (r.ok()) {
            if (!device.diverged()) {
              device.note_divergence(i, fmt::format("oom for {} bytes", e.size_bytes),
                                     fmt::format("model allocated 0x{:x}", r.addr));
            }
            policy.free(r.block, e.time_ns);
          }
          break;
        }
        ++check.allocs_recorded;
        if (!r.ok()) {
          if (!device.diverged()) {
            device.note_divergence(i, fmt::format("alloc 0x{:x} {} bytes", e.addr, e.size_bytes),
                                   "model ran out of memory");
          }
          refused.insert(e.addr);
          break;
        }
        if (r.addr == e.addr) {
          ++check.allocs_same_offset;
        } else if (!device.diverged()) {
          device.note_divergence(i, fmt::format("alloc 0x{:x} {} bytes", e.addr, e.size_bytes),
                                 fmt::format("model placed it at 0x{:x}", r.addr));
        }
        if (!live.insert(e.addr, r.block)) {
          throw InputError(fmt::format("{}: alloc at 0x{:x}, which is already live", where(i), e.addr));
        }
        break;
      }
      case TraceAction::kFreeRequested: {
        any_op_yet = true;
        ++check.frees_recorded;
        const BlockId* found = live.find(e.addr);
        if (found == nullptr) {
          if (refused.erase(e.addr) != 0) {
            if (i + 1 < events.size() && events[i + 1].action == TraceAction::kFreeCompleted &&
                events[i + 1].addr == e.addr) {
              ++i;
            } else {
              no_pending_free.insert(e.addr);  // its free_completed comes later
            }
            break;  // the model refused this alloc (its OOM is already reported)
          }
          throw InputError(
              fmt::format("{}: free_requested of 0x{:x}, which is not a live block", where(i), e.addr));
        }
        const BlockId block = *found;
        live.erase(e.addr);
        const bool completes_now = i + 1 < events.size() &&
                                   events[i + 1].action == TraceAction::kFreeCompleted &&
                                   events[i + 1].addr == e.addr;
        if (!completes_now) {
          policy.record_stream(block, kDeferredFreeStream);
          if (const auto stale = pending_owner.find(block);
              stale != pending_owner.end() && stale->second != e.addr) {
            pending.erase(stale->second);
            no_pending_free.insert(stale->second);
          }
          pending[e.addr] = block;
          pending_owner[block] = e.addr;
          no_pending_free.erase(e.addr);
        }
        policy.free(block, e.time_ns);
        if (completes_now) {
          ++i;  // its free_completed
        }
        break;
      }
      case TraceAction::kFreeCompleted: {
        const BlockId* found = pending.find(e.addr);
        if (found == nullptr && no_pending_free.erase(e.addr) > 0) {
          break;
        }
        if (found == nullptr) {
          throw InputError(
              fmt::format("{}: free_completed of 0x{:x} without a pending free", where(i), e.addr));
        }
        const BlockId block = *found;
        policy.complete_stream_events(block);
        pending_owner.erase(block);
        pending.erase(e.addr);
        break;
      }
      default:
        break;
    }
    took(i);
    SIM_ASSERT_EXPENSIVE(policy.blocks().check_invariants().empty());
  }
  if (retry_bursts > 0 && explicit_empty_caches == 0) {
    result.warnings.push_back(
        fmt::format("{}: {} burst{} of segment_free/segment_unmap right before an alloc {} read as that "
                    "alloc's OOM retry "
                    "(release_cached_blocks); a recording cannot tell {} from torch.cuda.empty_cache() "
                    "called just before "
                    "the alloc. In .vtrace, an empty_cache event says which",
                    snapshot.source, retry_bursts, retry_bursts == 1 ? "" : "s",
                    retry_bursts == 1 ? "was" : "were", retry_bursts == 1 ? "it" : "them"));
  }
  for (const PrivatePool& pool : policy.private_pools()) {
    if (!pool.id.is_default()) {
      result.private_pools.push_back(pool);
    }
  }
  if (const std::string broken = policy.blocks().check_invariants(); !broken.empty()) {
    throw std::logic_error("vramsim: model state broken after replay: " + broken);
  }

  check.segment_events_recorded = device.segment_events_recorded();
  check.segment_events_matched = device.segment_events_matched();
  check.model_segment_events = device.model_segment_calls();
  if (!check.first_divergence) {
    check.first_divergence = device.first_divergence();
  }
  result.recorded_failures_followed = device.refused_as_recorded();
  result.capacity_refusals = device.refused_for_capacity();
  result.inferred_capacity_below_bytes = device.failed_total_bytes();
  result.capacity_bytes = options.capacity_bytes;
  result.final_segments = take_model_snapshot(policy.blocks(), result.device, policy.private_pools());
  check.has_final_state = snapshot.has_final_state;
  if (snapshot.has_final_state) {
    compare_final_state(snapshot, result.device, result.final_segments, check);
    check.invariant_violations = check_snapshot_invariants(snapshot);
  }
  result.stats = stats.stats();
  result.peaks = peaks.summary();
  return result;
}

}  // namespace vramsim
