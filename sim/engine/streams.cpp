#include "sim/engine/streams.h"

#include "sim/core/assert.h"

namespace vramsim {
namespace {
IStreamObserver& null_observer() {
  static IStreamObserver kNull;
  return kNull;
}
}  // namespace

Streams::Streams(Simulator& sim, IStreamObserver* observer)
    : m_sim(sim), m_observer(observer != nullptr ? observer : &null_observer()) {}

void Streams::enqueue_op(StreamId id, std::uint64_t op_id, TimeNs duration_ns) {
  SIM_ASSERT(duration_ns >= 0);
  enqueue(id, Item{ItemKind::kOp, op_id, duration_ns, 0});
}

CudaEventId Streams::record_event(StreamId id) {
  SIM_ASSERT(m_events.size() < UINT32_MAX);
  const auto event = static_cast<CudaEventId>(m_events.size());
  m_events.push_back(EventState{id, false, {}});
  enqueue(id, Item{ItemKind::kRecord, 0, 0, event});
  return event;
}

void Streams::wait_event(StreamId id, CudaEventId event) {
  SIM_ASSERT(event < m_events.size());
  enqueue(id, Item{ItemKind::kWait, 0, 0, event});
}

bool Streams::event_completed(CudaEventId event) const {
  SIM_ASSERT(event < m_events.size());
  return m_events[event].completed;
}

bool Streams::idle() const {
  for (const auto& [id, s] : m_streams) {
    if (s.op_running || !s.fifo.empty()) {
      return false;
    }
  }
  return true;
}

TimeNs Streams::busy_ns(StreamId id) const {
  const auto it = m_streams.find(id);
  return it == m_streams.end() ? 0 : it->second.busy_ns;
}

std::vector<StreamId> Streams::stream_ids() const {
  std::vector<StreamId> ids;
  ids.reserve(m_streams.size());
  for (const auto& [id, s] : m_streams) {
    ids.push_back(id);
  }
  return ids;
}

// Work is never started from inside enqueue_*(): the host may be outside the run loop, and observers must
// only ever be called from it. A pump event at the current time starts whatever can start.
void Streams::enqueue(StreamId id, const Item& item) {
  Stream& s = stream(id);
  s.fifo.push_back(item);
  if (!s.op_running && !s.waiting) {
    request_pump(id);
  }
}

void Streams::request_pump(StreamId id) {
  Stream& s = stream(id);
  if (s.pump_scheduled) {
    return;
  }
  s.pump_scheduled = true;
  m_sim.schedule(0, [this, id] {
    stream(id).pump_scheduled = false;
    pump(id);
  });
}

// Runs the stream's zero-time items (records, satisfied waits) and starts its next op, if any. Stops at an
// op (now running), an unsatisfied wait (now registered as a waiter), or an empty FIFO.
void Streams::pump(StreamId id) {
  Stream& s = stream(id);
  while (!s.op_running && !s.fifo.empty()) {
    const Item item = s.fifo.front();
    switch (item.kind) {
      case ItemKind::kOp: {
        s.fifo.pop_front();
        s.op_running = true;
        s.running = StreamOp{id, item.op_id, m_sim.now(), item.duration_ns};
        m_observer->on_op_start(s.running);
        m_sim.schedule(item.duration_ns, [this, id] { finish_op(id); });
        return;
      }
      case ItemKind::kRecord:
        s.fifo.pop_front();
        complete_event(item.event);
        break;
      case ItemKind::kWait:
        if (!m_events[item.event].completed) {
          if (!s.waiting) {
            s.waiting = true;
            m_events[item.event].waiters.push_back(id);
          }
          return;
        }
        s.waiting = false;
        s.fifo.pop_front();
        break;
    }
  }
}

void Streams::finish_op(StreamId id) {
  Stream& s = stream(id);
  SIM_ASSERT(s.op_running);
  const StreamOp op = s.running;
  SIM_ASSERT(m_sim.now() == op.start_ns + op.duration_ns);
  s.op_running = false;
  s.busy_ns += op.duration_ns;
  m_observer->on_op_end(op);
  pump(id);
}

void Streams::complete_event(CudaEventId event) {
  EventState& e = m_events[event];
  SIM_ASSERT(!e.completed);
  e.completed = true;
  m_observer->on_event_completed(event, e.stream, m_sim.now());
  for (const StreamId waiter : e.waiters) {
    request_pump(waiter);
  }
  e.waiters.clear();
}

}  // namespace vramsim
