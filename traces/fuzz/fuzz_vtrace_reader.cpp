// libFuzzer target for the vtrace reader: any text must either decode or throw InputError - no crash, hang,
// sanitizer report or other exception. What decodes must survive write_vtrace -> read_vtrace unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sim/core/error.h"
#include "traces/trace_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  vramsim::Snapshot snapshot;
  try {
    snapshot = vramsim::read_vtrace(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.vtrace");
  } catch (const vramsim::InputError&) {
    return 0;
  }
  const std::string written = vramsim::write_vtrace(snapshot);
  const vramsim::Snapshot again = vramsim::read_vtrace(written, "roundtrip.vtrace");
  if (vramsim::write_vtrace(again) != written) {
    __builtin_trap();
  }
  return 0;
}
