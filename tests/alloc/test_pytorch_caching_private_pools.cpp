// Private pools of PyTorchCachingPolicy (sim/alloc/private_pool.h): PyTorch's own tests of CUDA-graph pools
// and torch.cuda.MemPool (test/test_cuda.py, classes TestCuda and TestMemPool, pytorch/pytorch main as stored
// in 2026), re-expressed as calls to the policy. Each case names the PyTorch test it follows; the expected
// values are that test's assertions, or, where the test asserts less than it implies, worked by hand from
// c10/cuda/CUDACachingAllocator.cpp in the comment beside the check.
//
// What the Python tests do that is not an allocator call is written out: torch.cuda.graph(g) =
// capture_begin (beginAllocateToPool for the capturing stream) ... capture_end (endAllocateToPool); deleting
// a graph = releasePool; MemPool() = createOrIncrefPool; use_mem_pool = beginAllocateToPool for the thread
// (every stream here) ... endAllocateToPool + releasePool; ~MemPool = setUseOnOOM(false) when use_on_oom,
// releasePool, emptyCache(pool id) (c10/cuda/MemPool.cpp).
#include <catch2/catch.hpp>

#include <vector>

#include "caching_fixture.h"
#include "sim/core/error.h"

using namespace vramsim;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;

namespace {

// As test_graph_memory_stats_and_use_result_after_destroy_graph spells them (not the model's constants).
constexpr Bytes kOneMiB = 1024 * 1024;
constexpr Bytes kTestSmallBuffer = 2'097'152;
constexpr Bytes kTestLargeBuffer = 20'971'520;

// len(torch.cuda.memory.memory_snapshot(pool_id)): the live segments that pool owns.
std::size_t pool_segments(const CachingFixture& f, MempoolId id) {
  std::size_t n = 0;
  const BlockPool& blocks = f.policy.blocks();
  for (SegmentId sid : blocks.live_segments_by_address()) {
    n += f.policy.mempool_id(blocks.segment(sid).private_pool) == id ? 1 : 0;
  }
  return n;
}

// The segment (base, size) holding address `addr`.
std::pair<Bytes, Bytes> segment_of(const CachingFixture& f, Bytes addr) {
  const BlockPool& blocks = f.policy.blocks();
  for (SegmentId sid : blocks.live_segments_by_address()) {
    const Segment& s = blocks.segment(sid);
    if (addr >= s.base && addr < s.base + s.size_bytes) {
      return {s.base, s.size_bytes};
    }
  }
  return {0, 0};
}

// torch.cuda.use_mem_pool(pool) around `body`.
template <typename F>
void use_mem_pool(CachingFixture& f, MempoolId id, F body) {
  f.policy.begin_allocate_to_pool(id, std::nullopt);
  body();
  f.policy.end_allocate_to_pool(id);
  f.policy.release_pool(id);
}

// MemPool's destructor (c10/cuda/MemPool.cpp).
void delete_mem_pool(CachingFixture& f, MempoolId id, bool use_on_oom = false) {
  if (use_on_oom) {
    f.policy.set_use_on_oom(id, false);
  }
  f.policy.release_pool(id);
  f.policy.empty_cache(id);
}

}  // namespace

