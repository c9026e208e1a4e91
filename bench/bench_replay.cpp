// BM_Replay_RealTrace: replay speed on the largest real recordings.
//   alloc_only/<trace>   the trace's allocs and frees, extracted once, through a fresh PyTorchCachingPolicy +
//                        SimulatedDevice (unlimited) + MemoryStatsObserver per iteration; events/s counts
//                        allocator calls (allocs + frees). Blocks live before the trace started are not
//                        there, so the peaks are those of the trace's own allocations.
//   replay_only/<trace>  replay_snapshot() of a snapshot already in memory (initial state, recorded device,
//                        --check bookkeeping); events/s counts trace events.
//   end_to_end/<trace>   load_snapshot() of the file + replay_snapshot(); events/s counts trace events.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/bench_traces.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/replay/trace_replay.h"
#include "sim/report/memory_stats.h"
#include "traces/snapshot.h"
#include "traces/trace_io.h"

namespace vramsim::bench {
namespace {

struct AllocatorOp {
  enum class Kind : std::uint8_t { kAlloc, kFree, kEmptyCache };
  Kind kind = Kind::kAlloc;
  std::uint32_t slot = 0;  // alloc: where its block id goes; free: the slot of the alloc it frees
  Bytes size_bytes = 0;
  StreamId stream = 0;
};

struct AllocatorTrace {
  std::vector<AllocatorOp> ops;
  std::uint32_t slots = 0;
  std::int64_t allocator_events = 0;  // allocs + frees
  CachingConfig config;
};

CachingConfig recorded_config(const Snapshot& snapshot) {
  CachingConfig c;
  if (snapshot.allocator_settings) {
    const RecordedAllocatorSettings& s = *snapshot.allocator_settings;
    c.text = s.alloc_conf;
    c.max_split_size_bytes =
        s.max_split_size < 0 ? kUnlimitedSplitSize : static_cast<Bytes>(s.max_split_size);
    c.garbage_collection_threshold = s.garbage_collection_threshold;
    c.expandable_segments = s.expandable_segments;
    c.roundup_power2_divisions = s.roundup_power2_divisions;
  }
  return c;
}

const std::vector<TraceEvent>& busiest_device_events(const Snapshot& snapshot) {
  static const std::vector<TraceEvent> kNone;
  const std::vector<TraceEvent>* best = &kNone;
  for (const DeviceTrace& d : snapshot.device_traces) {
    if (d.events.size() > best->size()) {
      best = &d.events;
    }
  }
  return *best;
}

// alloc -> allocate(size, stream); free_requested of a block allocated in the trace -> free (frees of blocks
// that predate the trace are dropped); a burst of segment_free / segment_unmap not serving an alloc ->
// empty_cache(). ooms and free_completed are not allocator calls of their own here.
AllocatorTrace extract_allocator_trace(const Snapshot& snapshot) {
  AllocatorTrace t;
  t.config = recorded_config(snapshot);
  const std::vector<TraceEvent>& events = busiest_device_events(snapshot);
  std::unordered_map<Bytes, std::uint32_t> live;
  bool any_op = false;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (is_segment_event(e.action)) {
      std::size_t j = i;
      bool releases = false;
      while (j < events.size() && is_segment_event(events[j].action)) {
        releases = releases || events[j].action == TraceAction::kSegmentFree ||
                   events[j].action == TraceAction::kSegmentUnmap;
        ++j;
      }
      const bool feeds_op = j < events.size() && (events[j].action == TraceAction::kAlloc ||
                                                  events[j].action == TraceAction::kOom);
      if (releases && (!feeds_op || !any_op)) {
        t.ops.push_back(AllocatorOp{AllocatorOp::Kind::kEmptyCache, 0, 0, 0});
      }
      i = j - 1;
      continue;
    }
    if (e.action == TraceAction::kAlloc) {
      any_op = true;
      live[e.addr] = t.slots;
      t.ops.push_back(
          AllocatorOp{AllocatorOp::Kind::kAlloc, t.slots++, std::max<Bytes>(e.size_bytes, 1), e.stream});
      ++t.allocator_events;
    } else if (e.action == TraceAction::kFreeRequested) {
      any_op = true;
      if (auto it = live.find(e.addr); it != live.end()) {
        t.ops.push_back(AllocatorOp{AllocatorOp::Kind::kFree, it->second, 0, 0});
        live.erase(it);
        ++t.allocator_events;
      }
    }
  }
  return t;
}

void set_peak_counters(benchmark::State& state, std::int64_t peak_reserved, std::int64_t peak_active) {
  state.counters["peak_reserved"] = benchmark::Counter(
      static_cast<double>(peak_reserved), benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["fragmentation"] =
      peak_reserved > 0 ? 1.0 - static_cast<double>(peak_active) / static_cast<double>(peak_reserved) : 0.0;
}

void BM_AllocOnly(benchmark::State& state, const AllocatorTrace& trace) {
  std::vector<BlockId> blocks(trace.slots, kNoBlock);
  DeviceStats last;
  for (auto _ : state) {
    SimulatedDevice device;
    MemoryStatsObserver stats;
    PyTorchCachingPolicy policy(trace.config, device, stats);
    for (const AllocatorOp& op : trace.ops) {
      switch (op.kind) {
        case AllocatorOp::Kind::kAlloc:
          blocks[op.slot] = policy.allocate(AllocRequest{op.size_bytes, op.stream, 0}).block;
          break;
        case AllocatorOp::Kind::kFree:
          policy.free(blocks[op.slot], 0);
          break;
        case AllocatorOp::Kind::kEmptyCache:
          policy.empty_cache();
          break;
      }
    }
    benchmark::DoNotOptimize(stats.stats().reserved_bytes[kStatAll].peak);
    last = stats.stats();
  }
  state.counters["events/s"] = benchmark::Counter(
      static_cast<double>(trace.allocator_events) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["events"] = static_cast<double>(trace.allocator_events);
  set_peak_counters(state, last.reserved_bytes[kStatAll].peak, last.active_bytes[kStatAll].peak);
}

void report_replay(benchmark::State& state, const ReplayResult& r) {
  state.counters["events/s"] = benchmark::Counter(
      static_cast<double>(r.events) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["events"] = static_cast<double>(r.events);
  set_peak_counters(state, r.peaks.peak_reserved_bytes, r.peaks.peak_active_bytes);
}

void BM_ReplayOnly(benchmark::State& state, const Snapshot& snapshot) {
  ReplayResult r;
  for (auto _ : state) {
    r = replay_snapshot(snapshot, ReplayOptions{});
    benchmark::DoNotOptimize(r.peaks.peak_reserved_bytes);
  }
  report_replay(state, r);
}

void BM_EndToEnd(benchmark::State& state, const std::string& path) {
  ReplayResult r;
  for (auto _ : state) {
    const Snapshot snapshot = load_snapshot(path);
    r = replay_snapshot(snapshot, ReplayOptions{});
    benchmark::DoNotOptimize(r.peaks.peak_reserved_bytes);
  }
  report_replay(state, r);
}

struct LoadedTrace {
  Snapshot snapshot;
  AllocatorTrace allocator;
};

// Loads a trace the first time a benchmark needs it (outside the timed loop) and keeps the latest one, so a
// filtered run parses only the files it uses. nullptr (and the benchmark skipped) when the file is
// unreadable.
const LoadedTrace* loaded_trace(benchmark::State& state, const std::string& path) {
  static std::string cached_path;
  static std::unique_ptr<LoadedTrace> cached;
  if (cached_path != path) {
    cached.reset();
    cached_path = path;
    try {
      auto t = std::make_unique<LoadedTrace>();
      t->snapshot = load_snapshot(path);
      t->allocator = extract_allocator_trace(t->snapshot);
      cached = std::move(t);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vramsim_bench: %s: %s\n", path.c_str(), e.what());
    }
  }
  if (!cached) {
    state.SkipWithError("cannot load the trace");
  }
  return cached.get();
}

}  // namespace

void register_replay_benchmarks() {
  for (const TraceFile& file : replay_traces()) {
    const std::string path = file.path.string();
    benchmark::RegisterBenchmark(("BM_Replay_RealTrace/alloc_only/" + file.label).c_str(),
                                 [path](benchmark::State& state) {
                                   if (const LoadedTrace* t = loaded_trace(state, path)) {
                                     BM_AllocOnly(state, t->allocator);
                                   }
                                 })
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_Replay_RealTrace/replay_only/" + file.label).c_str(),
                                 [path](benchmark::State& state) {
                                   if (const LoadedTrace* t = loaded_trace(state, path)) {
                                     BM_ReplayOnly(state, t->snapshot);
                                   }
                                 })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_Replay_RealTrace/end_to_end/" + file.label).c_str(),
                                 [path](benchmark::State& state) { BM_EndToEnd(state, path); })
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace vramsim::bench
