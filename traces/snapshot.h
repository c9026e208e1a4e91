// The in-memory form of a PyTorch memory snapshot (spec §8.2-§8.5), whatever file it came from:
// a `_dump_snapshot` pickle, its JSON form, or the project's own trace format (.vtrace).
//
// A Snapshot holds, per device, the allocator state at the END of recording (segments and blocks) and the
// trace of events that led there. Generated traces (the step simulator) have no final state and start from an
// empty allocator: `has_final_state` is false for them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/types.h"
#include "traces/trace_event.h"

namespace vramsim {

enum class BlockState : std::uint8_t { kActiveAllocated, kActivePendingFree, kInactive };

struct SnapshotBlock {
  Bytes address = 0;          // segment address + sizes of earlier blocks
  Bytes size_bytes = 0;       // block size (rounded / unsplit)
  Bytes requested_bytes = 0;  // orig of the last hand-out (stale for inactive blocks)
  BlockState state = BlockState::kInactive;

  bool operator==(const SnapshotBlock&) const = default;
};

struct SnapshotSegment {
  int device = 0;
  Bytes address = 0;
  Bytes total_size_bytes = 0;
  Bytes allocated_bytes = 0;  // as recorded (allocated_size); readers check it against the blocks
  Bytes active_bytes = 0;
  Bytes requested_bytes = 0;
  StreamId stream = 0;
  bool is_small_pool = false;  // segment_type == "small"
  bool is_expandable = false;
  std::int64_t pool_id_first = 0;  // segment_pool_id; (0, 0) = default pools
  std::int64_t pool_id_second = 0;
  std::vector<SnapshotBlock> blocks;  // address order, tiling the segment exactly

  bool operator==(const SnapshotSegment&) const = default;
};

// allocator_settings as recorded (spec §8.2). Absent in files older than about PyTorch 2.3.
struct RecordedAllocatorSettings {
  std::string alloc_conf;            // PYTORCH_CUDA_ALLOC_CONF, "" when unset
  std::int64_t max_split_size = -1;  // bytes; -1 = unlimited
  double garbage_collection_threshold = 0.0;
  bool expandable_segments = false;
  std::array<std::uint64_t, 16> roundup_power2_divisions{};  // index i = interval [2^i MiB, 2^(i+1) MiB)

  bool operator==(const RecordedAllocatorSettings&) const = default;
};

struct DeviceTrace {
  std::vector<TraceEvent> events;  // oldest first
  bool operator==(const DeviceTrace&) const = default;
};

struct Snapshot {
  std::string source;  // file name, for messages
  bool has_final_state = true;
  std::vector<SnapshotSegment> segments;   // all devices, each device's sorted by address
  std::vector<DeviceTrace> device_traces;  // index = device
  std::optional<RecordedAllocatorSettings> allocator_settings;
  std::vector<std::string> strings{""};  // tag string table for TraceEvent::op_tag/category_tag/phase_tag

  bool operator==(const Snapshot&) const = default;
};

}  // namespace vramsim
