// Static rules that every final allocator state recorded by PyTorch's native caching allocator satisfies
// (spec §1.4, §3.1, §3.2, §8.3; shared/traces/real/README.md "How to use them" §3). All real snapshots in
// shared/traces/real pass them; a Snapshot that fails one was not produced by that allocator (or a model of
// it is wrong).
//
// Rules checked, per segment (sizes in bytes):
//   * non-expandable small-pool segments are 2 MiB; non-expandable large-pool segments are multiples of 2
//   MiB;
//     expandable segments (one mapped run each) are multiples of 2 MiB;
//   * same-device segments are sorted by address and do not overlap;
//   * blocks tile the segment: the first starts at the segment address, each next one where the previous
//     ends, none is empty, the sizes add up to total_size;
//   * block sizes are multiples of 512, unless the recorded settings have a roundup_power2_divisions entry
//     of 1 (spec R3: such requests keep their exact size at eb42ad6);
//   * no two free (inactive) blocks are adjacent (merged free runs, M3);
//   * free blocks in the small pool are >= 512; free blocks in the large pool are > 1 MiB (S3: a split
//     remainder is > 1 MiB and a freed block is at least its rounded request, > 1 MiB). Skipped for
//     expandable segments and when expandable segments were on (S2 splits at >= 512 then);
//   * an active block's requested_size is at most its size;
//   * recorded allocated/active/requested sums equal the sums over the blocks.
// Event traces are not checked here.
#pragma once

#include <string>
#include <vector>

#include "traces/snapshot.h"

namespace vramsim {

// At most this many violations are listed; one more line then says how many were left out.
inline constexpr std::size_t kMaxReportedViolations = 100;

// Human-readable violations, one line each, naming the segment (index, device, address) and block; empty when
// the snapshot passes every rule.
std::vector<std::string> check_snapshot_invariants(const Snapshot& snapshot);

}  // namespace vramsim
