// What a command computed, for a caller that wants objects rather than printed text (the Python package,
// python/): the document `--json` prints, and the pages `--html` / `--perfetto` would write, made on request.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace vramsim::cli {

struct CommandResult {
  nlohmann::ordered_json json;        // byte for byte what --json prints (through json_text)
  std::function<std::string()> html;  // the --html page; throws InputError where the command cannot draw it
  std::function<std::string()> perfetto;  // the --perfetto JSON (with its final newline, as the file holds)
  std::function<std::string()>
      summary;                        // replay: torch.cuda.memory_summary()'s table (--summary); else unset
  std::function<std::string()> text;  // the report the command prints without --json
};

// What `print` wrote on stdout (through stdio: fmt::print), captured in memory rather than printed (glibc's
// `stdout` points at a memory stream for the call). Not thread-safe: one capture at a time in a process.
std::string capture_stdout(const std::function<void()>& print);

}  // namespace vramsim::cli
