// BM_Policy_Synthetic/<live_blocks>: cost of one allocator event as the number of live blocks grows.
//
// Steady state: `live_blocks` blocks are allocated once (outside the timed loop; the state is kept across the
// runs Google Benchmark makes for one argument, so 10^6 blocks are set up once). Each iteration then
// allocates one block and frees a live block picked at random (possibly the new one), i.e. two allocator
// events. Sizes: 70% small, log-uniform in [512 B, 1 MiB] (the small pool); 30% large, log-uniform in [1 MiB,
// 64 MiB]. The RNG is seeded with a constant, so every run replays the same sequence. The device has
// unlimited capacity: nothing is ever released, the policy only splits, merges and searches its free sets.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "sim/alloc/caching_config.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/report/memory_stats.h"

namespace vramsim::bench {
namespace {

constexpr std::size_t kScriptLength = std::size_t{1} << 16;  // pre-drawn (size, victim) pairs, cycled

Bytes draw_size(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const bool small = unit(rng) < 0.7;
  const double lo = small ? std::log2(512.0) : std::log2(static_cast<double>(kMiB));
  const double hi =
      small ? std::log2(static_cast<double>(kMiB)) : std::log2(64.0 * static_cast<double>(kMiB));
  const auto size = static_cast<Bytes>(std::exp2(lo + (hi - lo) * unit(rng)));
  return small ? std::min(size, kMiB) : std::max(size, kMiB + 1);
}

struct SyntheticWorld {
  explicit SyntheticWorld(std::size_t live_blocks)
      : live_count(live_blocks), policy(CachingConfig{}, device, stats), rng(0x5eed'cafe'f00dULL) {
    live.reserve(live_blocks + 1);
    for (std::size_t i = 0; i < live_blocks; ++i) {
      live.push_back(policy.allocate(AllocRequest{draw_size(rng), 0, 0}).block);
    }
    script.resize(kScriptLength);
    std::uniform_int_distribution<std::size_t> victim(0,
                                                      live_blocks);  // among live_blocks + 1 after the alloc
    for (Step& s : script) {
      s.size_bytes = draw_size(rng);
      s.victim = victim(rng);
    }
  }

  struct Step {
    Bytes size_bytes = 0;
    std::size_t victim = 0;
  };

  std::size_t live_count;
  SimulatedDevice device;
  MemoryStatsObserver stats;
  PyTorchCachingPolicy policy;
  std::mt19937_64 rng;
  std::vector<BlockId> live;
  std::vector<Step> script;
  std::size_t next = 0;
};

void BM_Policy_Synthetic(benchmark::State& state) {
  static std::unique_ptr<SyntheticWorld> world;
  const auto live_blocks = static_cast<std::size_t>(state.range(0));
  if (!world || world->live_count != live_blocks) {
    world.reset();  // at most one world in memory (10^6 live blocks take a few hundred MB)
    world = std::make_unique<SyntheticWorld>(live_blocks);
  }
  SyntheticWorld& w = *world;
  for (auto _ : state) {
    const SyntheticWorld::Step& s = w.script[w.next];
    w.next = (w.next + 1) & (kScriptLength - 1);
    w.live.push_back(w.policy.allocate(AllocRequest{s.size_bytes, 0, 0}).block);
    const BlockId victim = w.live[s.victim];
    w.live[s.victim] = w.live.back();
    w.live.pop_back();
    w.policy.free(victim, 0);
  }
  state.counters["events/s"] =
      benchmark::Counter(2.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["free_blocks"] = static_cast<double>(w.policy.blocks().free_set(PoolKind::kSmall).size() +
                                                      w.policy.blocks().free_set(PoolKind::kLarge).size());
  state.counters["reserved"] =
      benchmark::Counter(static_cast<double>(w.stats.stats().reserved_bytes[kStatAll].current),
                         benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
}

BENCHMARK(BM_Policy_Synthetic)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Arg(1'000'000);

}  // namespace
}  // namespace vramsim::bench
