// The allocator policies vramsim knows, by name: one line each in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/i_allocator_policy.h"

namespace vramsim {

struct PolicyEntry {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<IAllocatorPolicy> (*make)(const CachingConfig& config, IDeviceMemory& device,
                                            IAllocObserver& events);
  // True when the policy must be given the whole request sequence (IAllocatorPolicy::plan) before its
  // first allocate; such a policy throws InputError when it is not.
  bool needs_plan = false;
};

const std::vector<PolicyEntry>& policy_registry();
// Throws InputError naming the known policies when `name` is not one of them.
const PolicyEntry& find_policy(std::string_view name);

}  // namespace vramsim