TEST_CASE("test_mempool_with_allocator: use_count and the pool's segment count", "[quick][alloc][pools]") {
  CachingFixture f;
  const MempoolId pool{0, 1};
  f.policy.create_or_incref_pool(pool);
  CHECK(f.policy.pool_use_count(pool) == 1);  // "MemPool object holds a reference"
  const Bytes one_mib = 1024 * 1024;          // randn(nelem_1mb) float32
  AllocResult out0;
  f.policy.begin_allocate_to_pool(pool, std::nullopt);
  out0 = f.alloc(one_mib);
  CHECK(f.policy.pool_use_count(pool) == 2);  // "use_mem_pool holds a reference"
  f.policy.end_allocate_to_pool(pool);
  f.policy.release_pool(pool);
  CHECK(f.policy.pool_use_count(pool) == 1);

  const AllocResult out_non_pool = f.alloc(one_mib);  // default pool: a segment of its own
  AllocResult out1, out2;
  use_mem_pool(f, pool, [&] {
    CHECK(pool_segments(f, pool) == 1);  // the 1 MB allocation was packed into a 2 MB buffer
    out1 = f.alloc(one_mib);
    CHECK(pool_segments(f, pool) == 1);  // packed into the existing 2 MB buffer
    out2 = f.alloc(one_mib);
    CHECK(pool_segments(f, pool) == 2);  // a new 2 MB buffer for out_2
  });
  CHECK(pool_segments(f, pool) == 2);
  REQUIRE((out0.ok() && out1.ok() && out2.ok() && out_non_pool.ok()));
  CHECK(segment_of(f, out_non_pool.addr) != segment_of(f, out0.addr));
  f.free(out0);
  f.free(out1);
  f.free(out2);
  // "pool's destructor calls emptyCache()" and the test sees its allocator's free called: both pool
  // segments are cudaFreed, the default pool's segment (out_non_pool is alive) stays.
  f.recorder.clear();
  delete_mem_pool(f, pool);
  CHECK(f.recorder.count("segment_free") == 2);
  CHECK(pool_segments(f, pool) == 0);
  CHECK(f.live_segments() == 1);
  CHECK_FALSE(f.policy.pool_use_count(pool).has_value());  // dropped: it owns no segment
  check_accounting(f);
}

TEST_CASE("test_mempool_limited_memory_with_allocator: a use_on_oom pool serves a refused request",
          "[quick][alloc][pools]") {
  // _setup_mempool_limited_memory_test(80): 80 MB allowed after empty_cache. Here the device itself has
  // 80 MiB, which refuses cudaMalloc at the same point as the fraction limit does (spec B2).
  CachingFixture f("", 80 * kOneMiB);
  const MempoolId pool_do_not_use{0, 1};
  const MempoolId pool_use{0, 2};
  f.policy.create_or_incref_pool(pool_do_not_use);
  f.policy.create_or_incref_pool(pool_use);
  f.policy.set_use_on_oom(pool_use, true);
  AllocResult a, b;
  use_mem_pool(f, pool_do_not_use, [&] { a = f.alloc(40 * kOneMiB); });
  use_mem_pool(f, pool_use, [&] { b = f.alloc(40 * kOneMiB); });
  REQUIRE((a.ok() && b.ok()));
  // "with self.assertRaises(torch.OutOfMemoryError): c = torch.randn(40 * nelem_1mb)"
  CHECK_FALSE(f.alloc(40 * kOneMiB).ok());
  f.free(a);
  f.free(b);
  // "c should not oom and instead can use mempool_use as fallback"; "we used same memory address"
  const AllocResult c = f.alloc(30 * kOneMiB);
  REQUIRE(c.ok());
  CHECK(c.addr == b.addr);
  // "out of memory since can't use mempool_do_not_use"
  CHECK_FALSE(f.alloc(30 * kOneMiB).ok());
  f.free(c);
  AllocResult e;
  use_mem_pool(f, pool_use, [&] { e = f.alloc(20 * kOneMiB); });
  REQUIRE(e.ok());
  CHECK(e.addr == c.addr);  // "self.assertEqual(e_dataptr, c_dataptr)"
  f.free(e);
  CHECK(f.stat("num_ooms") == 2);
  check_accounting(f);
}

