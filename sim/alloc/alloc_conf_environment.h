// PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF: which of PyTorch's two allocator-config parsers reads which
// variable, and a CachingConfig parsed from the pair (the parsers themselves are in caching_config.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sim/alloc/caching_config.h"

namespace vramsim {

// The same with the generic keys read from one string and the CUDA keys from another (the two environment
// variables below).
CachingConfig parse_alloc_conf_pair(std::string_view generic, std::string_view generic_origin,
                                    std::string_view cuda, std::string_view cuda_origin,
                                    const CachingConfig& base = {});

// Which environment variable each parser reads (PyTorch 2.9+): AcceleratorAllocatorConfig::instance() reads
// PYTORCH_ALLOC_CONF, else the deprecated PYTORCH_CUDA_ALLOC_CONF; CUDAAllocatorConfig::instance() reads
// PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF ("keep the parsing order ... stable"). With both set, the
// generic settings come from PYTORCH_ALLOC_CONF and the CUDA ones from PYTORCH_CUDA_ALLOC_CONF.
struct AllocConfEnvironment {
  std::string generic;
  std::string generic_origin;  // the variable's name, for messages
  std::string cuda;
  std::string cuda_origin;
};
// nullopt when neither variable is set (pass std::getenv's results). Releases before 2.9 read
// PYTORCH_CUDA_ALLOC_CONF only (TorchRule::kAllocConfEnvironment): PYTORCH_ALLOC_CONF alone is then nullopt.
std::optional<AllocConfEnvironment> alloc_conf_environment(const char* alloc_conf,
                                                           const char* cuda_alloc_conf,
                                                           TorchVersion version = kNewestModelledTorch);
CachingConfig parse_alloc_conf_environment(const AllocConfEnvironment& e, const CachingConfig& base = {});

}  // namespace vramsim
