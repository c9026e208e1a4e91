// A whole run's allocator requests, known in advance: the input of offline (planning) policies and of the
// "peak live bytes" floor that no allocator can go below.
//
// An op is either the allocation of a tensor (its ordinal among the allocations is its id) or the free of an
// earlier allocation, by that id. Sizes are requested (unrounded) bytes. Allocations never freed live until
// the end of the sequence.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

struct RequestOp {
  enum class Kind : unsigned char { kAlloc, kFree };
  Kind kind = Kind::kAlloc;
  std::size_t alloc_id = 0;  // kAlloc: this allocation's ordinal; kFree: the allocation it frees
  Bytes size_bytes = 0;      // kAlloc only: requested bytes, > 0
  StreamId stream = 0;       // kAlloc only
  TimeNs time_ns = 0;        // when the program makes the request (0: untimed); told to observers only
  // kFree only: 0 when the block can be reused at once; otherwise the op index before which the work that
  // other streams do with it is done (record_stream): until then the caching allocator keeps the block
  // (spec ST2-ST3), counted as active but not allocated.
  std::size_t streams_done_before = 0;
};

class RequestSequence {
 public:
  // Appends an allocation; returns its id (0, 1, 2, ... in order).
  std::size_t add_alloc(Bytes size_bytes, StreamId stream, TimeNs time_ns = 0);
  // Appends the free of allocation `alloc_id`. Throws InputError when that id was never allocated or is
  // already freed.
  void add_free(std::size_t alloc_id, TimeNs time_ns = 0);
  // Allocation `alloc_id`'s free (already added) waits for other streams until op `op_index` (> the free's
  // index, <= ops().size()).
  void set_streams_done_before(std::size_t alloc_id, std::size_t op_index);

  const std::vector<RequestOp>& ops() const { return m_ops; }
  std::size_t alloc_count() const { return m_alloc_op.size(); }
  // Index into ops() of allocation `alloc_id`'s alloc op, and of its free op (ops().size() when never freed).
  std::size_t alloc_op_index(std::size_t alloc_id) const { return m_alloc_op[alloc_id]; }
  std::size_t free_op_index(std::size_t alloc_id) const;
  const RequestOp& alloc_op(std::size_t alloc_id) const { return m_ops[m_alloc_op[alloc_id]]; }

 private:
  static constexpr std::size_t kNeverFreed = static_cast<std::size_t>(-1);
  std::vector<RequestOp> m_ops;
  std::vector<std::size_t> m_alloc_op;
  std::vector<std::size_t> m_free_op;
};

// The floor every allocator is measured against: the maximum, over the sequence, of the sum of requested
// bytes of the allocations live at that point (an allocation counts from its alloc op up to, not including,
// its free op).
Bytes peak_live_bytes(const RequestSequence& sequence);

}  // namespace vramsim
