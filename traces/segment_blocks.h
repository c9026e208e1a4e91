// The checks every snapshot reader applies to a segment's blocks, in one place: the pickle/JSON reader
// (snapshot_json_reader.cpp) and the .vtrace reader (vtrace_reader.cpp) read the same segment/block fields
// and must refuse the same tilings with the same words. Each reader puts its own position (a JSON path, a
// line number) in front of the problem these return.
#pragma once

#include <string>

#include "sim/core/types.h"
#include "traces/snapshot.h"

namespace vramsim {

// Appends `block` to `segment`, whose blocks so far cover `covered_bytes` from its start, and adds its
// bytes to the segment's active / requested / allocated totals. Refused ("" when fine): an empty block, and a
// block that ends past the segment. pre: block.address == segment.address + covered_bytes (the readers place
// or check the address first). On success `covered_bytes` grows by the block's size.
std::string append_segment_block(SnapshotSegment& segment, const SnapshotBlock& block, Bytes& covered_bytes);

// "" when the blocks cover the whole segment, else the problem.
std::string segment_coverage_problem(const SnapshotSegment& segment, Bytes covered_bytes);

}  // namespace vramsim