TEST_CASE("test_deleted_mempool_not_used_on_oom: a deleted use_on_oom pool serves nothing",
          "[quick][alloc][pools]") {
  CachingFixture f("", 40 * kOneMiB);  // _setup_mempool_limited_memory_test(40)
  for (std::int64_t i = 1; i <= 10; ++i) {
    const MempoolId pool{0, i};
    f.policy.create_or_incref_pool(pool);
    f.policy.set_use_on_oom(pool, true);
    AllocResult a;
    use_mem_pool(f, pool, [&] { a = f.alloc(40 * kOneMiB); });
    REQUIRE(a.ok());
    f.free(a);
    delete_mem_pool(f, pool, true);  // its emptyCache returns the 40 MiB
    CHECK(f.reserved() == 0);
  }
  const MempoolId live_pool{0, 11};
  f.policy.create_or_incref_pool(live_pool);
  f.policy.set_use_on_oom(live_pool, true);
  AllocResult a;
  use_mem_pool(f, live_pool, [&] { a = f.alloc(40 * kOneMiB); });
  REQUIRE(a.ok());
  f.free(a);
  // "allocate tensors that will fallback to use_on_oom pool": both fit in the live pool's free 40 MiB.
  const AllocResult b = f.alloc(20 * kOneMiB);
  const AllocResult c = f.alloc(20 * kOneMiB);
  REQUIRE((b.ok() && c.ok()));
  CHECK(segment_of(f, b.addr) == segment_of(f, a.addr));
  CHECK(segment_of(f, c.addr) == segment_of(f, a.addr));
  CHECK(f.stat("num_ooms") == 0);
  check_accounting(f);
}

TEST_CASE("test_nested_mempool: the innermost use_mem_pool wins", "[quick][alloc][pools]") {
  CachingFixture f;
  const MempoolId pool1{0, 1}, pool2{0, 2}, pool3{0, 3};
  for (MempoolId p : {pool1, pool2, pool3}) {
    f.policy.create_or_incref_pool(p);
  }
  std::vector<AllocResult> data;
  auto allocate_data = [&] { data.push_back(f.alloc(20 * kOneMiB)); };  // torch.empty(nelem_1mb * 20)
  use_mem_pool(f, pool1, [&] {
    allocate_data();
    use_mem_pool(f, pool2, [&] {
      allocate_data();
      use_mem_pool(f, pool3, [&] { allocate_data(); });
      allocate_data();
    });
    allocate_data();
  });
  CHECK(pool_segments(f, pool1) == 2);
  CHECK(pool_segments(f, pool2) == 2);
  CHECK(pool_segments(f, pool3) == 1);
  CHECK(pool_segments(f, MempoolId{}) == 0);
  check_accounting(f);
}

TEST_CASE("test_mempool_emptycache_multithread: empty_cache under use_mem_pool frees nothing",
          "[quick][alloc][pools]") {
  // One of the test's four threads: with the pool under way, release_cached_blocks((0, 0)) skips the
  // default pools (captures_underway is not empty) and the pool is not freeable (use_count 2).
  CachingFixture f;
  const MempoolId pool{0, 1};
  f.policy.create_or_incref_pool(pool);
  use_mem_pool(f, pool, [&] {
    const AllocResult x = f.alloc(16);  // torch.randn(4)
    f.free(x);
    f.policy.empty_cache();
  });
  CHECK(pool_segments(f, pool) == 1);  // "Expected to have a single segment"
  CHECK(f.recorder.count("segment_free") == 0);
  // Outside the context it is still held by the MemPool object: empty_cache leaves it alone too.
  f.policy.empty_cache();
  CHECK(pool_segments(f, pool) == 1);
}

TEST_CASE("test_mempool_empty_cache: the pool's cache is freed by its destructor, the default pool's stays",
          "[quick][alloc][pools]") {
  CachingFixture f;
  const MempoolId pool{0, 1};
  f.policy.create_or_incref_pool(pool);
  const AllocResult x = f.alloc(4 * kOneMiB);  // torch.empty(1024, 1024) float32, default pool
  AllocResult y;
  use_mem_pool(f, pool, [&] { y = f.alloc(4 * kOneMiB); });
  f.free(y);
  f.free(x);
  delete_mem_pool(f, pool);
  // The test asserts len(segments) > 0. By hand: emptyCache(pool id) releases only that (now freeable) pool
  // (release_cached_blocks with a non-default id skips the default pools): x's 20 MiB segment stays cached.
  CHECK(f.live_segments() == 1);
  CHECK(f.reserved() == static_cast<std::int64_t>(kTestLargeBuffer));
  CHECK(pool_segments(f, MempoolId{}) == 1);
}

