#include "sim/alloc/request_sequence.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/checked.h"
#include "sim/core/error.h"

namespace vramsim {

std::size_t RequestSequence::add_alloc(Bytes size_bytes, StreamId stream, TimeNs time_ns) {
  if (size_bytes == 0) {
    throw InputError(fmt::format("request sequence: op {}: allocation of 0 bytes", m_ops.size()));
  }
  const std::size_t id = m_alloc_op.size();
  m_alloc_op.push_back(m_ops.size());
  m_free_op.push_back(kNeverFreed);
  m_ops.push_back(RequestOp{RequestOp::Kind::kAlloc, id, size_bytes, stream, time_ns});
  return id;
}

void RequestSequence::add_free(std::size_t alloc_id, TimeNs time_ns) {
  if (alloc_id >= m_alloc_op.size()) {
    throw InputError(fmt::format("request sequence: op {}: free of allocation {}, which was never allocated",
                                 m_ops.size(), alloc_id));
  }
  if (m_free_op[alloc_id] != kNeverFreed) {
    throw InputError(fmt::format("request sequence: op {}: allocation {} is already freed (op {})",
                                 m_ops.size(), alloc_id, m_free_op[alloc_id]));
  }
  m_free_op[alloc_id] = m_ops.size();
  m_ops.push_back(RequestOp{RequestOp::Kind::kFree, alloc_id, 0, 0, time_ns});
}

void RequestSequence::set_streams_done_before(std::size_t alloc_id, std::size_t op_index) {
  SIM_ASSERT(alloc_id < m_free_op.size() && m_free_op[alloc_id] != kNeverFreed);
  SIM_ASSERT(op_index > m_free_op[alloc_id] && op_index <= m_ops.size());
  m_ops[m_free_op[alloc_id]].streams_done_before = op_index;
}

std::size_t RequestSequence::free_op_index(std::size_t alloc_id) const {
  return m_free_op[alloc_id] == kNeverFreed ? m_ops.size() : m_free_op[alloc_id];
}

Bytes peak_live_bytes(const RequestSequence& sequence) {
  Bytes live = 0;
  Bytes peak = 0;
  for (const RequestOp& op : sequence.ops()) {
    if (op.kind == RequestOp::Kind::kAlloc) {
      const std::optional<Bytes> sum = checked_add(live, op.size_bytes);
      if (!sum) {
        throw InputError(
            "request sequence: the live bytes exceed 2^64: lower --batch, --seq or the model's size");
      }
      live = *sum;
      peak = std::max(peak, live);
    } else {
      live -= sequence.alloc_op(op.alloc_id).size_bytes;
    }
  }
  return peak;
}

}  // namespace vramsim
