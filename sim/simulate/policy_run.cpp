#include "sim/simulate/policy_run.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "sim/alloc/device_memory.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/core/error.h"
#include "sim/core/size_format.h"
#include "sim/replay/adopt_initial_state.h"
#include "sim/replay/model_snapshot.h"
#include "sim/report/memory_stats.h"

namespace vramsim {
namespace {

// A policy on its own device with its observers: one pass over (a prefix of) the sequence.
struct Rig {
  SimulatedDevice device;
  MemoryStatsObserver stats;
  AllocObservers observers;  // stats, then PolicyRunOptions::observer
  std::unique_ptr<IAllocatorPolicy> policy;
  std::vector<BlockId> blocks;  // per allocation id; kNoBlock when it failed (or is not yet made)
  std::vector<bool> adopted;    // per allocation id: installed by adopt_initial_state, not allocated
  std::vector<bool> deferred;   // per allocation id: freed at the start, its free op completes stream events
  // Frees waiting for other streams (RequestOp::streams_done_before): (op index, block), in any order.
  std::vector<std::pair<std::size_t, BlockId>> awaiting_streams;
  const std::vector<std::size_t>* empty_cache_after = nullptr;
  std::size_t next_empty_cache = 0;

  static AllocObservers observers_of(MemoryStatsObserver& stats, IAllocObserver* also) {
    AllocObservers o;
    o.add(&stats);
    if (also != nullptr) {
      o.add(also);
    }
    return o;
  }

  Rig(const PolicyEntry& entry, const RequestSequence& sequence, const PolicyRunOptions& options)
      : device(options.capacity_bytes),
        stats(options.config.max_split_size_bytes == kUnlimitedSplitSize
                  ? -1
                  : static_cast<std::int64_t>(options.config.max_split_size_bytes)),
        observers(observers_of(stats, options.observer)),
        policy(entry.make(options.config, device, observers)),
        blocks(sequence.alloc_count(), kNoBlock),
        adopted(sequence.alloc_count(), false),
        deferred(sequence.alloc_count(), false) {
    policy->plan(sequence);  // online policies ignore it
    if (options.recording != nullptr) {
      empty_cache_after = &options.recording->empty_cache_after;
      adopt(*options.recording, options.config);
      run_empty_caches(0);
    }
  }

  // The native policy starts from the recorded segments, as `vramsim replay` does.
  void adopt(const TraceRequests& rec, const CachingConfig& config) {
    auto* native = dynamic_cast<PyTorchCachingPolicy*>(policy.get());
    if (native == nullptr || rec.initial.starts_empty()) {
      return;
    }
    const AdoptedState state = adopt_initial_state(*native, rec.initial, device.total_bytes(), rec.source);
    for (std::size_t id = 0; id < rec.start_blocks; ++id) {
      blocks[id] = state.live.at(rec.start_addr[id]);
      adopted[id] = true;
      if (rec.start_pending[id]) {  // freed before the trace, its stream work still pending
        native->record_stream(blocks[id], kDeferredFreeStream);
        native->free(blocks[id], 0);
        deferred[id] = true;
      }
    }
    Bytes end_addr = 0;
    for (SegmentId sid : native->blocks().live_segments_by_address()) {
      const Segment& seg = native->blocks().segment(sid);
      end_addr = std::max(end_addr, seg.base + seg.size_bytes);
    }
    if (!device.adopt(rec.initial.reserved_bytes, end_addr)) {
      throw InputError(
          fmt::format("--capacity: {} is below the {} {} held reserved at trace start, which the pytorch "
                      "policies start from",
                      format_bytes_short(device.total_bytes()),
                      format_bytes_short(rec.initial.reserved_bytes), rec.source));
    }
    stats.seed_from(native->blocks(), config.max_split_size_bytes);
  }

  // The frees whose streams are done before op `index` return their blocks to the pool.
  void complete_streams(std::size_t index) {
    const auto done = [index](const std::pair<std::size_t, BlockId>& a) { return a.first <= index; };
    for (const auto& [at, block] : awaiting_streams) {
      if (at <= index) {
        policy->complete_stream_events(block);
      }
    }
    awaiting_streams.erase(std::remove_if(awaiting_streams.begin(), awaiting_streams.end(), done),
                           awaiting_streams.end());
  }

  void run_empty_caches(std::size_t ops_done) {
    while (empty_cache_after != nullptr && next_empty_cache < empty_cache_after->size() &&
           (*empty_cache_after)[next_empty_cache] == ops_done) {
      policy->empty_cache();
      ++next_empty_cache;
    }
  }

