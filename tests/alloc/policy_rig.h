// A registered policy on a SimulatedDevice, with the memory_stats() observer and an event recorder: the
// fixture of the per-policy tests (test_policy_<name>.cpp), which go through the registry and the
// IAllocatorPolicy interface only.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string_view>
#include <vector>

#include "caching_fixture.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/registry.h"
#include "sim/report/memory_stats.h"

namespace vramsim::test {

struct PolicyRig {
  explicit PolicyRig(std::string_view name, Bytes capacity_bytes = SimulatedDevice::kUnlimited)
      : device(capacity_bytes) {
    fan.add(&stats);
    fan.add(&rec);
    policy = find_policy(name).make(CachingConfig{}, device, fan);
  }

  AllocResult alloc(Bytes size_bytes, StreamId stream = 0) {
    return policy->allocate(AllocRequest{size_bytes, stream, 0});
  }
  void free(const AllocResult& r) { policy->free(r.block, 0); }

  std::int64_t reserved() const { return stats.stats().reserved_bytes[kStatAll].current; }
  std::int64_t allocated() const { return stats.stats().allocated_bytes[kStatAll].current; }
  std::int64_t requested() const { return stats.stats().requested_bytes[kStatAll].current; }
  std::string invariants() const { return policy->blocks().check_invariants(); }

  // The blocks of the live segment holding `addr`, as the tests draw them.
  std::vector<BlockView> segment_of(Bytes addr) const {
    const BlockPool& pool = policy->blocks();
    for (SegmentId sid : pool.live_segments_by_address()) {
      const Segment& seg = pool.segment(sid);
      if (seg.base <= addr && addr < seg.base + seg.size_bytes) {
        std::vector<BlockView> out;
        for (BlockId id = seg.first; id != kNoBlock; id = pool.block(id).next) {
          const Block& b = pool.block(id);
          BlockView v;
          v.offset = b.addr - seg.base;
          v.size_bytes = b.size_bytes;
          v.allocated = b.allocated;
          v.mapped = b.mapped;
          v.pending = b.event_count > 0;
          v.requested_bytes = b.requested_bytes;
          out.push_back(v);
        }
        return out;
      }
    }
    return {};
  }

  SimulatedDevice device;
  MemoryStatsObserver stats;
  RecordingObserver rec;
  AllocObservers fan;
  std::unique_ptr<IAllocatorPolicy> policy;
};

}  // namespace vramsim::test
