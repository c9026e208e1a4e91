// Shared fixture for the PyTorchCachingPolicy tests: a SimulatedDevice, the memory_stats() observer and a
// recorder of every event the policy reports (in the order the real allocator writes its trace, spec §8.5).
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/alloc/size_classes.h"
#include "sim/report/memory_stats.h"

namespace vramsim::test {

struct RecordedEvent {
  std::string action;  // alloc, free_requested, free_completed, segment_alloc/free/map/unmap
  Bytes addr = 0;
  Bytes size_bytes = 0;   // orig for block events (like the trace's `size`), segment/mapped bytes otherwise
  Bytes block_bytes = 0;  // block events only: the block size
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
};

class RecordingObserver final : public IAllocObserver {
 public:
  std::vector<RecordedEvent> events;
  std::vector<OomInfo> ooms;
  int retries = 0;
  int syncs = 0;

  void on_alloc(const BlockEventInfo& e) override { block("alloc", e); }
  void on_free_requested(const BlockEventInfo& e) override { block("free_requested", e); }
  void on_free_completed(const BlockEventInfo& e) override { block("free_completed", e); }
  void on_segment_alloc(const SegmentEventInfo& e) override { segment("segment_alloc", e); }
  void on_segment_free(const SegmentEventInfo& e) override { segment("segment_free", e); }
  void on_segment_map(const SegmentEventInfo& e) override { segment("segment_map", e); }
  void on_segment_unmap(const SegmentEventInfo& e) override { segment("segment_unmap", e); }
  void on_alloc_retry() override { ++retries; }
  void on_sync_all_streams() override { ++syncs; }
  void on_oom(const OomInfo& e) override { ooms.push_back(e); }

  std::vector<RecordedEvent> of(std::string_view action) const {
    std::vector<RecordedEvent> out;
    for (const RecordedEvent& e : events) {
      if (e.action == action) {
        out.push_back(e);
      }
    }
    return out;
  }
  std::size_t count(std::string_view action) const { return of(action).size(); }
  std::vector<std::string> actions() const {
    std::vector<std::string> out;
    for (const RecordedEvent& e : events) {
      out.push_back(e.action);
    }
    return out;
  }
  void clear() { events.clear(); }

 private:
  void block(const char* action, const BlockEventInfo& e) {
    events.push_back({action, e.addr, e.requested_bytes, e.size_bytes, e.pool, e.stream});
  }
  void segment(const char* action, const SegmentEventInfo& e) {
    events.push_back({action, e.addr, e.size_bytes, 0, e.pool, e.stream});
  }
};

// One block of a segment as the tests look at it.
struct BlockView {
  Bytes offset = 0;  // from the segment (reservation) base
  Bytes size_bytes = 0;
  bool allocated = false;
  bool mapped = true;
  bool pending = false;  // freed, waiting for stream events
  Bytes requested_bytes = 0;
};

inline std::int64_t max_split_stat(const CachingConfig& c) {
  return c.max_split_size_bytes == kUnlimitedSplitSize ? -1
                                                       : static_cast<std::int64_t>(c.max_split_size_bytes);
}

struct CachingFixture {
  explicit CachingFixture(std::string_view conf = "", Bytes capacity = SimulatedDevice::kUnlimited,
                          Bytes outside = 0)
      : CachingFixture(parse_alloc_conf(conf, "test"), capacity, outside) {}
  CachingFixture(const CachingConfig& config, Bytes capacity, Bytes outside = 0)
      : outside_bytes(outside),
        device(capacity, outside),
        stats(max_split_stat(config)),
        policy(config, device, fan) {
    fan.add(&stats);
    fan.add(&recorder);
  }

  Bytes outside_bytes;  // device memory used by others (SimulatedDevice's reserved_outside)
  SimulatedDevice device;
  MemoryStatsObserver stats;
  RecordingObserver recorder;
  AllocObservers fan;
  PyTorchCachingPolicy policy;

  AllocResult alloc(Bytes bytes, StreamId stream = 0) {
    return policy.allocate(AllocRequest{bytes, stream, 0});
  }
  void free(const AllocResult& r) { policy.free(r.block, 0); }
  // torch.cuda.memory._set_allocator_settings: parsed on top of the current settings (D5).
  void set_settings(std::string_view conf) {
    policy.set_settings(parse_alloc_conf(conf, "test", policy.config()));
  }

  std::int64_t stat(const std::string& key) const {
    const auto all = stats.flatten();
    const auto it = all.find(key);
    INFO("memory_stats key " << key);
    REQUIRE(it != all.end());
    return it->second;
  }
  std::int64_t reserved() const { return stat("reserved_bytes.all.current"); }
  std::int64_t allocated() const { return stat("allocated_bytes.all.current"); }