TEST_CASE("test_graph_memory_stats_and_use_result_after_destroy_graph (native allocator)",
          "[quick][alloc][pools]") {
  // cases = (numel, delta_cudaMallocs, delta_cudaMalloc_bytes, delta_cudaMalloc_bytes_post_del_g, pool),
  // elem = 4; kMinLargeAlloc = 10485760, kRoundLarge = 2097152.
  struct Case {
    Bytes bytes;  // numel * elem
    std::int64_t d_segments, d_reserved, d_reserved_post_del;
    const char* pool;
  };
  constexpr Bytes kTestMinLargeAlloc = 10'485'760;
  constexpr Bytes kTestRoundLarge = 2'097'152;
  constexpr Bytes kRounded =
      kTestRoundLarge * ((kTestMinLargeAlloc + 512 + kTestRoundLarge - 1) / kTestRoundLarge);
  const Case cases[] = {
      {512, 1, kTestSmallBuffer, kTestSmallBuffer, "small_pool"},
      {1'048'576, 2, 2 * kTestSmallBuffer, kTestSmallBuffer, "small_pool"},
      {1'048'576 + 512, 1, kTestLargeBuffer, kTestLargeBuffer, "large_pool"},
      {kTestMinLargeAlloc - 512, 2, 2 * kTestLargeBuffer, kTestLargeBuffer, "large_pool"},
      {kTestMinLargeAlloc + 512, 3, 3 * kRounded, kRounded, "large_pool"},
  };
  CachingFixture f;
  const StreamId s = 7;  // torch.cuda.Stream()
  std::int64_t graph_id = 1;
  for (const Case& c : cases) {
    INFO("numel * elem = " << c.bytes);
    const bool small = std::string(c.pool) == "small_pool";
    const std::string pool = c.pool;
    const AllocResult a = f.alloc(c.bytes, s);  // a = torch.ones((numel,))
    auto stat = [&](const char* name) { return f.stat(std::string(name) + pool + ".current"); };
    const std::int64_t pre_segments = stat("segment."), pre_reserved = stat("reserved_bytes."),
                       pre_active = stat("active."), pre_active_bytes = stat("active_bytes.");
    // capture_begin: CUDAGraph's one-element rng seed and offset holders (int64), outside the private pool,
    // on the capturing stream; then beginAllocateToPool for a pool of its own ((id, 0)).
    const AllocResult seed = f.alloc(8, s);
    const AllocResult offset = f.alloc(8, s);
    const MempoolId graph_pool{graph_id++, 0};
    f.policy.begin_allocate_to_pool(graph_pool, s);
    AllocResult b = f.alloc(c.bytes, s);  // b = a.clone()
    for (int i = 0; i < 5; ++i) {         // b = b.clone() + 1
      const AllocResult t1 = f.alloc(c.bytes, s);
      const AllocResult t2 = f.alloc(c.bytes, s);
      f.free(t1);
      f.free(b);
      b = t2;
    }
    f.policy.end_allocate_to_pool(graph_pool);
    const std::int64_t d_active_blocks = small ? 3 : 1;  // b, plus the two holders in the small pool
    const std::int64_t d_active_bytes = static_cast<std::int64_t>(c.bytes) + (small ? 1024 : 0);
    for (int i = 0; i < 2; ++i) {  // "Double checks ... before and after a call to empty_cache"
      CHECK(stat("segment.") - pre_segments == c.d_segments);
      CHECK(stat("reserved_bytes.") - pre_reserved == c.d_reserved);
      CHECK(stat("active.") - pre_active == d_active_blocks);
      CHECK(stat("active_bytes.") - pre_active_bytes == d_active_bytes);
      f.policy.empty_cache();  // the graph still holds its pool: nothing of it is freed
    }
    // del g: the holders die and the pool is released; empty_cache then frees the pool's free segments.
    f.free(seed);
    f.free(offset);
    f.policy.release_pool(graph_pool);
    f.policy.empty_cache();
    // "b should be the only live reference remaining from the graph's private pool"
    CHECK(stat("segment.") - pre_segments == 1);
    CHECK(stat("reserved_bytes.") - pre_reserved == c.d_reserved_post_del);
    CHECK(stat("active.") - pre_active == 1);
    CHECK(stat("active_bytes.") - pre_active_bytes == static_cast<std::int64_t>(c.bytes));
    f.free(a);
    f.free(b);
    f.policy.empty_cache();  // "del a, b ... torch.cuda.empty_cache()"
    CHECK(f.reserved() == 0);
    CHECK_FALSE(f.policy.pool_use_count(graph_pool).has_value());  // dropped with its last segment
    check_accounting(f);
  }
}

