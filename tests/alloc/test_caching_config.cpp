// Spec §1.3 (the roundup_power2_divisions table, D1-D5) and T4 (config errors), for the version documented in
// caching_config.h (PyTorch 2.5/2.6: divisions 1 = off, max_split_size_mb >= 20, `>` fills from the last
// explicit index inclusive).
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>

#include "sim/alloc/caching_config.h"
#include "sim/core/error.h"

using namespace vramsim;

namespace {

using Table = std::array<std::uint64_t, kRoundupIntervals>;

CachingConfig parse(std::string_view conf, const CachingConfig& base = {}) {
  return parse_alloc_conf(conf, "PYTORCH_CUDA_ALLOC_CONF", base);
}

// A table from (first index, last index inclusive, value) runs.
Table table(std::initializer_list<std::array<std::uint64_t, 3>> runs) {
  Table t{};
  for (const auto& r : runs) {
    for (std::uint64_t i = r[0]; i <= r[1]; ++i) {
      t[i] = r[2];
    }
  }
  return t;
}

}  // namespace

TEST_CASE("parse_alloc_conf: empty string gives the defaults", "[quick][alloc]") {
  const CachingConfig c = parse("");
  CHECK(c.max_split_size_bytes == kUnlimitedSplitSize);
  CHECK(c.garbage_collection_threshold == 0.0);
  CHECK_FALSE(c.expandable_segments);
  CHECK(c.roundup_power2_divisions == Table{});
  CHECK(c.max_non_split_rounding_bytes == 20 * kMiB);
}

TEST_CASE("parse_alloc_conf: D1 single divisions value fills all 16 entries", "[quick][alloc]") {
  CHECK(parse("roundup_power2_divisions:4").roundup_power2_divisions == table({{0, 15, 4}}));
  CHECK(parse("roundup_power2_divisions:8").roundup_power2_divisions == table({{0, 15, 8}}));
  CHECK(parse("roundup_power2_divisions:1").roundup_power2_divisions == table({{0, 15, 1}}));  // 1 accepted
  // D1: N must be a power of two; 0 is rejected in this form.
  CHECK_THROWS_AS(parse("roundup_power2_divisions:0"), InputError);
  CHECK_THROWS_AS(parse("roundup_power2_divisions:3"), InputError);
  CHECK_THROWS_WITH(parse("roundup_power2_divisions:3"), Catch::Contains("roundup_power2_divisions"));
  CHECK_THROWS_WITH(parse("roundup_power2_divisions:0"), Catch::Contains("roundup_power2_divisions"));
}

