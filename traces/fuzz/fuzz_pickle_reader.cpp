// libFuzzer target for the pickle reader: what load_snapshot does (PickleDocument with frames skipped, read
// in place into a Snapshot), then read_pickle of everything. Any input must either decode or throw InputError
// - no crash, hang, sanitizer report or other exception. What decodes to a modest tree must also survive
// write_pickle -> read_pickle unchanged, which checks the writer against the reader on every shape the fuzzer
// reaches. (Trees near the reader's expansion bound, 32 MiB + 256 bytes per input byte of output, skip that
// check: it would take seconds per input under the sanitizers.)
#include <cstddef>
#include <cstdint>
#include <span>

#include "sim/core/error.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

namespace {

constexpr std::size_t kMaxRoundtripValues = 100'000;

// Counts JSON values, stopping early once past `limit`.
std::size_t count_values(const nlohmann::json& value, std::size_t limit) {
  std::size_t count = 1;
  if (value.is_structured()) {
    for (const auto& child : value) {
      count += count_values(child, limit - count);
      if (count > limit) {
        break;
      }
    }
  }
  return count;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // What load_snapshot decodes: frames not kept, read in place.
  static constexpr std::string_view kFrames[] = {"frames"};
  try {
    const vramsim::PickleDocument document(std::span<const std::uint8_t>(data, size), "fuzz.pickle", kFrames);
    (void)vramsim::snapshot_from_pickle_value(document.root(), "fuzz.pickle");
  } catch (const vramsim::InputError&) {
  }
  nlohmann::json value;
  try {
    value = vramsim::read_pickle(std::span<const std::uint8_t>(data, size), "fuzz.pickle");
  } catch (const vramsim::InputError&) {
    return 0;
  }
  if (count_values(value, kMaxRoundtripValues) > kMaxRoundtripValues) {
    return 0;
  }
  const std::vector<std::uint8_t> encoded = vramsim::write_pickle(value);
  const nlohmann::json decoded = vramsim::read_pickle(encoded, "roundtrip.pickle");
  // dump() compares NaN (written as null) sensibly and throws if a decoded str were not valid UTF-8.
  if (decoded.dump() != value.dump()) {
    __builtin_trap();
  }
  return 0;
}
