// The model's state as a PyTorch snapshot (spec §8.3-§8.4): what torch.cuda.memory._snapshot() would list
// for the simulated device. Expandable reservations appear as one segment per maximal run of mapped
// blocks (spec E9).
#pragma once

#include <vector>

#include "sim/alloc/block_pool.h"
#include "sim/alloc/private_pool.h"
#include "traces/snapshot.h"

namespace vramsim {

// `private_pools` (the policy's table, PyTorchCachingPolicy::private_pools) names each segment's
// segment_pool_id; empty: every segment is (0, 0).
std::vector<SnapshotSegment> take_model_snapshot(const BlockPool& pool, int device,
                                                 const std::vector<PrivatePool>& private_pools = {});

}  // namespace vramsim
