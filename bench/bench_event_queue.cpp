// BM_EventQueue_<Backend>/<population>: the hold model of ns-3's utils/bench-scheduler.cc, one case per entry
// of event_queue_registry(). `population` events are queued once, outside the timed loop; each iteration
// then pops the next event and pushes a new one at (popped time + delta), so the queue size stays constant.
// Deltas are drawn once from an exponential distribution (mean 1 us, as bench-scheduler's default) with a
// fixed seed and cycled, so every run replays the same sequence. Counter: events/s (one pop + one push each).
//
// BM_Simulator_Hold/<population>: the same model through the whole Simulator (event table, std::function
// callbacks, lazy-cancel check, run loop) on the default backend: what one simulated event costs end to end.
#include <cctype>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "sim/engine/queue_registry.h"
#include "sim/engine/simulator.h"

namespace vramsim::bench {
namespace {

constexpr std::size_t kDeltaCount = std::size_t{1} << 16;  // power of two: cycled with a mask
const std::vector<std::int64_t> kPopulations = {16, 1024, 65536, 1 << 20};

std::vector<TimeNs> draw_deltas() {
  std::mt19937_64 rng(0x5eed'e7e7'0001ULL);
  std::exponential_distribution<double> exponential(1.0 / 1000.0);
  std::vector<TimeNs> deltas(kDeltaCount);
  for (TimeNs& d : deltas) {
    d = static_cast<TimeNs>(exponential(rng));
  }
  return deltas;
}

const std::vector<TimeNs>& deltas() {
  static const std::vector<TimeNs> kDeltas = draw_deltas();
  return kDeltas;
}

void bm_event_queue(benchmark::State& state, const EventQueueEntry* backend) {
  const auto population = static_cast<std::size_t>(state.range(0));
  const std::vector<TimeNs>& delta = deltas();
  auto queue = backend->make();
  std::uint64_t seq = 0;
  for (std::size_t i = 0; i < population; ++i) {
    queue->push(QueueEntry{EventKey{delta[i % kDeltaCount], seq++}, static_cast<std::uint32_t>(i)});
  }
  std::size_t k = population;
  for (auto _ : state) {
    const QueueEntry next = queue->pop();
    benchmark::DoNotOptimize(next);
    const TimeNs at = next.key.time_ns + delta[k++ & (kDeltaCount - 1)];
    queue->push(QueueEntry{EventKey{at, seq++}, next.slot});
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Each iteration is one run() that dispatches exactly one event: the event reschedules itself and stops the
// run, so the population stays constant and each iteration costs one pop, one push and one callback.
void bm_simulator_hold(benchmark::State& state) {
  const auto population = static_cast<std::size_t>(state.range(0));
  const std::vector<TimeNs>& delta = deltas();
  Simulator sim;
  std::size_t k = population;
  std::function<void()> hold = [&] {
    sim.schedule(delta[k++ & (kDeltaCount - 1)], hold);
    sim.stop();
  };
  for (std::size_t i = 0; i < population; ++i) {
    sim.schedule_at(delta[i % kDeltaCount], hold);
  }
  for (auto _ : state) {
    sim.run();
  }
  benchmark::DoNotOptimize(sim.now());
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// "binary-heap" -> "BinaryHeap"
std::string camel_case(std::string_view name) {
  std::string out;
  bool upper = true;
  for (const char c : name) {
    if (c == '-' || c == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

bool register_event_queue_benchmarks() {
  for (const EventQueueEntry& backend : event_queue_registry()) {
    auto* b = benchmark::RegisterBenchmark(("BM_EventQueue_" + camel_case(backend.name)).c_str(),
                                           bm_event_queue, &backend);
    for (const std::int64_t population : kPopulations) {
      b->Arg(population);
    }
  }
  auto* sim = benchmark::RegisterBenchmark("BM_Simulator_Hold", bm_simulator_hold);
  for (const std::int64_t population : kPopulations) {
    sim->Arg(population);
  }
  return true;
}

[[maybe_unused]] const bool kRegistered = register_event_queue_benchmarks();

}  // namespace
}  // namespace vramsim::bench