  // The live segment (or reservation) whose base is `base`, as block views; empty if there is none.
  std::vector<BlockView> layout(Bytes base) const {
    const BlockPool& pool = policy.blocks();
    for (SegmentId sid : pool.live_segments_by_address()) {
      const Segment& seg = pool.segment(sid);
      if (seg.base != base) {
        continue;
      }
      std::vector<BlockView> out;
      for (BlockId id = seg.first; id != kNoBlock; id = pool.block(id).next) {
        const Block& b = pool.block(id);
        out.push_back({b.addr - seg.base, b.size_bytes, b.allocated, b.mapped,
                       !b.allocated && b.event_count > 0, b.requested_bytes});
      }
      return out;
    }
    return {};
  }
  std::size_t live_segments() const { return policy.blocks().live_segments_by_address().size(); }
};

// Spec §7.4: the invariants a model can assert after every step, computed independently from the blocks.
// `stop` turns every check into a REQUIRE (for long random runs, where one broken state would cascade).
#define VRAMSIM_ACC_CHECK(cond) \
  do {                          \
    if (stop) {                 \
      REQUIRE(cond);            \
    } else {                    \
      CHECK(cond);              \
    }                           \
  } while (0)

inline void check_accounting(const CachingFixture& f, bool accumulated_reset = false, bool stop = false) {
  const BlockPool& pool = f.policy.blocks();
  REQUIRE(pool.check_invariants() == "");
  // Index 0 = all, 1 = small, 2 = large (as in memory_stats).
  std::int64_t mapped[3] = {}, allocated[3] = {}, pending[3] = {}, idle_free[3] = {}, split_bytes[3] = {};
  std::int64_t allocs[3] = {}, actives[3] = {}, segments[3] = {}, split_count[3] = {};
  for (SegmentId sid : pool.live_segments_by_address()) {
    const Segment& seg = pool.segment(sid);
    const int p = seg.pool == PoolKind::kSmall ? 1 : 2;
    if (!seg.expandable) {
      segments[0]++;
      segments[p]++;
    }
    for (BlockId id = seg.first; id != kNoBlock; id = pool.block(id).next) {
      const Block& b = pool.block(id);
      REQUIRE(b.pool == seg.pool);
      REQUIRE(b.stream == seg.stream);
      if (!b.mapped) {
        REQUIRE_FALSE(b.allocated);
        continue;
      }
      const auto size = static_cast<std::int64_t>(b.size_bytes);
      for (int i : {0, p}) {
        mapped[i] += size;
        if (b.allocated) {
          allocated[i] += size;
          allocs[i]++;
          actives[i]++;
        } else if (b.event_count > 0) {
          pending[i] += size;
          actives[i]++;
        } else {
          idle_free[i] += size;
          if (!seg.expandable && b.is_split()) {
            split_bytes[i] += size;
            split_count[i]++;
          }
        }
      }
    }
  }
  const auto all = f.stats.flatten();
  auto get = [&all](const std::string& key) {
    const auto it = all.find(key);
    INFO("memory_stats key " << key);
    REQUIRE(it != all.end());
    return it->second;
  };
  static constexpr const char* kNames[3] = {"all", "small_pool", "large_pool"};
  for (int i = 0; i < 3; ++i) {
    const std::string n = kNames[i];
    INFO("pool " << n);
    const std::int64_t reserved = get("reserved_bytes." + n + ".current");
    const std::int64_t alloc_bytes = get("allocated_bytes." + n + ".current");
    const std::int64_t active_bytes = get("active_bytes." + n + ".current");
    VRAMSIM_ACC_CHECK(reserved == mapped[i]);
    VRAMSIM_ACC_CHECK(alloc_bytes == allocated[i]);
    VRAMSIM_ACC_CHECK(reserved - alloc_bytes == idle_free[i] + pending[i]);
    VRAMSIM_ACC_CHECK(active_bytes - alloc_bytes == pending[i]);
    VRAMSIM_ACC_CHECK(get("allocation." + n + ".current") == allocs[i]);
    VRAMSIM_ACC_CHECK(get("active." + n + ".current") == actives[i]);
    VRAMSIM_ACC_CHECK(get("segment." + n + ".current") == segments[i]);
    VRAMSIM_ACC_CHECK(get("inactive_split_bytes." + n + ".current") <= reserved - active_bytes);
    VRAMSIM_ACC_CHECK(get("inactive_split_bytes." + n + ".current") == split_bytes[i]);
    VRAMSIM_ACC_CHECK(get("inactive_split." + n + ".current") == split_count[i]);
  }
  VRAMSIM_ACC_CHECK(static_cast<std::int64_t>(f.policy.total_allocated_bytes()) == mapped[0]);
  VRAMSIM_ACC_CHECK(static_cast<std::int64_t>(f.device.used_bytes() - f.outside_bytes) == mapped[0]);
  // Every current >= 0, peak >= current, and allocated - freed == current (SS1, §7.4).
  for (const auto& [key, value] : all) {
    const auto dot = key.rfind(".current");
    if (dot == std::string::npos || dot + 8 != key.size()) {
      continue;
    }
    const std::string prefix = key.substr(0, dot);
    INFO("stat " << prefix);
    VRAMSIM_ACC_CHECK(value >= 0);
    VRAMSIM_ACC_CHECK(all.at(prefix + ".peak") >= value);
    if (!accumulated_reset) {
      VRAMSIM_ACC_CHECK(all.at(prefix + ".allocated") - all.at(prefix + ".freed") == value);
    }
  }
}

#undef VRAMSIM_ACC_CHECK

}  // namespace vramsim::test