TEST_CASE("parse_alloc_conf: §1.3 example table [64:8,128:2,256:2,512:2,1024:1,>:1]", "[quick][alloc]") {
  // 64 -> index 6 (D3 fills 0-5 too), 128 -> 7, 256 -> 8, 512 -> 9, 1024 -> 10, '>' fills 10-15 (D4).
  const CachingConfig c = parse("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
  CHECK(c.roundup_power2_divisions == table({{0, 6, 8}, {7, 9, 2}, {10, 15, 1}}));
}

TEST_CASE("parse_alloc_conf: §1.3 example table [256:1,512:2,1024:4,>:8], inclusive '>'", "[quick][alloc]") {
  // 256 -> index 8 (0-8 = 1), 512 -> 9 = 2, 1024 -> 10 = 4, then '>' from index 10 inclusive overwrites it:
  // 10-15 = 8 (the eb42ad6 / 2025 CUDAAllocatorConfig rule our version follows).
  const CachingConfig c = parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  CHECK(c.roundup_power2_divisions == table({{0, 8, 1}, {9, 9, 2}, {10, 15, 8}}));
}

TEST_CASE("parse_alloc_conf: D2 list keys and values", "[quick][alloc]") {
  // K is a size in MiB; index = floor(log2(K)) clamped to 15. K = 1 -> index 0; K = 65536 -> index 15.
  CHECK(parse("roundup_power2_divisions:[1:4]").roundup_power2_divisions == table({{0, 0, 4}}));
  CHECK(parse("roundup_power2_divisions:[2:4]").roundup_power2_divisions == table({{0, 1, 4}}));
  CHECK(parse("roundup_power2_divisions:[65536:2]").roundup_power2_divisions == table({{0, 15, 2}}));
  // D3: each later K sets only its own index.
  CHECK(parse("roundup_power2_divisions:[4:2,64:8]").roundup_power2_divisions ==
        table({{0, 2, 2}, {6, 6, 8}}));
  // Value 0 ("no rounding for this interval") is accepted in the list form by the 2.3+ parsers.
  CHECK(parse("roundup_power2_divisions:[64:0,>:4]").roundup_power2_divisions == table({{6, 15, 4}}));
  // K must be a power of two, V a power of two (or 0).
  CHECK_THROWS_AS(parse("roundup_power2_divisions:[3:4]"), InputError);
  CHECK_THROWS_AS(parse("roundup_power2_divisions:[64:3]"), InputError);
  CHECK_THROWS_AS(parse("roundup_power2_divisions:[abc:4]"), InputError);
}

TEST_CASE("parse_alloc_conf: T4 rejections name the offending key", "[quick][alloc]") {
  CHECK_THROWS_AS(parse("foo:1,bar:2"), InputError);
  CHECK_THROWS_WITH(parse("foo:1,bar:2"), Catch::Contains("foo"));
  CHECK_THROWS_AS(parse("garbage_collection_threshold:1.2"), InputError);
  CHECK_THROWS_WITH(parse("garbage_collection_threshold:1.2"),
                    Catch::Contains("garbage_collection_threshold"));
  CHECK_THROWS_AS(parse("max_split_size_mb:2"), InputError);
  CHECK_THROWS_WITH(parse("max_split_size_mb:2"), Catch::Contains("max_split_size_mb"));
  // The origin is part of the one-line message (error.h: "<where>: <problem>").
  CHECK_THROWS_WITH(parse("foo:1"), Catch::StartsWith("PYTORCH_CUDA_ALLOC_CONF"));
}

TEST_CASE("parse_alloc_conf: value ranges", "[quick][alloc]") {
  // max_split_size_mb: our version (2.5+) accepts >= 20; eb42ad6 wanted > 20 (spec §11).
  CHECK(parse("max_split_size_mb:20").max_split_size_bytes == 20 * kMiB);
  CHECK_THROWS_AS(parse("max_split_size_mb:19"), InputError);
  CHECK(parse("max_split_size_mb:200").max_split_size_bytes == 209'715'200);
  // garbage_collection_threshold must lie in (0, 1).
  CHECK(parse("garbage_collection_threshold:0.5").garbage_collection_threshold == 0.5);
  CHECK_THROWS_AS(parse("garbage_collection_threshold:0"), InputError);
  CHECK_THROWS_AS(parse("garbage_collection_threshold:1.0"), InputError);
  CHECK_THROWS_AS(parse("garbage_collection_threshold:abc"), InputError);
  CHECK_THROWS_AS(parse("max_split_size_mb:abc"), InputError);
  CHECK_THROWS_AS(parse("max_split_size_mb"), InputError);  // value missing
}

TEST_CASE("parse_alloc_conf: expandable_segments True/False", "[quick][alloc]") {
  CHECK(parse("expandable_segments:True").expandable_segments);
  CHECK_FALSE(parse("expandable_segments:False").expandable_segments);
  CHECK_THROWS_WITH(parse("expandable_segments:maybe"), Catch::Contains("expandable_segments"));
}

TEST_CASE("parse_alloc_conf: spaces are dropped by the tokeniser", "[quick][alloc]") {
  const CachingConfig c = parse(" max_split_size_mb : 128 , expandable_segments : True ");
  CHECK(c.max_split_size_bytes == 128 * kMiB);
  CHECK(c.expandable_segments);
  const CachingConfig d = parse("roundup_power2_divisions: [ 64 : 8 , > : 1 ]");
  // 64 -> index 6 (0-6 = 8), then '>' from index 6 inclusive: 6-15 = 1.
  CHECK(d.roundup_power2_divisions == table({{0, 5, 8}, {6, 15, 1}}));
}

TEST_CASE("parse_alloc_conf: several keys in one string", "[quick][alloc]") {
  const CachingConfig c = parse(
      "max_split_size_mb:40,garbage_collection_threshold:0.6,roundup_power2_divisions:2,expandable_segments:"
      "True");
  CHECK(c.max_split_size_bytes == 40 * kMiB);
  CHECK(c.garbage_collection_threshold == 0.6);
  CHECK(c.roundup_power2_divisions == table({{0, 15, 2}}));
  CHECK(c.expandable_segments);
}

TEST_CASE("parse_alloc_conf: D5 reset semantics", "[quick][alloc]") {
  const CachingConfig base = parse(
      "max_split_size_mb:100,roundup_power2_divisions:4,garbage_collection_threshold:0.5,expandable_segments:"
      "True");
  REQUIRE(base.expandable_segments);
  SECTION("max_split, the table and the GC threshold go back to defaults; expandable survives") {
    const CachingConfig c = parse("garbage_collection_threshold:0.6", base);
    CHECK(c.max_split_size_bytes == kUnlimitedSplitSize);
    CHECK(c.roundup_power2_divisions == Table{});
    CHECK(c.garbage_collection_threshold == 0.6);
    CHECK(c.expandable_segments);
  }
  SECTION("an empty re-parse resets everything but expandable_segments") {
    const CachingConfig c = parse("", base);
    CHECK(c.max_split_size_bytes == kUnlimitedSplitSize);
    CHECK(c.roundup_power2_divisions == Table{});
    CHECK(c.garbage_collection_threshold == 0.0);
    CHECK(c.expandable_segments);
  }
  SECTION("expandable_segments changes when named") {
    CHECK_FALSE(parse("expandable_segments:False", base).expandable_segments);
  }
  SECTION("T3: garbage_collection_threshold:0.5,max_split_size_mb:40 leaves the table zero") {
    const CachingConfig with_table = parse("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
    const CachingConfig c = parse("garbage_collection_threshold:0.5,max_split_size_mb:40", with_table);
    CHECK(c.roundup_power2_divisions == Table{});
    CHECK(c.max_split_size_bytes == 40 * kMiB);
    CHECK(c.garbage_collection_threshold == 0.5);
  }
}

TEST_CASE("parse_alloc_conf: keeps the string for reports", "[quick][alloc]") {
  CHECK(parse("max_split_size_mb:128").text == "max_split_size_mb:128");
}

TEST_CASE("caching_options lists the modelled keys", "[quick][alloc]") {
  bool has_max_split = false;
  bool has_divisions = false;
  for (const CachingOption& o : caching_options()) {
    has_max_split = has_max_split || o.key == "max_split_size_mb";
    has_divisions = has_divisions || o.key == "roundup_power2_divisions";
  }
  CHECK(has_max_split);
  CHECK(has_divisions);
}
