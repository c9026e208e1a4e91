// vmm-stitch: GMLake's virtual memory stitching (Guo et al., "GMLake: Efficient and Transparent GPU Memory
// Defragmentation for Large-scale DNN Training with Virtual Memory Stitching", ASPLOS 2024; code:
// github.com/intelligent-machine-learning/glake, GMLake/).
//
// Physical memory comes in primitive blocks (pBlocks): cuMemCreate'd chunks, multiples of the 2 MiB granule,
// each mapped into a virtual range of its own. A request that no single free pBlock range can serve is served
// by a stitched block (sBlock): a fresh virtual range (cuMemAddressReserve) onto which the physical chunks of
// several free, non-adjacent pBlock ranges are mapped back to back, so scattered free memory serves one
// contiguous tensor without new physical memory.
//
// allocate(n, s), n rounded up to 512 bytes:
//   small (<= 1 MiB): PyTorch's small pool, unchanged in GMLake: best fit among the stream's free small
//       blocks, else a new 2 MiB cudaMalloc segment; remainders >= 512 bytes split off; neighbours coalesce.
//   large: n rounded up to 2 MiB; only stream s's free pBlock ranges (GMLake's allocation states):
//       S1/S2  best fit: the smallest free range >= n, its front split off when larger;
//       S3     stitch: free ranges, largest first, until they cover n (the last one split) -> one sBlock;
//       S4     too little free: a new pBlock of (n - all free bytes), stitched with every free range;
//       S5     nothing free: a new pBlock of n. New pBlocks are reported as segment_alloc.
//   A refused cudaMalloc / cuMemCreate: release every wholly free segment, retry once, then OOM.
// free(sBlock): its pieces return to their pBlocks (coalescing there) and the stitched virtual range is
// released. empty_cache(): every wholly free segment (pBlock or small) goes back to the device.
//
// Simplifications, stated: GMLake stitches only requests >= fragment_limit (default 512 MiB, its tutorial)
// and caches freed sBlocks for reuse (reuseLimit); we stitch every large request (its most aggressive
// setting) and unmap a freed sBlock at once: caching stitched ranges saves driver calls, not memory. Large
// blocks are whole 2 MiB chunks (GMLake's granularitySize, one cuMemCreate per chunk): GMLake can still split
// inside a chunk as PyTorch does, but only whole chunks can be stitched, so we keep every large block
// chunk-aligned (up to 2 MiB - 512 B of rounding per large tensor). Mapping an existing physical chunk into
// the stitched range costs no memory, so the sBlock's range is a reserve() only and its block is unmapped in
// BlockPool's books; the physical bytes are counted once, in the pBlock pieces it uses (marked allocated, so
// allocated bytes stay right).
//
// Complexity (n = free blocks in the pool, k = pieces stitched): allocate O(log n) best fit, O(n + k log n)
// stitching; free O(k log n).
#include <algorithm>
#include <memory>
#include <unordered_map>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/size_classes.h"

namespace vramsim {

namespace {

constexpr Bytes kGranuleBytes = 2 * kMiB;  // cuMemGetAllocationGranularity on current NVIDIA GPUs
constexpr Bytes kAlignBytes = 512;

class VmmStitchPolicy final : public DeferredFreePolicy {
 public:
  VmmStitchPolicy(IDeviceMemory& device, IAllocObserver& events) : DeferredFreePolicy(device, events) {}

  std::string_view name() const override { return "vmm-stitch"; }

  AllocResult allocate(const AllocRequest& request) override {
    SIM_ASSERT(request.size_bytes > 0);
    if (request.size_bytes >= kAllocationCeiling) {
      return oom(request, request.size_bytes);
    }
    const Bytes rounded = round_up_bytes(request.size_bytes, kAlignBytes);
    const bool small = rounded <= kSmallSize;
    const Bytes size = small ? rounded : round_up_bytes(rounded, kGranuleBytes);
    for (int attempt = 0; attempt < 2; ++attempt) {
      const AllocResult r = small ? allocate_small(size, request) : allocate_large(size, request);
      if (r.ok()) {
        return r;
      }
      if (attempt == 0) {
        m_events.on_alloc_retry();
        release_cached_blocks();
      }
    }
    return oom(request, size);
  }

