// The IEventQueue contract (i_event_queue.h), checked for every entry of event_queue_registry() against a
// reference model (a std::set ordered by EventKey): random push / pop / peek / remove sequences with many
// ties in time, growing and draining the queue several times.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sim/engine/queue_registry.h"

using namespace vramsim;

namespace {

struct ByKey {
  bool operator()(const QueueEntry& a, const QueueEntry& b) const { return a.key < b.key; }
};

void run_contract(IEventQueue& queue, std::uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::set<QueueEntry, ByKey> model;
  std::uint64_t next_seq = 0;
  TimeNs floor_ns = 0;  // like the Simulator: new events are never before the last popped one
  for (int step = 0; step < steps; ++step) {
    // Phases bias the mix so the queue both grows large and drains to empty.
    const bool growing = (step / 500) % 2 == 0;
    const auto dice = static_cast<int>(rng() % 100);
    REQUIRE(queue.empty() == model.empty());
    if (model.empty() || dice < (growing ? 55 : 25)) {
      const QueueEntry e{EventKey{floor_ns + static_cast<TimeNs>(rng() % 16), next_seq++},
                         static_cast<std::uint32_t>(rng() % 1000)};
      queue.push(e);
      model.insert(e);
    } else if (dice < (growing ? 80 : 70)) {
      const QueueEntry expected = *model.begin();
      REQUIRE(queue.peek() == expected);
      REQUIRE(queue.pop() == expected);
      model.erase(model.begin());
      floor_ns = expected.key.time_ns;
    } else if (dice < 90) {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      queue.remove(*it);
      model.erase(it);
    } else {
      REQUIRE(queue.peek() == *model.begin());
    }
  }
  while (!model.empty()) {  // drain: everything comes out, in key order
    REQUIRE_FALSE(queue.empty());
    REQUIRE(queue.pop() == *model.begin());
    model.erase(model.begin());
  }
  REQUIRE(queue.empty());
}

}  // namespace

TEST_CASE("event queue contract: every registered backend", "[quick][engine]") {
  REQUIRE(event_queue_registry().size() >= 2);
  std::vector<std::string> names;
  for (const EventQueueEntry& q : event_queue_registry()) {
    names.emplace_back(q.name);
  }
  const std::string name = GENERATE_COPY(from_range(names));
  INFO("backend " << name);
  CHECK(find_event_queue(name).name == name);

  SECTION("random push/pop/peek/remove against a reference model") {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      INFO("seed " << seed);
      auto queue = find_event_queue(name).make();
      run_contract(*queue, seed, 4000);
    }
  }
  SECTION("removing the front, the back and a middle entry") {
    auto queue = find_event_queue(name).make();
    std::vector<QueueEntry> entries;
    for (std::uint32_t i = 0; i < 9; ++i) {
      entries.push_back(QueueEntry{EventKey{static_cast<TimeNs>(i / 3), i}, i});
    }
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // pushed in reverse order
      queue->push(*it);
    }
    queue->remove(entries[0]);
    queue->remove(entries[8]);
    queue->remove(entries[4]);
    for (std::uint32_t i : {1u, 2u, 3u, 5u, 6u, 7u}) {
      REQUIRE(queue->pop() == entries[i]);
    }
    CHECK(queue->empty());
  }
  SECTION("equal times pop in seq order whatever the push order") {
    auto queue = find_event_queue(name).make();
    std::vector<std::uint64_t> seqs(200);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      seqs[i] = i;
    }
    std::shuffle(seqs.begin(), seqs.end(), std::mt19937_64(3));
    for (const std::uint64_t s : seqs) {
      queue->push(QueueEntry{EventKey{77, s}, static_cast<std::uint32_t>(s)});
    }
    for (std::uint64_t s = 0; s < seqs.size(); ++s) {
      REQUIRE(queue->pop().key.seq == s);
    }
  }
}
