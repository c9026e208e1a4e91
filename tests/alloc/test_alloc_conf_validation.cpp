// What PyTorch's allocator-config parsers refuse, vramsim refuses with the same reason (issue 43). Expected
// messages are PyTorch's own, from c10/core/AllocatorConfig.cpp (AcceleratorAllocatorConfig::parseArgs and
// its parse* helpers, ConfigTokenizer in AllocatorConfig.h) and c10/cuda/CUDAAllocatorConfig.cpp
// (CUDAAllocatorConfig::parseArgs, parsePinnedNumRegisterThreads, parsePerProcessMemoryFraction, ...),
// PyTorch main of 2025-2026; the accepted strings include those of c10/test/core/AllocatorConfig_test.cpp
// (AllocatorConfigTest.allocator_config_test).
#include <catch2/catch.hpp>

#include <string>

#include "sim/alloc/alloc_conf_environment.h"
#include "sim/alloc/caching_config.h"
#include "sim/core/error.h"

using namespace vramsim;

namespace {

std::string refusal(std::string_view conf) {
  try {
    parse_alloc_conf(conf, "--alloc-conf");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("alloc-conf: pinned_num_register_threads is a power of two no larger than 128", "[quick][alloc]") {
  // parsePinnedNumRegisterThreads: llvm::isPowerOf2_64 (0 is not one), then <= pinned_max_register_threads()
  CHECK(refusal("pinned_num_register_threads:1024") ==
        "--alloc-conf: pinned_num_register_threads: Number of register threads should be less than or equal "
        "to 128, got 1024");
  CHECK(refusal("pinned_num_register_threads:0") ==
        "--alloc-conf: pinned_num_register_threads: Number of register threads has to be power of 2, got 0");
  CHECK(refusal("pinned_num_register_threads:3") ==
        "--alloc-conf: pinned_num_register_threads: Number of register threads has to be power of 2, got 3");
  CHECK(refusal("pinned_num_register_threads:256").find("less than or equal to 128, got 256") !=
        std::string::npos);
  for (const char* ok : {"1", "2", "8", "64", "128"}) {
    CHECK(refusal(std::string("pinned_num_register_threads:") + ok) == "(accepted)");
  }
}

TEST_CASE("alloc-conf: the generic keys' ranges and PyTorch's messages", "[quick][alloc]") {
  // parseMaxSplitSize / parseMaxNonSplitRoundingSize: >= kLargeBuffer / kMB = 20
  CHECK(refusal("max_split_size_mb:19") ==
        "--alloc-conf: max_split_size_mb: CachingAllocator option max_split_size_mb too small, must be >= 20 "
        "(got 19)");
  CHECK(refusal("max_non_split_rounding_mb:10")
            .find("option max_non_split_rounding_mb too small, must be >= 20") != std::string::npos);
  // larger values are clamped to SIZE_MAX / kMB, not refused
  CHECK(parse_alloc_conf("max_split_size_mb:18446744073709551615", "x").max_split_size_bytes ==
        (~std::uint64_t{0} / kMiB) * kMiB);
  // parseGarbageCollectionThreshold: the open interval (0, 1)
  CHECK(refusal("garbage_collection_threshold:1.0") ==
        "--alloc-conf: garbage_collection_threshold: garbage_collect_threshold is invalid, set it in (0.0, "
        "1.0) (got 1)");
  CHECK(refusal("garbage_collection_threshold:0").find("set it in (0.0, 1.0)") != std::string::npos);
  CHECK(refusal("garbage_collection_threshold:nan").find("set it in (0.0, 1.0)") != std::string::npos);
  // parseRoundUpPower2Divisions: the single form needs a power of two, the list form allows 0
  CHECK(refusal("roundup_power2_divisions:3") ==
        "--alloc-conf: roundup_power2_divisions: For roundups, the divisions has to be power of 2 (got 3)");
  CHECK(refusal("roundup_power2_divisions:[64:3]") ==
        "--alloc-conf: roundup_power2_divisions: For roundups, the divisions has to be power of 2 or 0 to "
        "disable roundup (got 3)");
  CHECK(refusal("roundup_power2_divisions:[96:4]") ==
        "--alloc-conf: roundup_power2_divisions: For roundups, the intervals have to be power of 2 (got 96)");
  CHECK(refusal("roundup_power2_divisions:[64:4,>:2") ==
        "--alloc-conf: roundup_power2_divisions: value missing (PyTorch: Index out of bounds in "
        "ConfigTokenizer)");
  // ConfigTokenizer::toBool: "True" or "False", nothing else (the index is the token's)
  CHECK(refusal("expandable_segments:true") ==
        "--alloc-conf: expandable_segments: Expected 'True' or 'False' at index 2 in ConfigTokenizer but got "
        "'true'");
  CHECK(refusal("max_split_size_mb:40,release_lock_on_cudamalloc:1").find("at index 6") != std::string::npos);
}

TEST_CASE("alloc-conf: the CUDA keys, unknown keys and the backend", "[quick][alloc]") {
  CHECK(
      refusal("foo:1") ==
      "--alloc-conf: foo: Unrecognized key 'foo' in CUDA allocator config. (see `vramsim replay --help` for "
      "the list)");
  CHECK(refusal("backend:jemalloc") ==
        "--alloc-conf: backend: Unknown allocator backend, options are native and cudaMallocAsync (got "
        "'jemalloc')");
  CHECK(refusal("pinned_reserve_segment_size_mb:0") ==
        "--alloc-conf: pinned_reserve_segment_size_mb: Pinned reserve segment size has to be greater than 0");
  // parsePerProcessMemoryFraction: the closed interval [0, 1]
  CHECK(refusal("per_process_memory_fraction:1.5") ==
        "--alloc-conf: per_process_memory_fraction: per_process_memory_fraction is invalid, set it in [0.0, "
        "1.0] (got 1.5)");
  // ConfigTokenizer::toSizeT is std::stoull: a leading number is read, a missing one refused
  CHECK(
      refusal("pinned_num_register_threads:eight") ==
      "--alloc-conf: pinned_num_register_threads: 'eight' is not an integer (std::stoull: invalid_argument)");
  CHECK(refusal("pinned_num_register_threads:8threads") == "(accepted)");
  CHECK(parse_alloc_conf("max_split_size_mb:40MB", "x").max_split_size_bytes == 40 * kMiB);
}

TEST_CASE("alloc-conf: AllocatorConfigTest.allocator_config_test's strings are accepted", "[quick][alloc]") {
  // c10/test/core/AllocatorConfig_test.cpp (the CUDA parser would refuse its device-neutral test-only keys,
  // so only the keys both parsers know are kept)
  const CachingConfig c = parse_alloc_conf(
      "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,"
      "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,"
      "pinned_num_register_threads:8,pinned_use_background_threads:True",
      "x");
  CHECK(c.max_split_size_bytes == 40 * kMiB);
  CHECK(c.max_non_split_rounding_bytes == 30 * kMiB);
  CHECK(c.garbage_collection_threshold == 0.5);
  CHECK(c.expandable_segments);
  CHECK(parse_alloc_conf("backend:native,expandable_segments:False", "x").expandable_segments == false);
}

TEST_CASE("alloc-conf: PYTORCH_ALLOC_CONF beside PYTORCH_CUDA_ALLOC_CONF", "[quick][alloc]") {
  // AcceleratorAllocatorConfig::instance() reads PYTORCH_ALLOC_CONF first; CUDAAllocatorConfig::instance()
  // reads PYTORCH_CUDA_ALLOC_CONF first.
  CHECK_FALSE(alloc_conf_environment(nullptr, nullptr));
  const auto only_new = alloc_conf_environment("expandable_segments:True", nullptr);
  REQUIRE(only_new);
  CHECK(only_new->generic_origin == "PYTORCH_ALLOC_CONF");
  CHECK(only_new->cuda_origin == "PYTORCH_ALLOC_CONF");
  CHECK(parse_alloc_conf_environment(*only_new).expandable_segments);
  const auto only_old = alloc_conf_environment(nullptr, "max_split_size_mb:40");
  REQUIRE(only_old);
  CHECK(parse_alloc_conf_environment(*only_old).max_split_size_bytes == 40 * kMiB);
  // both: the generic settings from PYTORCH_ALLOC_CONF (the other's max_split_size_mb is not read), the CUDA
  // ones from PYTORCH_CUDA_ALLOC_CONF (the other's per_process_memory_fraction is not read)
  const auto both = alloc_conf_environment("expandable_segments:True,per_process_memory_fraction:0.5",
                                           "max_split_size_mb:40,per_process_memory_fraction:0.25");
  REQUIRE(both);
  const CachingConfig c = parse_alloc_conf_environment(*both);
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size_bytes == kUnlimitedSplitSize);
  CHECK(c.per_process_memory_fraction == 0.25);
  // each variable's errors name it
  CHECK_THROWS_WITH(parse_alloc_conf_environment(*alloc_conf_environment("max_split_size_mb:2", nullptr)),
                    Catch::StartsWith("PYTORCH_ALLOC_CONF: max_split_size_mb: CachingAllocator option"));
  CHECK_THROWS_WITH(
      parse_alloc_conf_environment(
          *alloc_conf_environment("expandable_segments:True", "pinned_num_register_threads:3")),
      Catch::StartsWith(
          "PYTORCH_CUDA_ALLOC_CONF: pinned_num_register_threads: Number of register threads has"));
}