  // Applies op `index` and the empty_cache calls that follow it. Returns false when the request was an
  // allocation that failed.
  bool apply(const RequestOp& op, std::size_t index) {
    complete_streams(index);
    const TimeNs time_ns = op.time_ns;
    bool ok = true;
    if (op.kind == RequestOp::Kind::kAlloc) {
      if (!adopted[op.alloc_id]) {
        const AllocResult r = policy->allocate(AllocRequest{op.size_bytes, op.stream, time_ns});
        blocks[op.alloc_id] = r.block;
        ok = r.ok();
      }
    } else if (blocks[op.alloc_id] != kNoBlock) {
      if (deferred[op.alloc_id]) {
        policy->complete_stream_events(blocks[op.alloc_id]);
      } else {
        if (op.streams_done_before > index) {
          policy->record_stream(blocks[op.alloc_id], kDeferredFreeStream);
          awaiting_streams.emplace_back(op.streams_done_before, blocks[op.alloc_id]);
        }
        policy->free(blocks[op.alloc_id], time_ns);
      }
      blocks[op.alloc_id] = kNoBlock;
    }
    run_empty_caches(index + 1);
    return ok;
  }
};

}  // namespace

std::vector<const PolicyEntry*> parse_policy_list(std::string_view list, std::string_view option) {
  std::vector<const PolicyEntry*> out;
  if (list.empty() || list == "all") {
    for (const PolicyEntry& p : policy_registry()) {
      out.push_back(&p);
    }
    return out;
  }
  while (true) {
    const std::size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    const PolicyEntry* entry = nullptr;
    std::string known;
    for (const PolicyEntry& p : policy_registry()) {
      entry = p.name == name ? &p : entry;
      known += fmt::format("{}{}", known.empty() ? "" : ", ", p.name);
    }
    if (entry == nullptr) {
      throw InputError(fmt::format("{}: unknown policy '{}' (known: {})", option, name, known));
    }
    if (std::find(out.begin(), out.end(), entry) != out.end()) {
      throw InputError(fmt::format("{}: policy '{}' listed twice", option, name));
    }
    out.push_back(entry);
    if (comma == std::string_view::npos) {
      break;
    }
    list.remove_prefix(comma + 1);
  }
  return out;
}

PolicyRunResult run_policy(const PolicyEntry& entry, const RequestSequence& sequence,
                           const PolicyRunOptions& options) {
  const std::vector<RequestOp>& ops = sequence.ops();
  for (std::size_t end : options.step_ends) {
    if (end == 0 || end > ops.size()) {
      throw InputError(fmt::format("step end {} is outside the sequence of {} requests", end, ops.size()));
    }
  }
  PolicyRunResult out;
  out.policy = std::string(entry.name);

  PeakTracker peaks;
  std::size_t allocated_peak_index = 0;  // the request after which allocated memory first peaked
  std::int64_t allocated_peak = -1;
  {
    Rig rig(entry, sequence, options);
    peaks.sample(rig.stats.stats(), 0);  // a recording's start state may hold the peak
    std::size_t next_step = 0;
    std::int64_t ooms_before_step = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      rig.apply(ops[i], i);
      const DeviceStats& s = rig.stats.stats();
      peaks.sample(s, i);
      if (options.on_request) {
        options.on_request(i, s);
      }
      if (options.segments_after_request && *options.segments_after_request == i) {
        out.segments_at_request = take_model_snapshot(rig.policy->blocks(), 0);
      }
      if (options.keep_curve) {
        out.curve.push_back({s.reserved_bytes[kStatAll].current, s.allocated_bytes[kStatAll].current,
                             s.requested_bytes[kStatAll].current});
      }
      if (s.allocated_bytes[kStatAll].current > allocated_peak) {
        allocated_peak = s.allocated_bytes[kStatAll].current;
        allocated_peak_index = i;
      }
      while (next_step < options.step_ends.size() && options.step_ends[next_step] == i + 1) {
        StepSample sample;
        sample.step = next_step;
        sample.reserved_bytes = s.reserved_bytes[kStatAll].current;
        sample.allocated_bytes = s.allocated_bytes[kStatAll].current;
        sample.peak_reserved_bytes = peaks.summary().peak_reserved_bytes;
        sample.peak_active_bytes = peaks.summary().peak_active_bytes;
        sample.num_ooms = s.num_ooms - ooms_before_step;
        ooms_before_step = s.num_ooms;
        out.steps.push_back(sample);
        ++next_step;
      }
    }
    const DeviceStats& s = rig.stats.stats();
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    out.num_ooms = s.num_ooms;
    out.final_reserved_bytes = s.reserved_bytes[kStatAll].current;
  }
  out.peaks = peaks.summary();

  // The free blocks at the allocated peak: replay up to that request again and look at the blocks (cheaper
  // than scanning the pool at every new peak, which the no-cache policy reaches on almost every request).
  if (options.free_space_at_allocated_peak && !ops.empty() && allocated_peak > 0) {
    PolicyRunOptions quiet = options;  // the observer has seen the run once
    quiet.observer = nullptr;
    Rig rig(entry, sequence, quiet);
    for (std::size_t i = 0; i <= allocated_peak_index; ++i) {
      rig.apply(ops[i], i);
    }
    const BlockPool& pool = rig.policy->blocks();
    for (SegmentId sid : pool.live_segments_by_address()) {
      for (BlockId id = pool.segment(sid).first; id != kNoBlock; id = pool.block(id).next) {
        const Block& b = pool.block(id);
        if (b.mapped && !b.allocated) {
          out.free_bytes_at_allocated_peak += static_cast<std::int64_t>(b.size_bytes);
          out.largest_free_block_at_allocated_peak =
              std::max(out.largest_free_block_at_allocated_peak, static_cast<std::int64_t>(b.size_bytes));
        }
      }
    }
  }
  return out;
}

}  // namespace vramsim
