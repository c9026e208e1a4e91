#include "sim/models/layer_code.h"

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

std::vector<const LayerCode*>& registry() {
  static std::vector<const LayerCode*> codes{&torch_modules_code(), &cs336_basics_code()};
  return codes;
}

}  // namespace

ModelBuffers LayerCode::create_buffers(EagerTape&, const ModelConfig&, const TrainingOptions&) const {
  return {};
}

const LayerCode& layer_code(std::string_view name, std::string_view option) {
  for (const LayerCode* c : registry()) {
    if (c->name() == name) {
      return *c;
    }
  }
  throw InputError(fmt::format("{}: unknown model code '{}' (known: {})", option, name,
                               fmt::join(layer_code_names(), ", ")));
}

std::vector<std::string> layer_code_names() {
  std::vector<std::string> out;
  for (const LayerCode* c : registry()) {
    out.emplace_back(c->name());
  }
  return out;
}

void register_layer_code(const LayerCode& code) {
  for (const LayerCode* c : registry()) {
    SIM_ASSERT(c->name() != code.name());
  }
  registry().push_back(&code);
}

}  // namespace vramsim
