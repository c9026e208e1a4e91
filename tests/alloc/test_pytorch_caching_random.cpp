// Spec §7.4: the invariants hold after every step of a long deterministic random alloc/free/record_stream
// sequence (sizes 1 byte .. 200 MiB, two streams, a finite device so the OOM ladder runs too), under several
// configurations. Expected values are the identities themselves, computed from the blocks
// (caching_fixture.h).
#include <catch2/catch.hpp>

#include "test_rng.h"

#include <algorithm>
#include <set>

#include "caching_fixture.h"

using namespace vramsim;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;

namespace {

using vramsim::test::Rng;

// Log-uniform-ish sizes: pick a power of two up to 2^28, then a size below it; clamp to 200 MiB.
Bytes random_size(Rng& rng) {
  const std::uint64_t exp = rng.below(29);
  const Bytes size = 1 + rng.below(Bytes{1} << exp);
  return std::min<Bytes>(size, 200 * kMiB);
}

struct Live {
  BlockId block;
  Bytes addr;
  Bytes size_bytes;
  StreamId stream;
};

void run_random(std::string_view conf, double fraction, std::uint64_t seed, int steps, Bytes capacity) {
  CachingFixture f(conf, capacity);
  if (fraction > 0.0) {
    f.policy.set_memory_fraction(fraction);
  }
  Rng rng{seed};
  std::vector<Live> live;
  std::set<BlockId> pending;
  int completed_by_hand = 0;
  const StreamId streams[2] = {0, 5};
  auto refresh_pending = [&]() {
    // release_cached_blocks (empty_cache or the OOM path) completes pending frees; drop those.
    for (auto it = pending.begin(); it != pending.end();) {
      const Block& b = f.policy.blocks().block(*it);
      if (b.segment == kNoSegment || b.allocated || b.event_count == 0) {
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
  };
  for (int step = 0; step < steps; ++step) {
    INFO("config '" << conf << "' seed " << seed << " step " << step);
    const std::uint64_t action = rng.below(100);
    if (action < 48 || live.empty()) {
      const Bytes size = random_size(rng);
      const StreamId stream = streams[rng.below(2)];
      const std::int64_t ooms_before = f.stat("num_ooms");
      const AllocResult r = f.alloc(size, stream);
      if (r.ok()) {
        const Block& b = f.policy.blocks().block(r.block);
        REQUIRE(b.allocated);
        REQUIRE(b.addr == r.addr);
        REQUIRE(b.size_bytes == r.block_size_bytes);
        REQUIRE(b.stream == stream);
        REQUIRE(b.size_bytes >= round_size(size, f.policy.config()));
        REQUIRE(f.stat("num_ooms") == ooms_before);
        live.push_back({r.block, r.addr, r.block_size_bytes, stream});
      } else {
        REQUIRE(f.stat("num_ooms") == ooms_before + 1);
      }
    } else if (action < 83) {
      const std::size_t i = rng.below(live.size());
      f.policy.free(live[i].block, 0);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (action < 92) {
      const std::size_t i = rng.below(live.size());
      const StreamId other = live[i].stream == 0 ? 5 : 0;
      f.policy.record_stream(live[i].block, other);
      f.policy.free(live[i].block, 0);
      pending.insert(live[i].block);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (action < 98) {
      if (!pending.empty()) {
        auto it = pending.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng.below(pending.size())));
        f.policy.complete_stream_events(*it);
        pending.erase(it);
        ++completed_by_hand;
      }
    } else {
      f.policy.empty_cache();
    }
    refresh_pending();
    // Live blocks never overlap (they tile segments; check_invariants checks the tiling).
    std::vector<std::pair<Bytes, Bytes>> ranges;
    for (const Live& l : live) {
      ranges.emplace_back(l.addr, l.addr + l.size_bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t k = 1; k < ranges.size(); ++k) {
      REQUIRE(ranges[k - 1].second <= ranges[k].first);
    }
    check_accounting(f, false, /*stop=*/true);
  }
  // Coverage guard: the run must have gone through the OOM ladder and the deferred-free path (and, for
  // expandable segments, mapping and unmapping), or it proves little.
  const auto totals = f.stats.flatten();
  CHECK(totals.at("num_alloc_retries") > 0);
  CHECK(totals.at("num_ooms") > 0);
  CHECK(completed_by_hand > 0);
  if (f.policy.config().expandable_segments) {
    CHECK(f.recorder.count("segment_map") > 0);
    CHECK(f.recorder.count("segment_unmap") > 0);
  }
  // Drain: free everything, complete every pending free, release the cache -> nothing reserved.
  for (const Live& l : live) {
    f.policy.free(l.block, 0);
  }
  f.policy.empty_cache();
  check_accounting(f, false, true);
  CHECK(f.reserved() == 0);
  CHECK(f.device.used_bytes() == 0);
  CHECK(f.live_segments() == 0);
  CHECK(f.stat("active.all.current") == 0);
}

}  // namespace

TEST_CASE("§7.4 invariants over a random sequence: default config", "[quick][alloc]") {
  run_random("", 0.0, 1, 2500, 1536 * kMiB);
  run_random("", 0.0, 2, 2500, 1536 * kMiB);
}

TEST_CASE("§7.4 invariants over a random sequence: expandable_segments:True", "[quick][alloc]") {
  run_random("expandable_segments:True", 0.0, 3, 2500, 768 * kMiB);
}

TEST_CASE("§7.4 invariants over a random sequence: max_split_size_mb:64", "[quick][alloc]") {
  run_random("max_split_size_mb:64", 0.0, 4, 2500, 1536 * kMiB);
}

TEST_CASE("§7.4 invariants over a random sequence: max_split + expandable", "[quick][alloc]") {
  run_random("max_split_size_mb:64,expandable_segments:True", 0.0, 5, 2500, 1 * kGiB);
}

TEST_CASE("§7.4 invariants over a random sequence: GC with a memory fraction", "[quick][alloc]") {
  run_random("garbage_collection_threshold:0.6,max_split_size_mb:64", 0.8, 6, 2500, 1536 * kMiB);
}
