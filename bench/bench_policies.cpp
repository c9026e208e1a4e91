// BM_Policies/<policy>/<workload>: every registered allocator policy over the same request sequences, the
// real traces (replay_traces()) and generated ones; counters: requests per second, peak reserved and
// fragmentation of that run (the same figures `vramsim compare` prints).
// BM_Policies_Synthetic/<policy>/<live_blocks>: cost per request as the number of live blocks grows, for the
// online policies (offline-optimal plans a whole sequence, it has no steady state to measure).
//
// A timed iteration builds the policy on a fresh unlimited device, plans (offline policies) and applies every
// request; the figures come from one run_policy() outside the timed loop.
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include <benchmark/benchmark.h>

#include "bench/bench_traces.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/compare/dynamic_shapes.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "sim/report/memory_stats.h"
#include "sim/simulate/policy_run.h"
#include "traces/trace_io.h"

namespace vramsim::bench {
namespace {

struct Workload {
  std::string label;
  std::function<RequestSequence()> make;
};

// Generated workloads: one fixed-shape step pair and a dynamic-shape run (the README's sweep setting, fewer
// steps).
std::vector<Workload> generated_workloads() {
  return {
      {"gen:gpt2_b8_s1024_amp",
       [] {
         TrainingOptions o;
         o.batch = 8;
         o.seq = 1024;
         o.precision = Precision::kAmpBf16;
         o.steps = 2;
         return fixed_shape_run(model_preset("gpt2"), o).sequence;
       }},
      {"gen:tinyllama_b4_uniform128-4096_10steps",
       [] {
         TrainingOptions o;
         o.precision = Precision::kAmpBf16;
         o.attention = AttentionKind::kSdpaFlash;
         const std::vector<StepShape> shapes =
             draw_shapes(ShapeDistribution::parse("4", "--batch"),
                         ShapeDistribution::parse("uniform:128..4096", "--seq"), 10, 1);
         return build_dynamic_run(model_preset("tinyllama-1.1b"), o, shapes).sequence;
       }},
  };
}

// The latest workload's sequence, built on first use outside the timed loop (a filtered run builds only what
// it runs).
const RequestSequence* cached_sequence(benchmark::State& state, const Workload& w) {
  static std::string label;
  static std::unique_ptr<RequestSequence> seq;
  if (label != w.label) {
    seq.reset();
    label = w.label;
    try {
      seq = std::make_unique<RequestSequence>(w.make());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vramsim_bench: %s: %s\n", w.label.c_str(), e.what());
    }
  }
  if (!seq) {
    state.SkipWithError("cannot build the workload");
  }
  return seq.get();
}

void run_once(const PolicyEntry& entry, const RequestSequence& seq) {
  SimulatedDevice device;
  MemoryStatsObserver stats;
  const auto policy = entry.make(CachingConfig{}, device, stats);
  policy->plan(seq);
  std::vector<BlockId> blocks(seq.alloc_count(), kNoBlock);
  TimeNs t = 0;
  for (const RequestOp& op : seq.ops()) {
    if (op.kind == RequestOp::Kind::kAlloc) {
      blocks[op.alloc_id] = policy->allocate(AllocRequest{op.size_bytes, op.stream, t++}).block;
    } else if (blocks[op.alloc_id] != kNoBlock) {
      policy->free(blocks[op.alloc_id], t++);
    }
  }
  benchmark::DoNotOptimize(stats.stats().reserved_bytes[kStatAll].peak);
}

void BM_Policies(benchmark::State& state, const PolicyEntry* entry, const Workload& w) {
  const RequestSequence* seq = cached_sequence(state, w);
  if (seq == nullptr) {
    return;
  }
  for (auto _ : state) {
    run_once(*entry, *seq);
  }
  const PolicyRunResult r = run_policy(*entry, *seq, PolicyRunOptions{});
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(seq->ops().size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["peak_reserved_GiB"] =
      static_cast<double>(r.peaks.peak_reserved_bytes) / static_cast<double>(kGiB);
  state.counters["frag_%"] = 100.0 * r.peaks.fragmentation();
  state.counters["over_live_%"] =
      100.0 *
      (static_cast<double>(r.peaks.peak_reserved_bytes) / static_cast<double>(peak_live_bytes(*seq)) - 1.0);
}

// Steady state with `live` blocks (as BM_Policy_Synthetic in bench_policy.cpp, for any online policy): each
// iteration allocates one block (70% small 512 B-1 MiB, 30% large 1-64 MiB, log-uniform) and frees a random
// live one.
struct SyntheticWorld {
  SyntheticWorld(const PolicyEntry* e, std::size_t live) : entry(e), live_count(live) {
    policy = entry->make(CachingConfig{}, device, stats);
    std::mt19937_64 rng(0x5eed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const auto draw = [&] {
      const bool small = unit(rng) < 0.7;
      const double lo = small ? 9.0 : 20.0;
      const double hi = small ? 20.0 : 26.0;
      return static_cast<Bytes>(std::exp2(lo + (hi - lo) * unit(rng)));
    };
    blocks.reserve(live + 1);
    for (std::size_t i = 0; i < live; ++i) {
      blocks.push_back(policy->allocate(AllocRequest{draw(), 0, 0}).block);
    }
    script.resize(kScript);
    for (auto& s : script) {
      s = {draw(), static_cast<std::size_t>(unit(rng) * static_cast<double>(live + 1)) % (live + 1)};
    }
  }
  static constexpr std::size_t kScript = 1 << 16;
  const PolicyEntry* entry;
  std::size_t live_count;
  SimulatedDevice device;
  MemoryStatsObserver stats;
  std::unique_ptr<IAllocatorPolicy> policy;
  std::vector<BlockId> blocks;
  std::vector<std::pair<Bytes, std::size_t>> script;
  std::size_t next = 0;
};

void BM_Policies_Synthetic(benchmark::State& state, const PolicyEntry* entry) {
  static std::unique_ptr<SyntheticWorld> world;  // kept across the calls for one argument: set up once
  const auto live = static_cast<std::size_t>(state.range(0));
  if (!world || world->entry != entry || world->live_count != live) {
    world.reset();
    world = std::make_unique<SyntheticWorld>(entry, live);
  }
  SyntheticWorld& w = *world;
  for (auto _ : state) {
    const auto& [size, victim] = w.script[w.next];
    w.next = (w.next + 1) & (SyntheticWorld::kScript - 1);
    w.blocks.push_back(w.policy->allocate(AllocRequest{size, 0, 0}).block);
    const BlockId v = w.blocks[victim];
    w.blocks[victim] = w.blocks.back();
    w.blocks.pop_back();
    w.policy->free(v, 0);
  }
  state.counters["requests/s"] =
      benchmark::Counter(2.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

void register_policy_benchmarks() {
  static std::vector<Workload> workloads;
  for (const TraceFile& file : replay_traces()) {
    const std::string path = file.path.string();
    workloads.push_back({file.label, [path] { return request_sequence_from_trace(load_snapshot(path)); }});
  }
  for (Workload& w : generated_workloads()) {
    workloads.push_back(std::move(w));
  }
  // Workload-major order, so each sequence is built once for all policies.
  for (const Workload& w : workloads) {
    for (const PolicyEntry& p : policy_registry()) {
      benchmark::RegisterBenchmark(("BM_Policies/" + std::string(p.name) + "/" + w.label).c_str(),
                                   BM_Policies, &p, std::cref(w))
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const PolicyEntry& p : policy_registry()) {
    if (p.needs_plan) {
      continue;
    }
    benchmark::RegisterBenchmark(("BM_Policies_Synthetic/" + std::string(p.name)).c_str(),
                                 BM_Policies_Synthetic, &p)
        ->RangeMultiplier(10)
        ->Range(1'000, 1'000'000)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace vramsim::bench
