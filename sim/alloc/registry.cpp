#include "sim/alloc/registry.h"

#include <fmt/format.h>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/core/error.h"

namespace vramsim {

const std::vector<PolicyEntry>& policy_registry() {
  static const std::vector<PolicyEntry> kPolicies = {
      {"pytorch", "PyTorch's native CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF honoured)",
       [](const CachingConfig& c, IDeviceMemory& d, IAllocObserver& e) -> std::unique_ptr<IAllocatorPolicy> {
         return std::make_unique<PyTorchCachingPolicy>(c, d, e);
       },
       false},
      {"pytorch-expandable", "the native allocator with expandable_segments:True",
       [](const CachingConfig& c, IDeviceMemory& d, IAllocObserver& e) -> std::unique_ptr<IAllocatorPolicy> {
         CachingConfig expandable = c;
         expandable.expandable_segments = true;
         return std::make_unique<PyTorchCachingPolicy>(expandable, d, e);
       },
       false},
      {"no-cache", "cudaMalloc / cudaFree per tensor (driver granularity: 2 MiB above 1 MiB, else 512 B)",
       [](const CachingConfig&, IDeviceMemory& d, IAllocObserver& e) { return make_no_cache_policy(d, e); },
       false},
      {"async-pool",
       "cudaMallocAsync pool as backend:cudaMallocAsync uses it (keep all, trim on empty_cache)",
       [](const CachingConfig&, IDeviceMemory& d, IAllocObserver& e) { return make_async_pool_policy(d, e); },
       false},
      {"vmm-stitch", "GMLake-style virtual memory stitching of free 2 MiB-granular physical blocks",
       [](const CachingConfig&, IDeviceMemory& d, IAllocObserver& e) { return make_vmm_stitch_policy(d, e); },
       false},
      {"buddy", "binary buddy allocator over 1 GiB cudaMalloc arenas, 512 B minimum block",
       [](const CachingConfig&, IDeviceMemory& d, IAllocObserver& e) { return make_buddy_policy(d, e); },
       false},
      {"offline-optimal", "static planner: whole sequence known, greedy by size over lifetimes, one arena",
       [](const CachingConfig&, IDeviceMemory& d, IAllocObserver& e) {
         return make_offline_optimal_policy(d, e);
       },
       true},
  };
  return kPolicies;
}

const PolicyEntry& find_policy(std::string_view name) {
  std::string known;
  for (const PolicyEntry& p : policy_registry()) {
    if (p.name == name) {
      return p;
    }
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  throw InputError(fmt::format("--policy: unknown policy '{}' (known: {})", name, known));
}

}  // namespace vramsim
