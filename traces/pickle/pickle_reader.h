// A data-only decoder for the pickle subset that torch.cuda.memory._dump_snapshot() writes
// (protocols 2-5 of plain containers: dict, list, tuple, str, int incl. LONG1 big ints up to 64 bits, float,
// bool, None, memo ops, FRAME).
//
// Contract: it never imports, calls or constructs anything named in the input. Opcodes that would
// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID, ...) and every opcode outside the
// subset are rejected with InputError("<name>: byte <offset>: <problem>"). Truncated or corrupt input, memo
// references to unknown slots, stack underflow, ints that do not fit 64 bits and nesting deeper than
// kMaxPickleDepth are errors too. It never crashes, hangs or allocates more than a small multiple of the
// input size.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vramsim {

inline constexpr int kMaxPickleDepth = 256;

// Decodes `data` into a JSON value: dict -> object (keys must be str or int; ints become their decimal
// text), list/tuple -> array, str -> string, int -> number (signed or unsigned 64-bit), float -> number,
// bool -> bool, None -> null. `name` is the file name used in error messages.
nlohmann::json read_pickle(std::span<const std::uint8_t> data, std::string_view name);

// Encodes a JSON value as a protocol-4 pickle of plain containers that PyTorch's tools and MemoryViz load
// (objects -> dict, arrays -> list, strings -> str, numbers -> int/float, bool, null -> None).
std::vector<std::uint8_t> write_pickle(const nlohmann::json& value);

}  // namespace vramsim