TEST_CASE("graph pools: a capture routes only its own stream, a shared pool outlives one graph",
          "[quick][alloc][pools]") {
  // torch.cuda.graph(g, pool=shared): beginAllocateToPool increfs an existing pool
  // (create_or_incref_pool); each graph's reset releases one reference (releasePool); only at 0 may
  // empty_cache free it (graph_pools_freeable). Worked from CUDACachingAllocator.cpp.
  CachingFixture f;
  const MempoolId shared{1, 0};
  f.policy.begin_allocate_to_pool(shared, 7);  // graph1 captures on stream 7
  const AllocResult in_pool = f.alloc(4 * kOneMiB, 7);
  const AllocResult other_stream = f.alloc(4 * kOneMiB, 0);  // not the capturing stream: default pool
  f.policy.end_allocate_to_pool(shared);
  CHECK(pool_segments(f, shared) == 1);
  CHECK(pool_segments(f, MempoolId{}) == 1);
  f.free(in_pool);
  f.policy.begin_allocate_to_pool(shared, 7);  // graph2, pool=graph1.pool()
  CHECK(f.policy.pool_use_count(shared) == 2);
  const AllocResult reused = f.alloc(4 * kOneMiB, 7);
  CHECK(reused.addr == in_pool.addr);  // freed during graph1's capture, reused by graph2's
  f.free(reused);
  f.policy.end_allocate_to_pool(shared);
  f.policy.release_pool(shared);  // graph1 reset
  f.policy.empty_cache();
  CHECK(pool_segments(f, shared) == 1);  // graph2 still holds it
  f.policy.release_pool(shared);         // graph2 reset
  f.policy.empty_cache();
  CHECK(pool_segments(f, shared) == 0);
  f.free(other_stream);
  f.policy.empty_cache();
  CHECK(f.reserved() == 0);
}

TEST_CASE("graph pools: the OOM retry is skipped during a capture", "[quick][alloc][pools]") {
  // malloc: "(C10_LIKELY(captures_underway.empty()) && release_cached_blocks(context, {0, 0}) && ...)".
  CachingFixture f("", 40 * kOneMiB);
  const AllocResult cached = f.alloc(30 * kOneMiB, 3);
  f.free(cached);  // 30 MiB cached in the default pool, on stream 3 (no use to stream 0's requests)
  f.policy.begin_allocate_to_pool(MempoolId{1, 0}, 0);
  CHECK_FALSE(f.alloc(20 * kOneMiB).ok());  // would fit after emptying the cache, but not during capture
  CHECK(f.stat("num_alloc_retries") == 0);
  f.policy.end_allocate_to_pool(MempoolId{1, 0});
  CHECK(f.alloc(20 * kOneMiB).ok());  // after the capture the retry frees stream 3's cached 30 MiB
  CHECK(f.stat("num_alloc_retries") == 1);
}

TEST_CASE("private pools: misuse is refused with PyTorch's messages", "[quick][alloc][pools]") {
  CachingFixture f;
  f.policy.begin_allocate_to_pool(MempoolId{0, 1}, std::nullopt);
  CHECK_THROWS_WITH(f.policy.begin_allocate_to_pool(MempoolId{0, 1}, std::nullopt),
                    Catch::Contains("beginAllocateToPool: already recording to mempool_id (0, 1)"));
  CHECK_THROWS_WITH(f.policy.end_allocate_to_pool(MempoolId{0, 2}),
                    Catch::Contains("endAllocatePool: not currently recording to mempool_id (0, 2)"));
  CHECK_THROWS_AS(f.policy.release_pool(MempoolId{0, 9}), InputError);
  CHECK_THROWS_AS(f.policy.create_or_incref_pool(MempoolId{}), InputError);
}
