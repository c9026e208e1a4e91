// The device as the recording saw it: an IDeviceMemory that answers the model's cudaMalloc / cudaFree /
// map / unmap calls from the trace's own segment events, and scores each call against them.
//
// The replay driver opens a window of recorded segment events before each operation it replays (the
// segment events written just before an alloc or oom, or a burst of releases that is an empty_cache). Inside
// it, each model call is compared with the next recorded event: same action, address and size = matched.
//   * cudaMalloc / map succeed with the recorded address when the next recorded event is that segment_alloc /
//     segment_map; they FAIL when the next recorded event is a release or the window ends in an oom: that is
//     how the real cudaMalloc answered, and it sends the model down the same retry ladder (spec §4.1) -- we
//     follow the recorded cudaMalloc outcomes rather than guess the device's capacity.
//   * a call with no recorded counterpart is a divergence; it is served from a synthetic address range far
//     from the recorded ones (or refused when --capacity says the device is full).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/alloc/device_memory.h"
#include "traces/trace_event.h"

namespace vramsim {

struct Divergence {
  std::size_t event_index = 0;
  std::string expected;
  std::string got;
};

class RecordedDevice final : public IDeviceMemory {
 public:
  // `events` must outlive this object. capacity_bytes: the device total; 0 = unknown (never refuses on its
  // own).
  RecordedDevice(const std::vector<TraceEvent>& events, Bytes capacity_bytes, Bytes initial_used_bytes);

  // The recorded segment events [begin, end) belong to the operation about to be replayed at `op_index`.
  void open_window(std::size_t begin, std::size_t end, std::size_t op_index, bool ends_in_oom);
  // Unconsumed recorded events of the window count as unmatched (first one becomes a divergence).
  void close_window();
  // A cudaMalloc / map the recording does not show is taken as refused, not as a divergence: with a
  // use_on_oom MemPool the real allocator, refused, served the request from that pool's free blocks
  // (try_mempool_fallback), which leaves no trace entry of the refusal.
  void set_refuse_unrecorded(bool refuse) { m_refuse_unrecorded = refuse; }

  std::optional<Bytes> malloc(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void free(Bytes addr, Bytes size_bytes) override;
  Bytes reserve(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void release_reservation(Bytes addr, Bytes size_bytes) override;
  bool map(Bytes addr, Bytes size_bytes) override;
  void unmap(Bytes addr, Bytes size_bytes) override;
  Bytes total_bytes() const override;
  Bytes free_bytes() const override;

  std::size_t segment_events_recorded() const { return m_recorded; }
  std::size_t segment_events_matched() const { return m_matched; }
  std::size_t model_segment_calls() const { return m_model_calls; }
  const std::optional<Divergence>& first_divergence() const { return m_first_divergence; }
  void note_divergence(std::size_t event_index, std::string expected, std::string got);
  // True once a divergence is noted: only the first is kept, so callers skip describing later ones (a
  // generated trace places every block elsewhere than the model: formatting each would dominate the replay).
  bool diverged() const { return m_first_divergence.has_value(); }
  // Device calls refused because the recording says the real one failed / because of --capacity.
  std::size_t refused_as_recorded() const { return m_refused_as_recorded; }
  std::size_t refused_for_capacity() const { return m_refused_for_capacity; }
  Bytes used_bytes() const { return m_used_bytes; }
  // What the recorded cudaMalloc failures say about the device: the smallest (reserved + request) that
  // failed. 0 when nothing failed.
  Bytes failed_total_bytes() const { return m_failed_total_bytes; }

 private:
  // Compares the model's call with the next recorded event; returns true when it matched.
  bool consume(TraceAction action, Bytes addr, Bytes size_bytes);
  const TraceEvent* peek() const { return m_cursor < m_end ? &m_events[m_cursor] : nullptr; }
  Bytes synthetic_address(Bytes size_bytes);
  bool recorded_failure_next() const;
  // Counts the refusal; returns true when the call must fail.
  bool refuse(bool recorded_failure, Bytes size_bytes);
  bool over_capacity(Bytes size_bytes) const {
    return m_capacity_bytes != 0 && m_used_bytes + size_bytes > m_capacity_bytes;
  }

  const std::vector<TraceEvent>& m_events;
  Bytes m_capacity_bytes;
  Bytes m_used_bytes;
  std::size_t m_cursor = 0;
  std::size_t m_end = 0;
  std::size_t m_op_index = 0;
  bool m_ends_in_oom = false;
  bool m_refuse_unrecorded = false;
  std::size_t m_recorded = 0;
  std::size_t m_matched = 0;
  std::size_t m_model_calls = 0;
  std::size_t m_refused_as_recorded = 0;
  std::size_t m_refused_for_capacity = 0;
  Bytes m_failed_total_bytes = 0;
  Bytes m_next_synthetic = Bytes{0xf} << 44;
  std::optional<Divergence> m_first_divergence;
};

}  // namespace vramsim
