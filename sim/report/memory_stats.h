// torch.cuda.memory_stats() for the simulated device: the same keys with the same meaning (spec §7), kept by
// observing allocator events, never by the policy itself.
//
// Stat fields: current, peak (max of current since the last reset), allocated (sum of increases), freed (sum
// of decreases). Array stats have the entries all / small_pool / large_pool.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/block_pool.h"

namespace vramsim {

struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void increase(std::int64_t amount) {
    current += amount;
    allocated += amount;
    peak = std::max(peak, current);
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void update(std::int64_t delta) { delta >= 0 ? increase(delta) : decrease(-delta); }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

// Index into a StatArray: kAll, then one per pool kind.
inline constexpr int kStatAll = 0;
inline constexpr int kStatSmall = 1;
inline constexpr int kStatLarge = 2;
using StatArray = std::array<Stat, 3>;

// The array stats, declared once: (name in memory_stats(), member).
#define VRAMSIM_ARRAY_STATS(X)                  \
  X(allocation, allocation)                     \
  X(segment, segment)                           \
  X(active, active)                             \
  X(inactive_split, inactive_split)             \
  X(allocated_bytes, allocated_bytes)           \
  X(reserved_bytes, reserved_bytes)             \
  X(active_bytes, active_bytes)                 \
  X(inactive_split_bytes, inactive_split_bytes) \
  X(requested_bytes, requested_bytes)

#define VRAMSIM_SINGLE_STATS(X) \
  X(oversize_allocations)       \
  X(oversize_segments)

#define VRAMSIM_COUNTERS(X) \
  X(num_alloc_retries)      \
  X(num_ooms)               \
  X(num_sync_all_streams)   \
  X(num_device_alloc)       \
  X(num_device_free)

struct DeviceStats {
#define VRAMSIM_DECLARE_ARRAY(name, member) StatArray member;
  VRAMSIM_ARRAY_STATS(VRAMSIM_DECLARE_ARRAY)
#undef VRAMSIM_DECLARE_ARRAY
#define VRAMSIM_DECLARE_SINGLE(name) Stat name;
  VRAMSIM_SINGLE_STATS(VRAMSIM_DECLARE_SINGLE)
#undef VRAMSIM_DECLARE_SINGLE
#define VRAMSIM_DECLARE_COUNTER(name) std::int64_t name = 0;
  VRAMSIM_COUNTERS(VRAMSIM_DECLARE_COUNTER)
#undef VRAMSIM_DECLARE_COUNTER
  std::int64_t max_split_size = -1;  // constant: bytes, -1 = unlimited
};

class MemoryStatsObserver final : public IAllocObserver {
 public:
  explicit MemoryStatsObserver(std::int64_t max_split_size = -1) { m_stats.max_split_size = max_split_size; }

  // Resets every Stat to what `pool` holds now (current = peak = allocated), for a replay that starts
  // mid-run: the allocator existed before the trace, so the trace's first event does not start from zero.
  void seed_from(const BlockPool& pool, std::uint64_t max_split_size_bytes);

  void on_alloc(const BlockEventInfo& e) override;
  void on_free_requested(const BlockEventInfo& e) override;
  void on_free_completed(const BlockEventInfo& e) override;
  void on_segment_alloc(const SegmentEventInfo& e) override;
  void on_segment_free(const SegmentEventInfo& e) override;
  void on_segment_map(const SegmentEventInfo& e) override;
  void on_segment_unmap(const SegmentEventInfo& e) override;
  void on_inactive_split(PoolKind pool, std::int64_t count, std::int64_t bytes) override;
  void on_alloc_retry() override { ++m_stats.num_alloc_retries; }
  void on_sync_all_streams() override { ++m_stats.num_sync_all_streams; }
  void on_oom(const OomInfo&) override { ++m_stats.num_ooms; }

  const DeviceStats& stats() const { return m_stats; }
  void reset_peak();         // torch.cuda.reset_peak_memory_stats
  void reset_accumulated();  // torch.cuda.reset_accumulated_memory_stats

  std::map<std::string, std::int64_t> flatten() const;

 private:
  template <typename F>
  void for_pool(PoolKind pool, F&& f) {
    f(kStatAll);
    f(pool == PoolKind::kSmall ? kStatSmall : kStatLarge);
  }
  DeviceStats m_stats;
};

// memory_stats() flattened and sorted by key, e.g. "allocated_bytes.all.current" (spec SS3).
std::map<std::string, std::int64_t> flatten_stats(const DeviceStats& stats);

// memory_summary(): the table torch.cuda.memory_summary() prints, from a stats object.
std::string memory_summary(const DeviceStats& stats, int device = 0);

}  // namespace vramsim
