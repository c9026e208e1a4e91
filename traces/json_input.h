// Parsing a JSON input in bounded memory: the one place vramsim turns user-supplied JSON text into a
// document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sim/core/error.h"

namespace vramsim {

// What a parsed JSON trace may take in memory at most (a document's values cost 16 to 100 bytes each, so a
// 400 MB array of small numbers would take 5 GB).
inline constexpr std::size_t kMaxTraceJsonMemory = std::size_t{4} << 30;
// What any other JSON input (config.json, a markers file, a merge part) may take.
inline constexpr std::size_t kMaxSmallJsonMemory = std::size_t{256} << 20;

// `text` parsed, after a first pass that builds nothing and estimates what the document will take in memory
// (an upper bound of nlohmann::json's own layout): over `memory_limit`, it is refused before anything is
// built. Throws InputError "<source>: byte N: invalid JSON: <reason>" for bad JSON and "<source>: ...: not
// read" for one too large. `byte_base` is added to N: where `text` begins in its file (a safetensors
// header begins at byte 8).
nlohmann::json parse_json_input(std::string_view text, std::string_view source, std::size_t memory_limit,
                                std::size_t byte_base = 0);

// The largest magnitude of a number check_json_values() lets through (2^60, as for a trace's sizes).
inline constexpr std::int64_t kMaxJsonNumber = std::int64_t{1} << 60;

// Every value of a document that vramsim wrote and reads back (a merge part): a string holds no control
// character (C0, DEL or C1: an ANSI escape would reach the terminal raw), a number is an integer of magnitude
// at most 2^60 or a finite float of the same magnitude. Throws InputError "<source>: <JSON path>: <problem>".
// Walks the document without recursion, so any depth is fine.
void check_json_values(const nlohmann::json& root, std::string_view source);

// An error in one value of a JSON input that does not know its file; the reader that does adds the name.
class JsonValueError : public InputError {
 public:
  using InputError::InputError;
};

// j[key] as an integer in lo..hi: a float (even 3.0), a string or a number outside the range is a
// JsonValueError "<key>: expected an integer in lo..hi, got <value>".
std::int64_t json_int(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi);
// The same for an element of an array.
std::int64_t json_int_at(const nlohmann::json& j, std::size_t index, std::int64_t lo, std::int64_t hi);

}  // namespace vramsim
