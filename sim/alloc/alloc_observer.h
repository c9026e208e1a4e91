// What an allocator policy tells the world. Statistics, peaks, traces and reports are observers of these
// events (sim/report/); policies never keep statistics themselves.
//
// Ordering contract: events arrive in the order the modelled allocator would write its trace entries
// (spec §8.5): segment_alloc / segment_map before the alloc they serve, free_requested before
// free_completed, segment_free just before the cudaFree.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/alloc/block_pool.h"
#include "sim/core/types.h"

namespace vramsim {

struct BlockEventInfo {
  Bytes addr = 0;
  Bytes size_bytes = 0;       // block size (>= rounded request)
  Bytes requested_bytes = 0;  // orig
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  bool oversize = false;  // size >= max_split_size (oversize_allocations)
  TimeNs time_ns = 0;
};

struct SegmentEventInfo {
  Bytes addr = 0;
  Bytes size_bytes = 0;  // cudaMalloc size, or mapped / unmapped bytes
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  bool oversize = false;  // size >= max_split_size (oversize_segments); never set for maps
  TimeNs time_ns = 0;
};

struct OomInfo {
  Bytes rounded_bytes = 0;      // s
  Bytes allocation_bytes = 0;   // seg the allocator tried to get
  Bytes device_free_bytes = 0;  // cudaMemGetInfo free at the time
  Bytes allowed_bytes = 0;      // memory-fraction limit, 0 when none
  StreamId stream = 0;
  TimeNs time_ns = 0;
};

class IAllocObserver {
 public:
  virtual ~IAllocObserver() = default;
  virtual void on_alloc(const BlockEventInfo&) {}
  virtual void on_free_requested(const BlockEventInfo&) {}
  virtual void on_free_completed(const BlockEventInfo&) {}
  virtual void on_segment_alloc(const SegmentEventInfo&) {}  // cudaMalloc
  virtual void on_segment_free(const SegmentEventInfo&) {}   // cudaFree
  virtual void on_segment_map(const SegmentEventInfo&) {}    // expandable pages mapped
  virtual void on_segment_unmap(const SegmentEventInfo&) {}  // expandable pages unmapped
  // Free, idle blocks that sit in a split segment changed by (count, bytes) (spec §7.3).
  virtual void on_inactive_split(PoolKind, std::int64_t /*count*/, std::int64_t /*bytes*/) {}
  virtual void on_alloc_retry() {}
  virtual void on_sync_all_streams() {}
  virtual void on_oom(const OomInfo&) {}
};

// Fan-out to any number of observers, in registration order. Observers are not owned.
class AllocObservers final : public IAllocObserver {
 public:
  void add(IAllocObserver* observer) { m_observers.push_back(observer); }
  void on_alloc(const BlockEventInfo& e) override {
    for (auto* o : m_observers) o->on_alloc(e);
  }
  void on_free_requested(const BlockEventInfo& e) override {
    for (auto* o : m_observers) o->on_free_requested(e);
  }
  void on_free_completed(const BlockEventInfo& e) override {
    for (auto* o : m_observers) o->on_free_completed(e);
  }
  void on_segment_alloc(const SegmentEventInfo& e) override {
    for (auto* o : m_observers) o->on_segment_alloc(e);
  }
  void on_segment_free(const SegmentEventInfo& e) override {
    for (auto* o : m_observers) o->on_segment_free(e);
  }
  void on_segment_map(const SegmentEventInfo& e) override {
    for (auto* o : m_observers) o->on_segment_map(e);
  }
  void on_segment_unmap(const SegmentEventInfo& e) override {
    for (auto* o : m_observers) o->on_segment_unmap(e);
  }
  void on_inactive_split(PoolKind p, std::int64_t c, std::int64_t b) override {
    for (auto* o : m_observers) o->on_inactive_split(p, c, b);
  }
  void on_alloc_retry() override {
    for (auto* o : m_observers) o->on_alloc_retry();
  }
  void on_sync_all_streams() override {
    for (auto* o : m_observers) o->on_sync_all_streams();
  }
  void on_oom(const OomInfo& e) override {
    for (auto* o : m_observers) o->on_oom(e);
  }

 private:
  std::vector<IAllocObserver*> m_observers;
};

}  // namespace vramsim
