// Simulated CUDA streams: FIFO execution per stream, concurrency across streams, record/wait dependencies,
// hook order, event-completion notifications and deterministic output.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/engine/queue_registry.h"
#include "sim/engine/simulator.h"
#include "sim/engine/streams.h"

using namespace vramsim;

namespace {

// Logs every notification as "t=<time> <what>".
struct Recorder final : IStreamObserver {
  explicit Recorder(Simulator& s) : sim(s) {}
  void on_op_start(const StreamOp& op) override {
    log.push_back(fmt::format("t={} start s{} op{}", sim.now(), op.stream, op.op_id));
  }
  void on_op_end(const StreamOp& op) override {
    log.push_back(fmt::format("t={} end s{} op{}", sim.now(), op.stream, op.op_id));
    if (on_end) {
      on_end(op);
    }
  }
  void on_event_completed(CudaEventId event, StreamId stream, TimeNs time_ns) override {
    CHECK(time_ns == sim.now());
    log.push_back(fmt::format("t={} event{} s{}", time_ns, event, stream));
  }
  Simulator& sim;
  std::vector<std::string> log;
  std::function<void(const StreamOp&)> on_end;
};

// Two streams, compute (1) and a side stream (2), with the dependency pattern of a training step: the side
// stream waits for a result of compute, compute later waits for the side stream's work.
std::vector<std::string> two_stream_scenario(const std::string& backend) {
  Simulator sim(backend);
  Recorder rec(sim);
  Streams streams(sim, &rec);
  streams.enqueue_op(1, 10, 100);
  const CudaEventId produced = streams.record_event(1);
  streams.enqueue_op(1, 11, 50);
  streams.wait_event(2, produced);
  streams.enqueue_op(2, 20, 80);
  const CudaEventId side_done = streams.record_event(2);
  streams.wait_event(1, side_done);
  streams.enqueue_op(1, 12, 10);
  sim.run();
  CHECK(streams.idle());
  return rec.log;
}

}  // namespace

TEST_CASE("streams: ops on one stream run in FIFO order, each occupying it for its duration",
          "[quick][engine]") {
  Simulator sim;
  Recorder rec(sim);
  Streams streams(sim, &rec);
  streams.enqueue_op(7, 1, 10);
  streams.enqueue_op(7, 2, 20);
  streams.enqueue_op(7, 3, 0);
  streams.enqueue_op(7, 4, 5);
  CHECK(rec.log.empty());  // nothing starts outside the run loop
  sim.run();
  CHECK(rec.log == std::vector<std::string>{"t=0 start s7 op1", "t=10 end s7 op1", "t=10 start s7 op2",
                                            "t=30 end s7 op2", "t=30 start s7 op3", "t=30 end s7 op3",
                                            "t=30 start s7 op4", "t=35 end s7 op4"});
  CHECK(streams.busy_ns(7) == 35);
  CHECK(streams.busy_ns(8) == 0);
  CHECK(streams.idle());
}

TEST_CASE("streams: different streams run concurrently", "[quick][engine]") {
  Simulator sim;
  Recorder rec(sim);
  Streams streams(sim, &rec);
  streams.enqueue_op(1, 1, 30);
  streams.enqueue_op(2, 2, 10);
  streams.enqueue_op(2, 3, 10);
  sim.run();
  CHECK(rec.log == std::vector<std::string>{"t=0 start s1 op1", "t=0 start s2 op2", "t=10 end s2 op2",
                                            "t=10 start s2 op3", "t=20 end s2 op3", "t=30 end s1 op1"});
  CHECK(sim.now() == 30);
  CHECK(streams.stream_ids() == std::vector<StreamId>{1, 2});
}

TEST_CASE("streams: wait_event delays later work until the recorded work has finished", "[quick][engine]") {
  const auto log = two_stream_scenario("binary-heap");
  CHECK(log == std::vector<std::string>{
                   "t=0 start s1 op10",
                   "t=100 end s1 op10",
                   "t=100 event0 s1",  // op10 done: the record completes before op11 starts
                   "t=100 start s1 op11",
                   "t=100 start s2 op20",  // stream 2 was blocked on event0 until now
                   "t=150 end s1 op11",    // stream 1 now blocks on event1
                   "t=180 end s2 op20",
                   "t=180 event1 s2",
                   "t=180 start s1 op12",
                   "t=190 end s1 op12",
               });
}

TEST_CASE("streams: output is deterministic for the same input, on every queue backend", "[quick][engine]") {
  const auto reference = two_stream_scenario("binary-heap");
  CHECK(two_stream_scenario("binary-heap") == reference);
  for (const EventQueueEntry& q : event_queue_registry()) {
    INFO("backend " << q.name);
    CHECK(two_stream_scenario(std::string(q.name)) == reference);
  }
}

TEST_CASE("streams: events on idle streams complete at once, waits on completed events are free",
          "[quick][engine]") {
  Simulator sim;
  Recorder rec(sim);
  Streams streams(sim, &rec);
  const CudaEventId idle_event = streams.record_event(3);
  CHECK_FALSE(streams.event_completed(idle_event));  // completes inside the run loop
  sim.run();
  CHECK(streams.event_completed(idle_event));
  sim.schedule(40, [&] {
    streams.wait_event(4, idle_event);
    streams.enqueue_op(4, 1, 5);
  });
  sim.run();
  CHECK(rec.log == std::vector<std::string>{"t=0 event0 s3", "t=40 start s4 op1", "t=45 end s4 op1"});
}

TEST_CASE("streams: hooks may enqueue work, and an end precedes the next start", "[quick][engine]") {
  Simulator sim;
  Recorder rec(sim);
  Streams streams(sim, &rec);
  int issued = 0;
  rec.on_end = [&](const StreamOp& op) {
    if (++issued < 3) {
      streams.enqueue_op(op.stream, op.op_id + 1, 10);
      streams.record_event(op.stream);
    }
  };
  streams.enqueue_op(0, 100, 10);
  sim.run();
  CHECK(rec.log == std::vector<std::string>{"t=0 start s0 op100", "t=10 end s0 op100", "t=10 start s0 op101",
                                            "t=20 end s0 op101", "t=20 event0 s0", "t=20 start s0 op102",
                                            "t=30 end s0 op102", "t=30 event1 s0"});
  CHECK(streams.idle());
}

TEST_CASE("streams: several streams waiting on one event all resume at its completion", "[quick][engine]") {
  Simulator sim;
  Recorder rec(sim);
  Streams streams(sim, &rec);
  streams.enqueue_op(1, 1, 25);
  const CudaEventId e = streams.record_event(1);
  for (StreamId s : {2, 3, 4}) {
    streams.wait_event(s, e);
    streams.enqueue_op(s, 10 * s, 1);
  }
  sim.run();
  CHECK(rec.log == std::vector<std::string>{"t=0 start s1 op1", "t=25 end s1 op1", "t=25 event0 s1",
                                            "t=25 start s2 op20", "t=25 start s3 op30", "t=25 start s4 op40",
                                            "t=26 end s2 op20", "t=26 end s3 op30", "t=26 end s4 op40"});
}
