#include "traces/snapshot_invariants.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace vramsim {
namespace {

constexpr Bytes kMinBlockBytes = 512;             // kMinBlockSize
constexpr Bytes kSmallPoolMaxBytes = kMiB;        // kSmallSize: large-pool remainders are above this
constexpr Bytes kSmallSegmentBytes = 2 * kMiB;    // kSmallBuffer
constexpr Bytes kSegmentGranuleBytes = 2 * kMiB;  // kRoundLarge, also the small expandable page

class Violations {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    ++total_;
    if (list_.size() < kMaxReportedViolations) {
      list_.push_back(fmt::format(format, std::forward<Args>(args)...));
    }
  }
  std::vector<std::string> take() {
    if (total_ > list_.size()) {
      list_.push_back(fmt::format("... and {} more violations", total_ - list_.size()));
    }
    return std::move(list_);
  }

 private:
  std::vector<std::string> list_;
  std::size_t total_ = 0;
};

struct Context {
  bool unaligned_sizes_allowed = false;  // a divisions entry of 1 (spec R3)
  bool small_splits_everywhere = false;  // expandable segments were on (spec S2)
};

void check_blocks(const SnapshotSegment& seg, const std::string& name, const Context& ctx, Violations& out) {
  Bytes expected_address = seg.address;
  Bytes allocated = 0;
  Bytes active = 0;
  Bytes requested = 0;
  const bool large_remainder_rule = !seg.is_small_pool && !seg.is_expandable && !ctx.small_splits_everywhere;
  for (std::size_t j = 0; j < seg.blocks.size(); ++j) {
    const SnapshotBlock& block = seg.blocks[j];
    if (block.address != expected_address) {
      out.add("{} block {}: starts at {:#x}, expected {:#x} (segment address + earlier block sizes)", name, j,
              block.address, expected_address);
    }
    if (block.size_bytes == 0) {
      out.add("{} block {}: is empty", name, j);
    } else if (!ctx.unaligned_sizes_allowed && block.size_bytes % kMinBlockBytes != 0) {
      out.add("{} block {}: size {} is not a multiple of 512", name, j, block.size_bytes);
    }
    if (block.state == BlockState::kInactive) {
      if (j > 0 && seg.blocks[j - 1].state == BlockState::kInactive) {
        out.add("{} block {}: free block directly after another free block (free runs are merged, M3)", name,
                j);
      }
      if (seg.is_small_pool && block.size_bytes < kMinBlockBytes) {
        out.add("{} block {}: free block of {} bytes in the small pool (remainders are >= 512)", name, j,
                block.size_bytes);
      }
      if (large_remainder_rule && block.size_bytes <= kSmallPoolMaxBytes) {
        out.add("{} block {}: free block of {} bytes in the large pool (free blocks there are > 1 MiB, S3)",
                name, j, block.size_bytes);
      }
    } else {
      if (block.requested_bytes > block.size_bytes) {
        out.add("{} block {}: requested_size {} exceeds the block size {}", name, j, block.requested_bytes,
                block.size_bytes);
      }
      active += block.size_bytes;
      requested += block.requested_bytes;
      if (block.state == BlockState::kActiveAllocated) {
        allocated += block.size_bytes;
      }
    }
    expected_address = block.address + block.size_bytes;
  }
  const Bytes covered = expected_address - seg.address;
  if (covered != seg.total_size_bytes) {
    out.add("{}: blocks cover {} of its {} bytes", name, covered, seg.total_size_bytes);
  }
  if (seg.allocated_bytes != allocated) {
    out.add("{}: allocated_size {} disagrees with its allocated blocks ({})", name, seg.allocated_bytes,
            allocated);
  }
  if (seg.active_bytes != active) {
    out.add("{}: active_size {} disagrees with its active blocks ({})", name, seg.active_bytes, active);
  }
  if (seg.requested_bytes != requested) {
    out.add("{}: requested_size {} disagrees with its active blocks ({})", name, seg.requested_bytes,
            requested);
  }
}

void check_segment_size(const SnapshotSegment& seg, const std::string& name, Violations& out) {
  const Bytes size = seg.total_size_bytes;
  if (size == 0) {
    out.add("{}: is empty", name);
  } else if (seg.is_expandable) {
    if (size % kSegmentGranuleBytes != 0) {
      out.add("{}: expandable segment of {} bytes is not a whole number of 2 MiB pages", name, size);
    }
  } else if (seg.is_small_pool) {
    if (size != kSmallSegmentBytes) {
      out.add("{}: small-pool segment of {} bytes (small segments are 2097152)", name, size);
    }
  } else if (size % kSegmentGranuleBytes != 0) {
    out.add("{}: large-pool segment of {} bytes is not a multiple of 2 MiB", name, size);
  }
}

}  // namespace

std::vector<std::string> check_snapshot_invariants(const Snapshot& snapshot) {
  Context ctx;
  if (const auto& settings = snapshot.allocator_settings) {
    const auto& table = settings->roundup_power2_divisions;
    ctx.unaligned_sizes_allowed = std::find(table.begin(), table.end(), 1) != table.end();
    ctx.small_splits_everywhere = settings->expandable_segments;
  }
  ctx.small_splits_everywhere =
      ctx.small_splits_everywhere || std::any_of(snapshot.segments.begin(), snapshot.segments.end(),
                                                 [](const SnapshotSegment& s) { return s.is_expandable; });

  Violations out;
  for (std::size_t i = 0; i < snapshot.segments.size(); ++i) {
    const SnapshotSegment& seg = snapshot.segments[i];
    const std::string name = fmt::format("segment {} (device {}, {:#x})", i, seg.device, seg.address);
    if (i > 0) {
      const SnapshotSegment& prev = snapshot.segments[i - 1];
      if (prev.device > seg.device || (prev.device == seg.device && prev.address > seg.address)) {
        out.add("{}: not in (device, address) order after segment {}", name, i - 1);
      } else if (prev.device == seg.device && seg.address - prev.address < prev.total_size_bytes) {
        out.add("{}: overlaps segment {} ({:#x} + {} bytes)", name, i - 1, prev.address,
                prev.total_size_bytes);
      }
    }
    check_segment_size(seg, name, out);
    check_blocks(seg, name, ctx, out);
  }
  return out.take();
}

}  // namespace vramsim
