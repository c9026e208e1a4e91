// The small interface every allocator policy implements (one .cpp per policy under policies/, listed in
// registry.cpp). A policy decides; the block bookkeeping it decides over is BlockPool, the device is
// IDeviceMemory, and everything it does is reported to an IAllocObserver.
//
// Contract for every implementation (tests/alloc/test_policy_contract.cpp checks it for all of them):
//   * allocate() either returns a block of at least the requested size, or !ok() after reporting on_oom;
//     a simulated OOM is an outcome, not an error.
//   * live blocks never overlap; bytes are conserved (reserved = allocated + cached);
//   * after every block is freed and empty_cache() runs, nothing stays reserved.
#pragma once

#include <string_view>

#include "sim/alloc/block_pool.h"
#include "sim/core/types.h"

namespace vramsim {

class RequestSequence;  // sim/alloc/request_sequence.h

struct AllocRequest {
  Bytes size_bytes = 0;  // as the caller asked (unrounded); pre: > 0
  StreamId stream = 0;
  TimeNs time_ns = 0;
};

struct AllocResult {
  BlockId block = kNoBlock;
  Bytes addr = 0;
  Bytes block_size_bytes = 0;
  bool ok() const { return block != kNoBlock; }
};

class IAllocatorPolicy {
 public:
  virtual ~IAllocatorPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual AllocResult allocate(const AllocRequest& request) = 0;
  // pre: `block` is live (returned by allocate and not yet freed).
  virtual void free(BlockId block, TimeNs time_ns) = 0;
  // record_stream(block, stream): the block's memory is in use on `stream` too; its free is deferred until
  // complete_stream_events(block) says that stream's work has finished (spec ST2-ST3).
  virtual void record_stream(BlockId block, StreamId stream) = 0;
  virtual void complete_stream_events(BlockId block) = 0;
  // torch.cuda.empty_cache(): return every cached segment the policy can to the device.
  virtual void empty_cache() = 0;
  // The segments and blocks as they stand (for snapshots and invariant checks).
  virtual const BlockPool& blocks() const = 0;
  // Offline policies only (PolicyEntry::needs_plan): the whole run, before its first allocate(). The calls
  // that follow must be that sequence's ops in order (frees of allocations that failed are skipped). Online
  // policies ignore it.
  virtual void plan(const RequestSequence& /*sequence*/) {}
};

}  // namespace vramsim
