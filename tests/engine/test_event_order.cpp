// Simulator behaviour: (time, seq) order, lazy cancel, scheduling from callbacks, run_until/stop, the
// counters the end-of-run checks rely on, and reproducibility. Run against every queue backend.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "sim/engine/queue_registry.h"
#include "sim/engine/simulator.h"

using namespace vramsim;

namespace {

std::string backend_name() {
  std::vector<std::string> names;
  for (const EventQueueEntry& q : event_queue_registry()) {
    names.emplace_back(q.name);
  }
  return GENERATE_COPY(from_range(names));
}

// A random cascade: every event logs (id, now), schedules one or two children (until 2000 exist) at random
// delays (including 0), and sometimes cancels a random earlier event. Returns the log.
std::vector<std::pair<int, TimeNs>> random_cascade(const std::string& backend, std::uint64_t seed) {
  Simulator sim(backend);
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int, TimeNs>> log;
  std::vector<EventId> ids;
  int next_id = 0;
  std::function<void(int)> fire = [&](int id) {
    log.emplace_back(id, sim.now());
    if (next_id < 2000) {
      const int children = 1 + static_cast<int>(rng() % 2);
      for (int c = 0; c < children; ++c) {
        const int child = next_id++;
        ids.push_back(sim.schedule(static_cast<TimeNs>(rng() % 4) * 10, [&fire, child] { fire(child); }));
      }
    }
    if (!ids.empty() && rng() % 5 == 0) {
      sim.cancel(ids[rng() % ids.size()]);
    }
  };
  for (int i = 0; i < 8; ++i) {
    const int id = next_id++;
    ids.push_back(sim.schedule_at(static_cast<TimeNs>(rng() % 3) * 10, [&fire, id] { fire(id); }));
  }
  sim.run();
  CHECK(sim.events_queued() == 0);
  CHECK(sim.events_scheduled() == sim.events_dispatched() + sim.events_skipped());
  return log;
}

}  // namespace

TEST_CASE("engine: same-time events run in insertion order", "[quick][engine]") {
  Simulator sim(backend_name());
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) {
    sim.schedule_at(50, [&order, i] { order.push_back(i); });
  }
  sim.schedule_at(10, [&order] { order.push_back(-1); });
  sim.run();
  REQUIRE(order.size() == 101);
  CHECK(order.front() == -1);
  for (int i = 0; i < 100; ++i) {
    CHECK(order[static_cast<std::size_t>(i) + 1] == i);
  }
  CHECK(sim.now() == 50);
}

TEST_CASE("engine: cancel skips the event, stale and running handles are rejected", "[quick][engine]") {
  Simulator sim(backend_name());
  std::vector<int> ran;
  EventId self{};
  const EventId a = sim.schedule(10, [&ran] { ran.push_back(1); });
  const EventId b = sim.schedule(20, [&ran] { ran.push_back(2); });
  self = sim.schedule(30, [&] {
    ran.push_back(3);
    CHECK_FALSE(sim.cancel(self));  // the running event is no longer pending
  });
  CHECK(sim.is_pending(b));
  CHECK(sim.cancel(b));
  CHECK_FALSE(sim.cancel(b));          // twice
  CHECK_FALSE(sim.cancel(EventId{}));  // a default handle names no event (slot 0 may be free)
  CHECK(sim.events_pending() == 2);
  CHECK(sim.events_queued() == 3);
  sim.run();
  CHECK(ran == std::vector<int>{1, 3});
  CHECK(sim.events_dispatched() == 2);
  CHECK(sim.events_skipped() == 1);
  CHECK_FALSE(sim.cancel(a));  // already ran
  // The freed slots are reused; old handles must not cancel the new occupants.
  bool new_ran = false;
  sim.schedule(5, [&new_ran] { new_ran = true; });
  CHECK_FALSE(sim.cancel(a));
  CHECK_FALSE(sim.cancel(b));
  sim.run();
  CHECK(new_ran);
}

TEST_CASE("engine: callbacks schedule, and same-time children run after queued peers", "[quick][engine]") {
  Simulator sim(backend_name());
  std::vector<std::string> log;
  sim.schedule_at(100, [&] {
    log.push_back("parent@" + std::to_string(sim.now()));
    sim.schedule(0, [&] { log.push_back("child0@" + std::to_string(sim.now())); });
    sim.schedule(7, [&] { log.push_back("child7@" + std::to_string(sim.now())); });
  });
  sim.schedule_at(100, [&] { log.push_back("peer@" + std::to_string(sim.now())); });
  sim.run();
  CHECK(log == std::vector<std::string>{"parent@100", "peer@100", "child0@100", "child7@107"});
}

TEST_CASE("engine: time never goes backwards and events fire at their time", "[quick][engine]") {
  const std::string backend = backend_name();
  Simulator sim(backend);
  std::mt19937_64 rng(42);
  TimeNs last = 0;
  int fired = 0;
  std::function<void(TimeNs)> fire = [&](TimeNs due) {
    CHECK(sim.now() == due);
    CHECK(sim.now() >= last);
    last = sim.now();
    if (++fired < 5000) {
      const TimeNs delay = static_cast<TimeNs>(rng() % 1000);
      sim.schedule(delay, [&fire, due = sim.now() + delay] { fire(due); });
    }
  };
  for (int i = 0; i < 50; ++i) {
    const TimeNs t = static_cast<TimeNs>(rng() % 1000);
    sim.schedule_at(t, [&fire, t] { fire(t); });
  }
  sim.run();
  CHECK(fired == 5000 + 49);
}

TEST_CASE("engine: run_until stops at the horizon and stop() ends a run", "[quick][engine]") {
  Simulator sim(backend_name());
  std::vector<TimeNs> at;
  for (TimeNs t : {5, 10, 15, 20}) {
    sim.schedule_at(t, [&at, &sim] { at.push_back(sim.now()); });
  }
  sim.run_until(10);
  CHECK(at == std::vector<TimeNs>{5, 10});
  CHECK(sim.now() == 10);
  CHECK(sim.events_pending() == 2);
  sim.run_until(12);
  CHECK(sim.now() == 12);
  sim.schedule(0, [&sim] { sim.stop(); });
  sim.schedule(1, [] {});
  sim.run();
  CHECK(sim.now() == 12);
  CHECK(sim.events_pending() == 3);
  sim.run();
  CHECK(at == std::vector<TimeNs>{5, 10, 15, 20});
  CHECK(sim.events_pending() == 0);
}

TEST_CASE("engine: runs are reproducible and identical across backends", "[quick][engine]") {
  for (std::uint64_t seed : {1u, 7u, 12345u}) {
    const auto reference = random_cascade("binary-heap", seed);
    REQUIRE(reference.size() > 100);
    CHECK(random_cascade("binary-heap", seed) == reference);
    for (const EventQueueEntry& q : event_queue_registry()) {
      INFO("backend " << q.name << " seed " << seed);
      CHECK(random_cascade(std::string(q.name), seed) == reference);
    }
  }
}

TEST_CASE("engine: unknown queue backend is an input error", "[quick][engine]") {
  CHECK_THROWS_AS(Simulator("calendar"), InputError);
  CHECK_THROWS_WITH(Simulator("calendar"), Catch::Contains("binary-heap") && Catch::Contains("map"));
}
