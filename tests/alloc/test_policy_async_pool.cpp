// async-pool (sim/alloc/policies/async_pool.cpp): cudaMallocAsync's pool with PyTorch's settings. Freed
// memory is reused at once by the stream that freed it, by other streams only after a synchronisation (or
// when the device is full: internal dependencies); chunks are 2 MiB-granular; empty_cache trims to 0.
#include <catch2/catch.hpp>

#include "policy_rig.h"

using namespace vramsim;
using vramsim::test::PolicyRig;

TEST_CASE("async-pool: a freed block is reused by the same stream", "[quick][alloc]") {
  PolicyRig rig("async-pool");
  const AllocResult a = rig.alloc(4 * kMiB, 1);
  REQUIRE(a.ok());
  CHECK(rig.rec.count("segment_alloc") == 1);
  rig.free(a);
  CHECK(rig.reserved() == 4 * 1048576);  // release threshold UINT64_MAX: the pool keeps it
  const AllocResult b = rig.alloc(4 * kMiB, 1);
  CHECK(b.addr == a.addr);
  CHECK(rig.rec.count("segment_alloc") == 1);  // no growth
  CHECK(rig.reserved() == 4 * 1048576);
}

TEST_CASE("async-pool: another stream does not reuse it before a synchronisation", "[quick][alloc]") {
  PolicyRig rig("async-pool");
  const AllocResult a = rig.alloc(4 * kMiB, 1);
  rig.free(a);
  const AllocResult b = rig.alloc(4 * kMiB, 2);
  REQUIRE(b.ok());
  CHECK(b.addr != a.addr);
  CHECK(rig.rec.count("segment_alloc") == 2);  // the pool grew by a second 4 MiB chunk
  CHECK(rig.reserved() == 8 * 1048576);
}

TEST_CASE("async-pool: after a synchronisation every stream reuses it", "[quick][alloc]") {
  PolicyRig rig("async-pool");
  // 3 MiB on stream 1: a 4 MiB chunk (3 MiB rounded up to 2 MiB pages); its last 1 MiB stays free (stream 1).
  const AllocResult x = rig.alloc(3 * kMiB, 1);
  REQUIRE(rig.rec.of("segment_alloc")[0].size_bytes == 4 * kMiB);
  // Stream 2 may not take that 1 MiB yet: a new 2 MiB chunk.
  const AllocResult y = rig.alloc(kMiB, 2);
  CHECK(rig.rec.count("segment_alloc") == 2);
  CHECK(y.addr != x.addr + 3 * kMiB);
  rig.free(y);
  // empty_cache: cudaDeviceSynchronize + cudaMemPoolTrimTo(0): stream 2's wholly free chunk goes back, the
  // chunk holding x stays, and its free 1 MiB is now known complete.
  rig.policy->empty_cache();
  CHECK(rig.rec.count("segment_free") == 1);
  CHECK(rig.rec.of("segment_free")[0].size_bytes == 2 * kMiB);
  CHECK(rig.reserved() == 4 * 1048576);
  const AllocResult z = rig.alloc(kMiB, 2);
  CHECK(z.addr == x.addr + 3 * kMiB);
  CHECK(rig.rec.count("segment_alloc") == 2);
  CHECK(rig.invariants() == "");
}

TEST_CASE("async-pool: a full device makes the driver reuse another stream's free", "[quick][alloc]") {
  PolicyRig rig("async-pool", 4 * kMiB);
  const AllocResult a = rig.alloc(4 * kMiB, 1);
  rig.free(a);
  // The pool cannot grow; ReuseAllowInternalDependencies: stream 2 waits for stream 1's free and reuses it.
  const AllocResult b = rig.alloc(4 * kMiB, 2);
  REQUIRE(b.ok());
  CHECK(b.addr == a.addr);
  CHECK(rig.rec.ooms.empty());
  // Nothing left to reuse: an OOM.
  CHECK_FALSE(rig.alloc(512, 2).ok());
  CHECK(rig.rec.ooms.size() == 1);
}

TEST_CASE("async-pool: 512-byte suballocation inside 2 MiB chunks", "[quick][alloc]") {
  PolicyRig rig("async-pool");
  const AllocResult a = rig.alloc(1000);  // 1024 bytes
  const AllocResult b = rig.alloc(1);     // 512 bytes, right after a in the same chunk
  CHECK(a.block_size_bytes == 1024);
  CHECK(b.block_size_bytes == 512);
  CHECK(b.addr == a.addr + 1024);
  CHECK(rig.rec.count("segment_alloc") == 1);
  CHECK(rig.rec.of("segment_alloc")[0].size_bytes == 2 * kMiB);
  rig.free(a);
  rig.free(b);
  rig.policy->empty_cache();
  CHECK(rig.reserved() == 0);
  CHECK(rig.device.used_bytes() == 0);
}

TEST_CASE("async-pool: record_stream defers the free until the stream's work is complete", "[quick][alloc]") {
  PolicyRig rig("async-pool");
  const AllocResult a = rig.alloc(4 * kMiB, 1);
  rig.policy->record_stream(a.block, 2);
  rig.free(a);
  CHECK(rig.rec.count("free_requested") == 1);
  CHECK(rig.rec.count("free_completed") == 0);
  CHECK(rig.allocated() == 0);
  CHECK(rig.invariants() == "");
  // Still in use on stream 2: not reusable, even by stream 1.
  const AllocResult b = rig.alloc(4 * kMiB, 1);
  CHECK(b.addr != a.addr);
  rig.policy->complete_stream_events(a.block);
  CHECK(rig.rec.count("free_completed") == 1);
  // Freed on PyTorch's unifying stream and complete: any stream may reuse it.
  const AllocResult c = rig.alloc(4 * kMiB, 3);
  CHECK(c.addr == a.addr);
  CHECK(rig.invariants() == "");
}
