// Reading and writing traces in every supported format, behind one pair of calls.
//
// Formats:
//   pickle  - torch.cuda.memory._dump_snapshot() output (read; written as a protocol-4 pickle of plain
//             containers that PyTorch's _memory_viz.py and MemoryViz load)
//   json    - the same dict as JSON (as in the .pickle.json files, and what newer MemoryViz builds load)
//   vtrace  - the project's own line-oriented text format, documented in traces/FORMAT.md
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "traces/snapshot.h"

namespace vramsim {

class PickleValue;

enum class TraceFormat { kPickle, kJson, kVtrace };

std::string_view trace_format_name(TraceFormat format);

// Picks the format from the first bytes of the file (0x80 = pickle, '{' or '[' = JSON, "vramsim-trace" =
// vtrace). Throws InputError naming the file when it is none of them, missing or unreadable.
Snapshot load_snapshot(const std::string& path);

// From the file name: *.pickle / *.pkl -> pickle, *.json -> json, *.vtrace -> vtrace; else InputError.
TraceFormat format_from_path(const std::string& path);
void save_snapshot(const Snapshot& snapshot, const std::string& path, TraceFormat format);

// The snapshot dict <-> Snapshot. `source` names the file in error messages; errors say which key / index is
// wrong (e.g. "x.json: segments[3].blocks[0].size: expected a non-negative integer").
Snapshot snapshot_from_json(const nlohmann::json& root, std::string_view source);
// The same for a decoded pickle read in place (traces/pickle/pickle_reader.h): same checks, same messages.
Snapshot snapshot_from_pickle_value(const PickleValue& root, std::string_view source);
nlohmann::json snapshot_to_json(const Snapshot& snapshot);

// A `_dump_snapshot` pickle from memory (what load_snapshot does after sniffing); stack frames are skipped.
Snapshot snapshot_from_pickle(std::span<const std::uint8_t> bytes, std::string_view source);

// The vtrace text form (traces/FORMAT.md).
Snapshot read_vtrace(std::string_view text, std::string_view source);
std::string write_vtrace(const Snapshot& snapshot);

}  // namespace vramsim
