// The in-memory form of a PyTorch memory snapshot (spec §8.2-§8.5), whatever file it came from:
// a `_dump_snapshot` pickle, its JSON form, or the project's own trace format (.vtrace).
//
// A Snapshot holds, per device, the allocator state at the END of recording (segments and blocks) and the
// trace of events that led there. Generated traces (the step simulator) have no final state and start from an
// empty allocator: `has_final_state` is false for them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
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

// An "annotate" trace entry: torch.cuda.memory._annotate_memory(data_ptr, metadata) / _annotate_tensor
// (pytorch/pytorch#190575, TraceEntry::ANNOTATE): text attached to a live allocation after the fact. It moves
// no memory, so it is kept beside the events rather than among them (a replay never sees it).
struct TraceAnnotation {
  std::size_t before_event = 0;  // recorded just before events[before_event]; events.size() = after the last
  Bytes addr = 0;                // the live allocation's base address
  Bytes size_bytes = 0;          // as recorded (0 when the entry has none)
  StreamId stream = 0;
  TimeNs time_ns = 0;
  std::uint32_t metadata_tag = kNoTag;  // index into Snapshot::strings: the entry's user_metadata
  std::uint32_t context_tag = kNoTag;   // index into Snapshot::strings: its compile_context

  bool operator==(const TraceAnnotation&) const = default;
};

// The text PyTorch stamps on a trace entry as it records it: `user_metadata`
// (torch.cuda.memory._set_memory_metadata, pytorch/pytorch#165490; thread-local, on every entry recorded
// while set) and `compile_context` (_record_memory_history(compile_context=True): the torch.compile frame
// being compiled, "N/A" outside one). Sparse: one note per event that has either, so files without them cost
// nothing.
struct EventNote {
  std::size_t event = 0;                // index into DeviceTrace::events, increasing
  std::uint32_t metadata_tag = kNoTag;  // index into Snapshot::strings
  std::uint32_t context_tag = kNoTag;   // index into Snapshot::strings

  bool operator==(const EventNote&) const = default;
};

struct DeviceTrace {
  std::vector<TraceEvent> events;            // oldest first
  std::vector<TraceAnnotation> annotations;  // in recorded order (before_event non-decreasing)
  std::vector<EventNote> notes;              // event indices increasing
  bool operator==(const DeviceTrace&) const = default;
};

// One entry of the snapshot's top-level "external_annotations" list (PyTorch 2.5+, pytorch/pytorch#130964:
// AnnotationEntry in NativeCachingAllocator::annotation_buffer): a record_function range boundary recorded
// while _record_memory_history is on, e.g. {stage: "START", name: "## forward ##", device: 0, time_us: ...}
// (torch.compile's dynamo_timed regions land here too). `metadata` holds every key but device and time_us;
// a dict's key order is not data, so they are kept sorted.
struct ExternalAnnotation {
  int device = 0;
  TimeNs time_ns = 0;
  std::map<std::string, std::string> metadata;

  bool operator==(const ExternalAnnotation&) const = default;
};

struct Snapshot {
  std::string source;  // file name, for messages
  bool has_final_state = true;
  std::vector<SnapshotSegment> segments;   // all devices, each device's sorted by address
  std::vector<DeviceTrace> device_traces;  // index = device
  std::optional<RecordedAllocatorSettings> allocator_settings;
  std::vector<std::string> strings{""};  // tag string table: TraceEvent's op/category/phase tags, notes
  std::vector<ExternalAnnotation> external_annotations;  // in recorded order

  bool operator==(const Snapshot&) const = default;
};

}  // namespace vramsim