  void empty_cache() override { release_cached_blocks(); }

  void release_block(BlockId block, TimeNs time_ns, bool /*after_sync*/) override {
    complete_free(block, time_ns);
  }

 private:
  // ---- small pool
  // ------------------------------------------------------------------------------------------

  AllocResult allocate_small(Bytes size, const AllocRequest& request) {
    auto it = m_pool.lower_bound_free(PoolKind::kSmall, request.stream, size);
    BlockId block = kNoBlock;
    if (it != m_pool.free_set(PoolKind::kSmall).end() && it->stream == request.stream) {
      block = it->id;
      m_pool.erase_free(block);
    } else {
      const std::optional<Bytes> base = m_device.malloc(kSmallBuffer, PoolKind::kSmall, request.stream);
      if (!base) {
        return {};
      }
      const SegmentId sid =
          m_pool.add_segment(*base, kSmallBuffer, PoolKind::kSmall, request.stream, false, 0);
      m_events.on_segment_alloc(
          segment_event(*base, kSmallBuffer, PoolKind::kSmall, request.stream, request.time_ns));
      block = m_pool.segment(sid).first;
    }
    block = trim_front(block, size);
    return hand_out(block, request);
  }

  // ---- large pool: pBlocks and stitching
  // -------------------------------------------------------------------

  AllocResult allocate_large(Bytes size, const AllocRequest& request) {
    auto& free_set = m_pool.free_set(PoolKind::kLarge);
    auto it = m_pool.lower_bound_free(PoolKind::kLarge, request.stream, size);
    if (it != free_set.end() && it->stream == request.stream) {  // S1 / S2
      const BlockId block = it->id;
      m_pool.erase_free(block);
      return hand_out(trim_front(block, size), request);
    }
    // The stream's free ranges, largest first (ties: lowest address).
    std::vector<BlockId> ranges;
    Bytes free_bytes = 0;
    for (auto r = m_pool.lower_bound_free(PoolKind::kLarge, request.stream, 0);
         r != free_set.end() && r->stream == request.stream; ++r) {
      ranges.push_back(r->id);
      free_bytes += r->size_bytes;
    }
    std::stable_sort(ranges.begin(), ranges.end(), [this](BlockId a, BlockId b) {
      return m_pool.block(a).size_bytes > m_pool.block(b).size_bytes;
    });
    std::vector<BlockId> pieces;
    if (free_bytes <
        size) {  // S4 / S5: physical memory for the shortfall first, so a refusal changes nothing
      const BlockId fresh = new_pblock(size - free_bytes, request);
      if (fresh == kNoBlock) {
        return {};
      }
      if (ranges.empty()) {
        return hand_out(fresh, request);  // S5
      }
      pieces.push_back(fresh);
    }
    Bytes covered = pieces.empty() ? 0 : m_pool.block(pieces[0]).size_bytes;
    for (BlockId r : ranges) {  // S3 (and the free part of S4)
      if (covered == size) {
        break;
      }
      m_pool.erase_free(r);
      pieces.push_back(trim_front(r, std::min(m_pool.block(r).size_bytes, size - covered)));
      covered += m_pool.block(pieces.back()).size_bytes;
    }
    SIM_ASSERT(covered == size);
    return stitch(pieces, size, request);
  }

  BlockId new_pblock(Bytes size, const AllocRequest& request) {
    const Bytes base = m_device.reserve(size, PoolKind::kLarge, request.stream);
    if (!m_device.map(base, size)) {
      m_device.release_reservation(base, size);
      return kNoBlock;
    }
    const SegmentId sid = m_pool.add_segment(base, size, PoolKind::kLarge, request.stream, false, 0);
    m_events.on_segment_alloc(segment_event(base, size, PoolKind::kLarge, request.stream, request.time_ns));
    return m_pool.segment(sid).first;
  }

