// One entry of an allocator trace: the project's in-memory form of PyTorch's TraceEntry
// (spec §8.5), also used for traces the step simulator generates.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sim/core/types.h"

namespace vramsim {

enum class TraceAction : std::uint8_t {
  kAlloc,          // a block was handed out; addr = block start, size = requested (unrounded) bytes
  kFreeRequested,  // the caller freed it; size = requested bytes of that block
  kFreeCompleted,  // the block returned to the free set (later than kFreeRequested after record_stream)
  kSegmentAlloc,   // cudaMalloc succeeded; addr/size = the segment
  kSegmentFree,    // just before cudaFree; addr/size = the segment
  kSegmentMap,     // expandable segment pages mapped; addr = first mapped byte, size = bytes
  kSegmentUnmap,   // expandable segment pages unmapped
  kOom,            // OutOfMemoryError raised; size = rounded request, addr = device_free bytes
  kSnapshot,       // a snapshot was taken; size = active bytes
  // vramsim's own events (not in PyTorch's trace; .vtrace and vramsim-written dicts). For every one of them
  // addr = the pool id's first number and size = its second (MempoolId_t; (0, 0) = the default pools).
  kPoolCreate,    // torch.cuda.MemPool() / graph_pool_handle() held: createOrIncrefPool
  kPoolUseOnOom,  // MemPool(use_on_oom=...): setUseOnOOM; stream = 1 (on) or 0 (off)
  kCaptureBegin,  // torch.cuda.graph / CUDAGraph.capture_begin: beginAllocateToPool for the capturing stream
  kPoolBegin,     // torch.cuda.use_mem_pool entered: beginAllocateToPool for every stream (the thread's)
  kPoolEnd,       // capture_end / use_mem_pool's exit: endAllocateToPool
  kPoolRelease,   // CUDAGraph.reset, MemPool's destructor, use_mem_pool's exit: releasePool
  kEmptyCache,    // torch.cuda.empty_cache() (pool (0, 0)) or emptyCache(pool); its segment_free /
                  // segment_unmap entries follow it
};

// The allocator's answers to the device: segment_alloc / _free / _map / _unmap.
constexpr bool is_segment_event(TraceAction a) {
  return a == TraceAction::kSegmentAlloc || a == TraceAction::kSegmentFree || a == TraceAction::kSegmentMap ||
         a == TraceAction::kSegmentUnmap;
}
// Segment events that give memory back: segment_free / segment_unmap.
constexpr bool is_segment_release(TraceAction a) {
  return a == TraceAction::kSegmentFree || a == TraceAction::kSegmentUnmap;
}

// vramsim's pool and empty_cache events (kPoolCreate ... kEmptyCache).
constexpr bool is_pool_event(TraceAction a) {
  return a >= TraceAction::kPoolCreate && a <= TraceAction::kEmptyCache;
}

// PyTorch's action names ("alloc", "free_requested", ...). Returns nullopt for anything else.
std::optional<TraceAction> parse_trace_action(std::string_view name);
std::string_view trace_action_name(TraceAction action);

inline constexpr std::uint32_t kNoTag = 0;    // index 0 of a string table is always ""
inline constexpr std::int32_t kNoLayer = -1;  // TraceEvent::layer of an event outside the layers

struct TraceEvent {
  TraceAction action = TraceAction::kAlloc;
  Bytes addr = 0;        // for kOom: device_free in bytes
  Bytes size_bytes = 0;  // see TraceAction
  StreamId stream = 0;
  TimeNs time_ns = 0;                   // recorded time_us * 1000, or simulated time; 0 when unknown
  std::uint32_t op_tag = kNoTag;        // index into Snapshot::strings: op name (generated traces)
  std::uint32_t category_tag = kNoTag;  // index into Snapshot::strings: tensor category
  std::uint32_t phase_tag = kNoTag;     // index into Snapshot::strings: training phase ("forward", ...)
  std::int32_t layer = kNoLayer;        // decoder layer index of the op (generated traces)

  bool operator==(const TraceEvent&) const = default;
};

}  // namespace vramsim
