#include "sim/alloc/registry.h"

#include <fmt/format.h>

#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/core/error.h"

namespace vramsim {

const std::vector<PolicyEntry>& policy_registry() {
  static const std::vector<PolicyEntry> kPolicies = {
      {"pytorch", "PyTorch's native CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF honoured)",
       [](const CachingConfig& c, IDeviceMemory& d, IAllocObserver& e) -> std::unique_ptr<IAllocatorPolicy> {
         return std::make_unique<PyTorchCachingPolicy>(c, d, e);
       }},
      {"pytorch-expandable", "the native allocator with expandable_segments:True",
       [](const CachingConfig& c, IDeviceMemory& d, IAllocObserver& e) -> std::unique_ptr<IAllocatorPolicy> {
         CachingConfig expandable = c;
         expandable.expandable_segments = true;
         return std::make_unique<PyTorchCachingPolicy>(expandable, d, e);
       }},
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
