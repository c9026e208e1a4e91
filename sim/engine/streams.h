// Simulated CUDA streams and events on top of the Simulator.
//
// Model (CUDA semantics, host running ahead of the device):
//   * a stream is a FIFO of work items enqueued by the host: ops, event records and event waits;
//   * an op occupies its stream for its duration (the roofline estimate, launch overhead included); the next
//     item starts when it ends. Different streams run concurrently (no SM or bandwidth sharing is modelled);
//   * record_event(A) enqueues a marker on A: the event completes when all work enqueued on A before it has
//     finished. wait_event(B, e) enqueues a barrier on B: later work on B starts only once e has completed
//     (cudaStreamWaitEvent). Waiting on a completed event costs nothing;
//   * the observer hears, from inside the Simulator's run loop: on_op_start / on_op_end (the training-step
//     simulator allocates outputs at start and frees dead tensors at end) and on_event_completed (what a
//     record_stream deferred free waits for).
//
// Ordering: at one simulated time, an op's end is reported before the next op on the same stream starts;
// across streams, notifications follow the Simulator's (time, seq) order, so a run is deterministic.
// Not modelled: the legacy default stream's implicit synchronisation (stream 0 is an ordinary stream here),
// host-side blocking (cudaStreamSynchronize), priorities, and concurrency limits.
//
// Complexity: each item is enqueued, started and finished in O(1) plus one Simulator event (O(log n)).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "sim/core/types.h"
#include "sim/engine/simulator.h"

namespace vramsim {

using CudaEventId = std::uint32_t;  // dense, in record order

struct StreamOp {
  StreamId stream = 0;
  std::uint64_t op_id = 0;  // the caller's tag (e.g. the op-graph vertex); opaque here
  TimeNs start_ns = 0;
  TimeNs duration_ns = 0;
};

class IStreamObserver {
 public:
  virtual ~IStreamObserver() = default;
  virtual void on_op_start(const StreamOp& /*op*/) {}
  // Called at start_ns + duration_ns, before anything else queued on the same stream starts.
  virtual void on_op_end(const StreamOp& /*op*/) {}
  virtual void on_event_completed(CudaEventId /*event*/, StreamId /*stream*/, TimeNs /*time_ns*/) {}
};

class Streams {
 public:
  // `observer` may be null; both must outlive this object. This object must outlive every event it has
  // scheduled on `sim` (run the simulator to completion, or destroy both together).
  Streams(Simulator& sim, IStreamObserver* observer);
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  // Enqueue operations, as the host would issue them. Streams exist from their first use.
  // pre: duration_ns >= 0.
  void enqueue_op(StreamId stream, std::uint64_t op_id, TimeNs duration_ns);
  CudaEventId record_event(StreamId stream);
  // pre: `event` was returned by record_event().
  void wait_event(StreamId stream, CudaEventId event);

  bool event_completed(CudaEventId event) const;
  // True once every stream has drained its FIFO and has no op running.
  bool idle() const;
  // Total time ops have occupied `stream` (0 for an unknown stream).
  TimeNs busy_ns(StreamId stream) const;
  // Streams in id order (those used so far).
  std::vector<StreamId> stream_ids() const;

 private:
  enum class ItemKind : std::uint8_t { kOp, kRecord, kWait };
  struct Item {
    ItemKind kind = ItemKind::kOp;
    std::uint64_t op_id = 0;
    TimeNs duration_ns = 0;
    CudaEventId event = 0;
  };
  struct Stream {
    std::deque<Item> fifo;
    bool op_running = false;
    bool pump_scheduled = false;
    bool waiting = false;  // registered as a waiter of the event at the front of `fifo`
    TimeNs busy_ns = 0;
    // The op running while op_running: its end event captures only (this, stream id), which std::function
    // stores in place, where a captured StreamOp (40 bytes with `this`) cost a heap allocation per op.
    StreamOp running;
  };
  struct EventState {
    StreamId stream = 0;
    bool completed = false;
    std::vector<StreamId> waiters;
  };

  // The stream, made at its first use. Streams with small ids are found through m_indexed (a map lookup
  // per pump, op end and enqueue was a tenth of the engine's work: issue 40).
  Stream& stream(StreamId id) {
    if (id >= kIndexedStreams) {
      return m_streams[id];
    }
    Stream*& s = m_indexed[id];
    if (s == nullptr) {
      s = &m_streams[id];  // std::map's nodes stay where they are
    }
    return *s;
  }
  void enqueue(StreamId id, const Item& item);
  void request_pump(StreamId id);
  void pump(StreamId id);
  void finish_op(StreamId id);
  void complete_event(CudaEventId event);

  Simulator& m_sim;
  IStreamObserver* m_observer;
  std::map<StreamId, Stream> m_streams;  // ordered: deterministic iteration
  static constexpr StreamId kIndexedStreams = 128;
  std::array<Stream*, kIndexedStreams> m_indexed{};  // m_streams' entries by id, once made
  std::vector<EventState> m_events;                  // indexed by CudaEventId
};

}  // namespace vramsim
