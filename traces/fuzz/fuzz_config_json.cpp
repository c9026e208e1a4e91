// libFuzzer target for the config.json reader (`--model FILE.json`): the bounded JSON parser, then the model
// config with its range checks. Any input must either give a model or throw InputError - no crash, hang,
// sanitizer report or other exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/core/error.h"
#include "sim/models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)vramsim::model_from_hf_config_json(std::string_view(reinterpret_cast<const char*>(data), size),
                                             "fuzz.json");
  } catch (const vramsim::InputError&) {
  }
  return 0;
}