  // A new virtual range onto which `pieces` (pBlock ranges, in no set) are mapped in order.
  AllocResult stitch(const std::vector<BlockId>& pieces, Bytes size, const AllocRequest& request) {
    const Bytes base = m_device.reserve(size, PoolKind::kLarge, request.stream);
    const SegmentId sid =
        m_pool.add_segment(base, size, PoolKind::kLarge, request.stream, true, kGranuleBytes);
    const BlockId sblock = m_pool.segment(sid).first;
    for (BlockId p : pieces) {
      Block& piece = m_pool.block(p);
      piece.allocated = true;  // held by the sBlock; not a tensor of its own, so no alloc event
      piece.stream = request.stream;
      piece.requested_bytes = 0;
    }
    m_stitched.emplace(sblock, pieces);
    return hand_out(sblock, request);
  }

  // ---- shared
  // ----------------------------------------------------------------------------------------------

  // Splits `block` (in no set) so that its front is `size` bytes; the rest goes back to the free set.
  void complete_free(BlockId block, TimeNs time_ns) {
    const BlockEventInfo freed = block_event(m_pool.block(block), time_ns);
    auto stitched = m_stitched.find(block);
    if (stitched == m_stitched.end()) {
      free_range(block);
    } else {
      for (BlockId p : stitched->second) {
        m_pool.block(p).allocated = false;
        free_range(p);
      }
      m_stitched.erase(stitched);
      const Segment& seg = m_pool.segment(m_pool.block(block).segment);
      const Bytes base = seg.base;
      const Bytes size = seg.size_bytes;
      m_pool.remove_segment(m_pool.block(block).segment);
      m_device.release_reservation(base, size);  // unmap the stitched view; the physical chunks stay
    }
    m_events.on_free_completed(freed);
  }

  void free_range(BlockId block) {
    for (BlockId n : {m_pool.block(block).prev, m_pool.block(block).next}) {
      if (n != kNoBlock && m_pool.in_free_set(n)) {
        m_pool.erase_free(n);
        m_pool.merge(block, n);
      }
    }
    m_pool.insert_free(block);
  }

  // Every wholly free segment back to the device (after a synchronisation, as empty_cache does).
  void release_cached_blocks() {
    release_deferred_frees();
    m_events.on_sync_all_streams();
    for (PoolKind pool : {PoolKind::kLarge, PoolKind::kSmall}) {
      std::vector<BlockId> whole;
      for (const Block& b : m_pool.free_set(pool)) {
        if (!b.is_split()) {
          whole.push_back(b.id);
        }
      }
      for (BlockId id : whole) {
        const Block& b = m_pool.block(id);
        const Bytes addr = b.addr;
        const Bytes size = b.size_bytes;
        const StreamId stream = b.stream;
        m_events.on_segment_free(segment_event(addr, size, pool, stream, 0));
        m_pool.erase_free(id);
        m_pool.remove_segment(b.segment);
        if (pool == PoolKind::kSmall) {
          m_device.free(addr, size);
        } else {
          m_device.unmap(addr, size);
          m_device.release_reservation(addr, size);
        }
      }
    }
  }

  AllocResult oom(const AllocRequest& request, Bytes size) {
    m_events.on_oom(OomInfo{size, size, m_device.free_bytes(), 0, request.stream, request.time_ns});
    return {};
  }

  std::unordered_map<BlockId, std::vector<BlockId>> m_stitched;  // sBlock -> its pBlock pieces, in order
};

}  // namespace

std::unique_ptr<IAllocatorPolicy> make_vmm_stitch_policy(IDeviceMemory& device, IAllocObserver& events) {
  return std::make_unique<VmmStitchPolicy>(device, events);
}

}  // namespace vramsim
