#include "sim/replay/adopt_initial_state.h"

#include <map>
#include <utility>

#include <fmt/format.h>

#include "sim/alloc/size_classes.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

void note_adopted(const InitialSegment& seg, const std::vector<BlockId>& ids, std::size_t first,
                  AdoptedState& out) {
  for (std::size_t i = 0; i < seg.blocks.size(); ++i) {
    const InitialBlock& b = seg.blocks[i];
    if (b.allocated) {
      out.live[b.addr] = ids[first + i];
      out.requested_bytes += static_cast<std::int64_t>(b.requested_bytes);
      if (b.pending_free) {
        out.pending_at_start.push_back(b.addr);
      }
    }
  }
}

std::vector<AdoptedBlock> adopted_blocks(const InitialSegment& seg) {
  std::vector<AdoptedBlock> out;
  for (const InitialBlock& b : seg.blocks) {
    out.push_back(AdoptedBlock{b.size_bytes, b.requested_bytes, b.allocated});
  }
  return out;
}

// Installs one expandable reservation holding `runs` (same pool and stream, address order). A snapshot does
// not say where a reservation begins: it is taken to begin at its lowest run and to span page x ceil(1.125 x
// device total / page) bytes (spec E1), cut short before the next segment of another pool or stream.
void adopt_reservation(PyTorchCachingPolicy& policy, const InitialState& initial,
                       const std::vector<const InitialSegment*>& runs, Bytes device_total,
                       const std::string& source, AdoptedState& out) {
  const InitialSegment& first = *runs.front();
  const Bytes page = first.pool == PoolKind::kSmall ? kSmallBuffer : kLargeBuffer;
  const Bytes want = device_total + device_total / 8;
  Bytes end = first.base + (want + page - 1) / page * page;
  for (const InitialSegment& other : initial.segments) {
    const bool same = other.expandable && other.pool == first.pool && other.stream == first.stream;
    if (!same && other.base > first.base && other.base < end) {
      end = first.base + (other.base - first.base) / page * page;
    }
  }
  std::vector<AdoptedRun> adopted;
  for (const InitialSegment* run : runs) {
    if ((run->base - first.base) % page != 0 || run->size_bytes % page != 0 ||
        run->base + run->size_bytes > end) {
      throw InputError(fmt::format(
          "{}: expandable segment 0x{:x} ({} bytes) is not whole {}-byte pages of one reservation beginning "
          "at 0x{:x} and ending before the next segment",
          source, run->base, run->size_bytes, page, first.base));
    }
    adopted.push_back(AdoptedRun{run->base, adopted_blocks(*run)});
  }
  const std::vector<BlockId> ids =
      policy.adopt_expandable_segment(first.base, end - first.base, first.pool, first.stream, adopted);
  std::size_t next = 0;
  for (const InitialSegment* run : runs) {
    note_adopted(*run, ids, next, out);
    next += run->blocks.size();
  }
}

}  // namespace

AdoptedState adopt_initial_state(PyTorchCachingPolicy& policy, const InitialState& initial,
                                 Bytes device_total, const std::string& source) {
  AdoptedState out;
  std::map<std::pair<PoolKind, StreamId>, std::vector<const InitialSegment*>> reservations;
  for (const InitialSegment& seg : initial.segments) {
    if (seg.expandable) {
      reservations[{seg.pool, seg.stream}].push_back(&seg);
      continue;
    }
    note_adopted(seg, policy.adopt_segment(seg.base, seg.pool, seg.stream, adopted_blocks(seg), seg.pool_id),
                 0, out);
  }
  for (const auto& [key, runs] : reservations) {
    adopt_reservation(policy, initial, runs, device_total, source, out);
  }
  return out;
}

}  // namespace vramsim
