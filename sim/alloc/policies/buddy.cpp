// buddy: a binary buddy allocator (Knowlton 1965; Knuth, TAOCP vol. 1, §2.5) over fixed-size arenas.
//
// Arenas are 1 GiB cudaMalloc segments, one set per stream (as PyTorch keeps segments per stream, so that a
// block is never reused by a stream that did not order itself after its free). A request is rounded up to a
// power of two, at least 512 bytes (order k). It takes the smallest free buddy node of order >= k (lowest
// address among equals), halving it down to order k and keeping the lower half, as the textbook algorithm
// does. A freed block merges with its buddy while the buddy is wholly free. A request larger than an arena
// gets an arena of its own power-of-two size. No node fits: a new arena; the device refuses: release the
// wholly free arenas and retry once; then OOM. empty_cache releases the wholly free arenas.
//
// Note [Buddy nodes as free runs]: BlockPool keeps free space as maximal runs (its M3 invariant), not as
// buddy nodes. Nothing is lost: with eager merging, the free buddy nodes are exactly the maximal aligned
// power-of-two pieces of the free runs (a node whose parent is also free would have merged with its buddy;
// a maximal piece's parent reaches outside the run, so into an allocated block). So the policy finds the free
// nodes by decomposing runs on the fly, and a buddy merge is the ordinary neighbour merge. Splitting a node
// down to order k and keeping the lower half leaves exactly the canonical decomposition of the rest.
//
// Complexity (r = free runs of the stream, A = arena bytes): allocate O(r log A), free O(log r).
#include <bit>
#include <memory>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/size_classes.h"

namespace vramsim {

namespace {

constexpr Bytes kArenaBytes = 1 * kGiB;
constexpr Bytes kMinBlockBytes = 512;
constexpr PoolKind kPool = PoolKind::kLarge;

struct Node {
  Bytes addr = 0;
  Bytes size_bytes = 0;
  BlockId run = kNoBlock;  // the free run holding it
};

class BuddyPolicy final : public DeferredFreePolicy {
 public:
  BuddyPolicy(IDeviceMemory& device, IAllocObserver& events) : DeferredFreePolicy(device, events) {}

  std::string_view name() const override { return "buddy"; }

  AllocResult allocate(const AllocRequest& request) override {
    SIM_ASSERT(request.size_bytes > 0);
    if (request.size_bytes > kAllocationCeiling / 2) {
      return oom(request, request.size_bytes);
    }
    const Bytes size = std::max(kMinBlockBytes, std::bit_ceil(request.size_bytes));
    Node node = find_node(request.stream, size);
    if (node.run == kNoBlock) {
      node = new_arena(size, request);
    }
    if (node.run == kNoBlock) {
      m_events.on_alloc_retry();
      release_free_arenas();
      node = new_arena(size, request);
    }
    if (node.run == kNoBlock) {
      return oom(request, size);
    }
    return take(node, size, request);
  }

  void empty_cache() override { release_free_arenas(); }

  void release_block(BlockId block, TimeNs time_ns, bool /*after_sync*/) override {
    free_block(block, time_ns);
  }

 private:
  // The smallest free buddy node of at least `size` bytes in the stream's arenas (Note [Buddy nodes as free
  // runs]); run == kNoBlock when there is none.
  Node find_node(StreamId stream, Bytes size) {
    Node best;
    auto& free_set = m_pool.free_set(kPool);
    for (auto it = m_pool.lower_bound_free(kPool, stream, size); it != free_set.end() && it->stream == stream;
         ++it) {
      const Segment& seg = m_pool.segment(it->segment);
      Bytes pos = it->addr - seg.base;
      const Bytes end = pos + it->size_bytes;
      while (pos < end) {
        // The largest aligned power of two that starts at `pos` and stays inside the run.
        Bytes piece = pos == 0 ? seg.size_bytes : (pos & (~pos + 1));
        while (piece > end - pos) {
          piece >>= 1;
        }
        if (piece >= size && (best.run == kNoBlock || piece < best.size_bytes ||
                              (piece == best.size_bytes && seg.base + pos < best.addr))) {
          best = Node{seg.base + pos, piece, it->id};
        }
        pos += piece;
      }
    }
    return best;
  }

  // A new arena (kArenaBytes, or the request's own power of two when larger) as one free node.
  Node new_arena(Bytes size, const AllocRequest& request) {
    const Bytes bytes = std::max(kArenaBytes, size);
    const std::optional<Bytes> base = m_device.malloc(bytes, kPool, request.stream);
    if (!base) {
      return {};
    }
    const SegmentId sid = m_pool.add_segment(*base, bytes, kPool, request.stream, false, 0);
    m_events.on_segment_alloc(segment_event(*base, bytes, kPool, request.stream, request.time_ns));
    const BlockId run = m_pool.segment(sid).first;
    m_pool.insert_free(run);
    return Node{*base, bytes, run};
  }

  // Halves `node` down to `size` bytes and hands out its lowest block; the halves not taken stay free.
  AllocResult take(const Node& node, Bytes size, const AllocRequest& request) {
    BlockId run = node.run;
    m_pool.erase_free(run);
    if (node.addr > m_pool.block(run).addr) {
      m_pool.insert_free(m_pool.split_front(run, node.addr - m_pool.block(run).addr));
    }
    return hand_out(trim_front(run, size), request);
  }

  void free_block(BlockId block, TimeNs time_ns) {
    const BlockEventInfo freed = block_event(m_pool.block(block), time_ns);
    for (BlockId n : {m_pool.block(block).prev, m_pool.block(block).next}) {
      if (n != kNoBlock && m_pool.in_free_set(n)) {
        m_pool.erase_free(n);
        m_pool.merge(block, n);
      }
    }
    m_pool.insert_free(block);
    m_events.on_free_completed(freed);
  }

  void release_free_arenas() {
    release_deferred_frees();
    m_events.on_sync_all_streams();
    std::vector<BlockId> whole;
    for (const Block& b : m_pool.free_set(kPool)) {
      if (!b.is_split()) {
        whole.push_back(b.id);
      }
    }
    for (BlockId id : whole) {
      const Block& b = m_pool.block(id);
      const Bytes addr = b.addr;
      const Bytes bytes = b.size_bytes;
      m_events.on_segment_free(segment_event(addr, bytes, kPool, b.stream, 0));
      m_pool.erase_free(id);
      m_pool.remove_segment(b.segment);
      m_device.free(addr, bytes);
    }
  }

  AllocResult oom(const AllocRequest& request, Bytes size) {
    m_events.on_oom(OomInfo{size, std::max(kArenaBytes, size), m_device.free_bytes(), 0, request.stream,
                            request.time_ns});
    return {};
  }
};

}  // namespace

std::unique_ptr<IAllocatorPolicy> make_buddy_policy(IDeviceMemory& device, IAllocObserver& events) {
  return std::make_unique<BuddyPolicy>(device, events);
}

}  // namespace vramsim
