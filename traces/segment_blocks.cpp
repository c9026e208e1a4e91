#include "traces/segment_blocks.h"

#include <fmt/format.h>

namespace vramsim {

std::string append_segment_block(SnapshotSegment& segment, const SnapshotBlock& block, Bytes& covered_bytes) {
  if (block.size_bytes == 0) {
    return "a block cannot be empty";
  }
  if (block.size_bytes > segment.total_size_bytes - covered_bytes) {
    return fmt::format("block {:#x} + {} extends past the end of its segment ({:#x})", block.address,
                       block.size_bytes, segment.address + segment.total_size_bytes);
  }
  covered_bytes += block.size_bytes;
  if (block.state != BlockState::kInactive) {
    segment.active_bytes += block.size_bytes;
    segment.requested_bytes += block.requested_bytes;
    if (block.state == BlockState::kActiveAllocated) {
      segment.allocated_bytes += block.size_bytes;
    }
  }
  segment.blocks.push_back(block);
  return {};
}

std::string segment_coverage_problem(const SnapshotSegment& segment, Bytes covered_bytes) {
  if (covered_bytes == segment.total_size_bytes) {
    return {};
  }
  return fmt::format("the blocks of segment {:#x} cover {} of its {} bytes", segment.address, covered_bytes,
                     segment.total_size_bytes);
}

}  // namespace vramsim
