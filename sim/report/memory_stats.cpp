#include "sim/report/memory_stats.h"

#include <fmt/format.h>

namespace vramsim {

namespace {
std::int64_t as_i64(Bytes b) { return static_cast<std::int64_t>(b); }
}  // namespace

void MemoryStatsObserver::on_alloc(const BlockEventInfo& e) {
  for_pool(e.pool, [&](int i) {
    m_stats.allocation[i].increase(1);
    m_stats.allocated_bytes[i].increase(as_i64(e.size_bytes));
    m_stats.active[i].increase(1);
    m_stats.active_bytes[i].increase(as_i64(e.size_bytes));
    m_stats.requested_bytes[i].increase(as_i64(e.requested_bytes));
  });
  if (e.oversize) {
    m_stats.oversize_allocations.increase(1);
  }
}

void MemoryStatsObserver::on_free_requested(const BlockEventInfo& e) {
  for_pool(e.pool, [&](int i) {
    m_stats.allocation[i].decrease(1);
    m_stats.allocated_bytes[i].decrease(as_i64(e.size_bytes));
  });
  if (e.oversize) {
    m_stats.oversize_allocations.decrease(1);
  }
}

void MemoryStatsObserver::on_free_completed(const BlockEventInfo& e) {
  for_pool(e.pool, [&](int i) {
    m_stats.active[i].decrease(1);
    m_stats.active_bytes[i].decrease(as_i64(e.size_bytes));
    m_stats.requested_bytes[i].decrease(as_i64(e.requested_bytes));
  });
}

void MemoryStatsObserver::on_segment_alloc(const SegmentEventInfo& e) {
  for_pool(e.pool, [&](int i) {
    m_stats.segment[i].increase(1);
    m_stats.reserved_bytes[i].increase(as_i64(e.size_bytes));
  });
  if (e.oversize) {
    m_stats.oversize_segments.increase(1);
  }
  ++m_stats.num_device_alloc;
}

void MemoryStatsObserver::on_segment_free(const SegmentEventInfo& e) {
  for_pool(e.pool, [&](int i) {
    m_stats.segment[i].decrease(1);
    m_stats.reserved_bytes[i].decrease(as_i64(e.size_bytes));
  });
  if (e.oversize) {
    m_stats.oversize_segments.decrease(1);
  }
  ++m_stats.num_device_free;
}

void MemoryStatsObserver::on_segment_map(const SegmentEventInfo& e) {
  for_pool(e.pool, [&](int i) { m_stats.reserved_bytes[i].increase(as_i64(e.size_bytes)); });
  ++m_stats.num_device_alloc;
}

void MemoryStatsObserver::on_segment_unmap(const SegmentEventInfo& e) {
  for_pool(e.pool, [&](int i) { m_stats.reserved_bytes[i].decrease(as_i64(e.size_bytes)); });
  ++m_stats.num_device_free;
}

void MemoryStatsObserver::on_inactive_split(PoolKind pool, std::int64_t count, std::int64_t bytes) {
  for_pool(pool, [&](int i) {
    m_stats.inactive_split[i].update(count);
    m_stats.inactive_split_bytes[i].update(bytes);
  });
}

void MemoryStatsObserver::seed_from(const BlockPool& pool, std::uint64_t max_split_size_bytes) {
  // The state at trace start counts as allocated once, so that allocated - freed = current holds (spec §7.4);
  // what happened before the trace is unknown.
  auto seed = [](Stat& s, std::int64_t v) {
    s = Stat{};
    s.increase(v);
  };
  std::array<std::int64_t, 3> segs{}, reserved{}, allocs{}, alloc_bytes{}, active{}, active_bytes{},
      requested{}, split{}, split_bytes{};
  std::int64_t oversize_allocs = 0, oversize_segs = 0;
  for (SegmentId sid : pool.live_segments_by_address()) {
    const Segment& seg = pool.segment(sid);
    const int p = seg.pool == PoolKind::kSmall ? kStatSmall : kStatLarge;
    for (BlockId id = seg.first; id != kNoBlock; id = pool.block(id).next) {
      const Block& b = pool.block(id);
      const auto size = as_i64(b.size_bytes);
      for (int i : {kStatAll, p}) {
        if (b.mapped) {
          reserved[i] += size;
        }
        if (b.allocated) {
          allocs[i] += 1;
          alloc_bytes[i] += size;
        }
        if (b.allocated || b.event_count > 0) {
          active[i] += 1;
          active_bytes[i] += size;
          requested[i] += as_i64(b.requested_bytes);
        } else if (!seg.expandable && b.is_split()) {
          split[i] += 1;
          split_bytes[i] += size;
        }
      }
      if (b.allocated && b.size_bytes >= max_split_size_bytes) {
        ++oversize_allocs;
      }
    }
    if (!seg.expandable) {
      segs[kStatAll] += 1;
      segs[p] += 1;
      if (seg.size_bytes >= max_split_size_bytes) {
        ++oversize_segs;
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    seed(m_stats.segment[i], segs[i]);
    seed(m_stats.reserved_bytes[i], reserved[i]);
    seed(m_stats.allocation[i], allocs[i]);
    seed(m_stats.allocated_bytes[i], alloc_bytes[i]);
    seed(m_stats.active[i], active[i]);
    seed(m_stats.active_bytes[i], active_bytes[i]);
    seed(m_stats.requested_bytes[i], requested[i]);
    seed(m_stats.inactive_split[i], split[i]);
    seed(m_stats.inactive_split_bytes[i], split_bytes[i]);
  }
  seed(m_stats.oversize_allocations, oversize_allocs);
  seed(m_stats.oversize_segments, oversize_segs);
}

void MemoryStatsObserver::reset_peak() {
#define VRAMSIM_RESET(name, member) \
  for (Stat & s : m_stats.member) s.reset_peak();
  VRAMSIM_ARRAY_STATS(VRAMSIM_RESET)
#undef VRAMSIM_RESET
  m_stats.oversize_allocations.reset_peak();
  m_stats.oversize_segments.reset_peak();
}

void MemoryStatsObserver::reset_accumulated() {
#define VRAMSIM_RESET(name, member) \
  for (Stat & s : m_stats.member) s.reset_accumulated();
  VRAMSIM_ARRAY_STATS(VRAMSIM_RESET)
#undef VRAMSIM_RESET
  m_stats.oversize_allocations.reset_accumulated();
  m_stats.oversize_segments.reset_accumulated();
#define VRAMSIM_RESET_COUNTER(name) m_stats.name = 0;
  VRAMSIM_COUNTERS(VRAMSIM_RESET_COUNTER)
#undef VRAMSIM_RESET_COUNTER
}

std::map<std::string, std::int64_t> MemoryStatsObserver::flatten() const { return flatten_stats(m_stats); }

std::map<std::string, std::int64_t> flatten_stats(const DeviceStats& stats) {
  std::map<std::string, std::int64_t> out;
  static constexpr const char* kPools[3] = {"all", "small_pool", "large_pool"};
  auto put_stat = [&](const std::string& prefix, const Stat& s) {
    out[prefix + ".current"] = s.current;
    out[prefix + ".peak"] = s.peak;
    out[prefix + ".allocated"] = s.allocated;
    out[prefix + ".freed"] = s.freed;
  };
#define VRAMSIM_FLATTEN(name, member)                              \
  for (int i = 0; i < 3; ++i) {                                    \
    put_stat(std::string(#name ".") + kPools[i], stats.member[i]); \
  }
  VRAMSIM_ARRAY_STATS(VRAMSIM_FLATTEN)
#undef VRAMSIM_FLATTEN
#define VRAMSIM_FLATTEN_SINGLE(name) put_stat(#name, stats.name);
  VRAMSIM_SINGLE_STATS(VRAMSIM_FLATTEN_SINGLE)
#undef VRAMSIM_FLATTEN_SINGLE
#define VRAMSIM_FLATTEN_COUNTER(name) out[#name] = stats.name;
  VRAMSIM_COUNTERS(VRAMSIM_FLATTEN_COUNTER)
#undef VRAMSIM_FLATTEN_COUNTER
  out["max_split_size"] = stats.max_split_size;
  return out;
}

}  // namespace vramsim
