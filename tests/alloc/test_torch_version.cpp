// --torch-version: each modelled difference between PyTorch releases (sim/alloc/torch_version.h), checked on
// both sides of its boundary. Expected values: the parsers' messages and checks as the cited sources write
// them (CUDAAllocatorConfig.cpp of the 2.1 and 2.8 eras, c10/core/AllocatorConfig.cpp), and allocation
// sequences worked by hand in the comments.
#include <catch2/catch.hpp>

#include <string>

#include "caching_fixture.h"
#include "sim/alloc/alloc_conf_environment.h"
#include "sim/core/error.h"

using namespace vramsim;
using vramsim::test::CachingFixture;
using vramsim::test::check_accounting;

namespace {

CachingConfig parse_under(std::string_view conf, TorchVersion version) {
  CachingConfig base;
  base.torch_version = version;
  return parse_alloc_conf(conf, "--alloc-conf", base);
}

std::string refusal(std::string_view conf, TorchVersion version) {
  try {
    (void)parse_under(conf, version);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("parse_torch_version: X.Y with a patch, local or pre-release part, and the modelled range",
          "[quick][alloc][torch-version]") {
  CHECK(parse_torch_version("2.6", "v") == TorchVersion{2, 6});
  CHECK(parse_torch_version("2.6.0+cu124", "v") == TorchVersion{2, 6});  // torch.__version__ of a wheel
  CHECK(parse_torch_version("2.11.0a0+git1234", "v") == TorchVersion{2, 11});
  CHECK(parse_torch_version("1.12", "v") == TorchVersion{1, 12});
  CHECK_THROWS_WITH(parse_torch_version("1.11", "--torch-version"),
                    "--torch-version: PyTorch 1.11 is not modelled (vramsim models 1.12 to 2.14)");
  CHECK_THROWS_WITH(parse_torch_version("2.15", "--torch-version"),
                    "--torch-version: PyTorch 2.15 is not modelled (vramsim models 1.12 to 2.14)");
  CHECK_THROWS_WITH(parse_torch_version("two", "--torch-version"),
                    "--torch-version: 'two' is not a PyTorch version (expected X.Y, e.g. 2.6)");
  CHECK_THROWS_AS(parse_torch_version("2", "v"), InputError);
  CHECK_THROWS_AS(parse_torch_version("2.x", "v"), InputError);
  CHECK_THROWS_AS(parse_torch_version("2.6-rc1", "v"), InputError);
}

TEST_CASE("torch version: expandable_segments arrived in 2.1 (pytorch#96995)",
          "[quick][alloc][torch-version]") {
  CHECK(
      refusal("expandable_segments:True", {2, 0}) ==
      "--alloc-conf: expandable_segments: Unrecognized CachingAllocator option: expandable_segments (PyTorch "
      "2.0; the key arrived in 2.1: pytorch#96995 (expandable blocks in allocator, merged 2023-04, after the "
      "2.0 release))");
  CHECK(parse_under("expandable_segments:True", {2, 1}).expandable_segments);
}

TEST_CASE("torch version: the per-interval roundup_power2_divisions list arrived in 2.0 (pytorch#87290)",
          "[quick][alloc][torch-version]") {
  // 1.13 read the value with std::stoi, which throws on '['; the single number was read since 1.12.
  CHECK(
      refusal("roundup_power2_divisions:[256:1,512:2]", {1, 13})
          .find(
              "roundup_power2_divisions: '[' is not an integer (std::stoi: invalid_argument; PyTorch 1.13") !=
      std::string::npos);
  CHECK(parse_under("roundup_power2_divisions:4", {1, 12}).roundup_power2_divisions[5] == 4);
  const CachingConfig c = parse_under("roundup_power2_divisions:[256:1,512:2]", {2, 0});
  CHECK(c.roundup_power2_divisions[8] == 1);  // 256 MiB -> index 8
  CHECK(c.roundup_power2_divisions[9] == 2);  // 512 MiB -> index 9
}

TEST_CASE("torch version: max_split_size_mb:20 is refused before 2.9 ('must be > 20')",
          "[quick][alloc][torch-version]") {
  // CUDAAllocatorConfig::parseMaxSplitSize (2.1 and 2.8-era copies): TORCH_CHECK(val1 > kLargeBuffer / mb,
  // "... too small, must be > 20"); c10/core/AllocatorConfig.cpp: val_env >= min_allowed_split_size_mb.
  CHECK(refusal("max_split_size_mb:20", {2, 8}) ==
        "--alloc-conf: max_split_size_mb: CachingAllocator option max_split_size_mb too small, must be > 20 "
        "(got 20; PyTorch 2.8, >= 20 from 2.9)");
  CHECK(parse_under("max_split_size_mb:20", {2, 9}).max_split_size_bytes == 20 * kMiB);
  CHECK(parse_under("max_split_size_mb:21", {2, 8}).max_split_size_bytes == 21 * kMiB);
}

TEST_CASE("torch version: max_non_split_rounding_mb arrived in 2.6 (pytorch#136174)",
          "[quick][alloc][torch-version]") {
  CHECK(refusal("max_non_split_rounding_mb:40", {2, 5})
            .find("Unrecognized CachingAllocator option: max_non_split_rounding_mb (PyTorch 2.5; the key "
                  "arrived in "
                  "2.6") != std::string::npos);
  CHECK(parse_under("max_non_split_rounding_mb:40", {2, 6}).max_non_split_rounding_bytes == 40 * kMiB);
}

TEST_CASE("torch version: the pinned-register keys are refused by the 2.1 parser",
          "[quick][alloc][torch-version]") {
  // The 2.1-era CUDAAllocatorConfig::parseArgs knows max_split_size_mb, garbage_collection_threshold,
  // roundup_power2_divisions, backend, expandable_segments and release_lock_on_cudamalloc only.
  CHECK(refusal("pinned_num_register_threads:8", {2, 1})
            .find("Unrecognized CachingAllocator option: pinned_num_register_threads (PyTorch 2.1") !=
        std::string::npos);
  CHECK(refusal("pinned_num_register_threads:8", {2, 2}) == "(accepted)");
  // The check itself is the same in every release that has the key.
  CHECK(refusal("pinned_num_register_threads:1024", {2, 2}).find("less than or equal to 128") !=
        std::string::npos);
}

TEST_CASE("torch version: PYTORCH_ALLOC_CONF is read from 2.9 on", "[quick][alloc][torch-version]") {
  // Only PYTORCH_ALLOC_CONF set: 2.8's CUDAAllocatorConfig reads PYTORCH_CUDA_ALLOC_CONF alone.
  CHECK_FALSE(alloc_conf_environment("max_split_size_mb:64", nullptr, {2, 8}).has_value());
  const auto e = alloc_conf_environment("max_split_size_mb:64", nullptr, {2, 9});
  REQUIRE(e.has_value());
  CHECK(e->generic_origin == "PYTORCH_ALLOC_CONF");
  // Both set under 2.8: the CUDA variable serves both readings.
  const auto both = alloc_conf_environment("max_split_size_mb:64", "max_split_size_mb:128", {2, 8});
  REQUIRE(both.has_value());
  CHECK(both->generic == "max_split_size_mb:128");
}

TEST_CASE("torch version: with_torch_version refuses recorded settings a release does not have",
          "[quick][alloc][torch-version]") {
  CachingConfig expandable;
  expandable.expandable_segments = true;
  CHECK_THROWS_WITH(with_torch_version(expandable, {2, 0}, "x.pickle"),
                    Catch::Contains("x.pickle: PyTorch 2.0 has no expandable segments (it arrived in 2.1"));
  CHECK(with_torch_version(expandable, {2, 1}, "x.pickle").torch_version == TorchVersion{2, 1});
  CachingConfig table;
  table.roundup_power2_divisions.fill(4);
  table.roundup_power2_divisions[10] = 8;  // only the list form writes different entries
  CHECK_THROWS_WITH(with_torch_version(table, {1, 13}, "x"),
                    Catch::Contains("has no per-interval roundup_power2_divisions"));
}

TEST_CASE("torch version: before 2.5 release_available_cached_blocks meets an expandable block (T11)",
          "[quick][alloc][torch-version]") {
  // T11 (test_max_split_expandable) up to the 120 MiB request after freeing a, b, c: RA walks down from the
  // largest free block of the stream (c, 40 MiB, cudaMalloc'd), then reaches b (expandable). 2.5+ skips it
  // (the 2.14 run of this sequence is the T11 test); before pytorch#134338 release_block asserts on it.
  CachingConfig config;
  config.torch_version = {2, 4};
  CachingFixture f(config, 960 * kMiB);
  f.policy.set_memory_fraction(0.125);  // allowed = 120 MiB
  f.set_settings("expandable_segments:False,max_split_size_mb:40");
  const AllocResult a = f.alloc(40 * kMiB);
  f.set_settings("expandable_segments:True,max_split_size_mb:40");
  const AllocResult b = f.alloc(40 * kMiB);
  f.set_settings("expandable_segments:False,max_split_size_mb:40");
  const AllocResult c = f.alloc(40 * kMiB);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK_FALSE(f.alloc(40 * kMiB).ok());  // nothing free yet: RA finds nothing, the same in every release
  f.free(a);
  f.free(b);
  f.free(c);
  CHECK_THROWS_WITH(
      f.alloc(120 * kMiB),
      Catch::Contains("PyTorch 2.4: release_available_cached_blocks reaches an expandable-segment "
                      "block and fails an internal assert (fixed in 2.5: pytorch#134338"));
  CHECK(f.recorder.count("segment_free") == 1);  // c went before b was reached
}

namespace {

// The 80 MiB device of test_mempool_limited_memory_with_allocator, with a use_on_oom pool holding a free
// 40 MiB block and the default pool a free 20 MiB segment; then a 30 MiB default-pool request.
struct FallbackOrder {
  explicit FallbackOrder(TorchVersion version) : f(config_of(version), 80 * kMiB) {
    f.policy.create_or_incref_pool(pool);
    f.policy.set_use_on_oom(pool, true);
    f.policy.begin_allocate_to_pool(pool, std::nullopt);
    b = f.alloc(40 * kMiB);  // the pool's 40 MiB segment
    f.policy.end_allocate_to_pool(pool);
    f.policy.release_pool(pool);               // use_mem_pool's exit; the MemPool object still holds the pool
    const AllocResult d = f.alloc(20 * kMiB);  // a default-pool 20 MiB segment
    REQUIRE((b.ok() && d.ok()));
    f.free(b);
    f.free(d);
    f.recorder.clear();
  }
  static CachingConfig config_of(TorchVersion version) {
    CachingConfig c;
    c.torch_version = version;
    return c;
  }
  const MempoolId pool{0, 1};
  CachingFixture f;
  AllocResult b;
};

}  // namespace

TEST_CASE("torch version: use_on_oom pools are tried before the cache is released from 2.11 (pytorch#169699)",
          "[quick][alloc][torch-version]") {
  // 60 MiB of 80 are reserved (the pool's 40 + the default 20, both free); a 30 MiB request misses the
  // default pool (its 20 MiB block is too small) and cudaMalloc(30 MiB) fails (20 MiB free).
  SECTION("2.11+: the pool's free 40 MiB block serves it; nothing is released") {
    FallbackOrder s({2, 11});
    const AllocResult c = s.f.alloc(30 * kMiB);
    REQUIRE(c.ok());
    CHECK(c.addr == s.b.addr);
    CHECK(s.f.recorder.count("segment_free") == 0);
    CHECK(s.f.stat("num_alloc_retries") == 0);
    CHECK(s.f.reserved() == static_cast<std::int64_t>(60 * kMiB));
    check_accounting(s.f);
  }
  SECTION(
      "2.8-2.10: release_cached_blocks frees the default 20 MiB segment first; the retry's cudaMalloc fits") {
    FallbackOrder s({2, 10});
    const AllocResult c = s.f.alloc(30 * kMiB);
    REQUIRE(c.ok());
    CHECK(c.addr != s.b.addr);
    CHECK(s.f.recorder.count("segment_free") == 1);
    REQUIRE(s.f.recorder.count("segment_alloc") == 1);
    CHECK(s.f.recorder.of("segment_alloc")[0].size_bytes == 30 * kMiB);  // >= 10 MiB: 2 MiB multiple
    CHECK(s.f.stat("num_alloc_retries") == 1);
    CHECK(s.f.reserved() == static_cast<std::int64_t>(70 * kMiB));  // the pool's 40 + the new 30
    check_accounting(s.f);
  }
}

TEST_CASE("torch version: MemPool(use_on_oom=True) arrived in 2.8 (pytorch#151487)",
          "[quick][alloc][torch-version]") {
  CachingConfig config;
  config.torch_version = {2, 7};
  CachingFixture f(config, 80 * kMiB);
  f.policy.create_or_incref_pool(MempoolId{0, 1});
  CHECK_THROWS_WITH(
      f.policy.set_use_on_oom(MempoolId{0, 1}, true),
      Catch::Contains("setUseOnOOM: PyTorch 2.7 has no MemPool(use_on_oom=True) (it arrived in 2.8"));
}
