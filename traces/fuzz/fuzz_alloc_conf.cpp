// libFuzzer target for the --alloc-conf parser (PYTORCH_CUDA_ALLOC_CONF syntax): any text must either give
// settings or throw InputError - no crash, hang, sanitizer report or other exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/alloc/caching_config.h"
#include "sim/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)vramsim::parse_alloc_conf(std::string_view(reinterpret_cast<const char*>(data), size), "--alloc-conf");
  } catch (const vramsim::InputError&) {
  }
  return 0;
}
