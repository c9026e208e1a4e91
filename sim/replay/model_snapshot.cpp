#include "sim/replay/model_snapshot.h"

namespace vramsim {

std::vector<SnapshotSegment> take_model_snapshot(const BlockPool& pool, int device,
                                                 const std::vector<PrivatePool>& private_pools) {
  std::vector<SnapshotSegment> out;
  for (SegmentId sid : pool.live_segments_by_address()) {
    const Segment& seg = pool.segment(sid);
    SnapshotSegment cur;
    bool open = false;
    auto close = [&] {
      if (open) {
        out.push_back(std::move(cur));
        cur = SnapshotSegment{};
        open = false;
      }
    };
    for (BlockId id = seg.first; id != kNoBlock; id = pool.block(id).next) {
      const Block& b = pool.block(id);
      if (!b.mapped) {
        close();
        continue;
      }
      if (!open) {
        cur.device = device;
        cur.address = b.addr;
        cur.stream = seg.stream;
        cur.is_small_pool = seg.pool == PoolKind::kSmall;
        cur.is_expandable = seg.expandable;
        if (seg.private_pool < private_pools.size()) {
          cur.pool_id_first = private_pools[seg.private_pool].id.first;
          cur.pool_id_second = private_pools[seg.private_pool].id.second;
        }
        open = true;
      }
      SnapshotBlock sb;
      sb.address = b.addr;
      sb.size_bytes = b.size_bytes;
      sb.requested_bytes = b.requested_bytes;
      sb.state = b.allocated         ? BlockState::kActiveAllocated
                 : b.event_count > 0 ? BlockState::kActivePendingFree
                                     : BlockState::kInactive;
      cur.total_size_bytes += b.size_bytes;
      if (sb.state == BlockState::kActiveAllocated) {
        cur.allocated_bytes += b.size_bytes;
      }
      if (sb.state != BlockState::kInactive) {
        cur.active_bytes += b.size_bytes;
        cur.requested_bytes += b.requested_bytes;
      }
      cur.blocks.push_back(sb);
    }
    close();
  }
  return out;
}

}  // namespace vramsim
