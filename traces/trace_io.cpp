// Files <-> Snapshot: format sniffing, reading, writing (contracts in trace_io.h).
//
// Besides the three formats, load_snapshot reads the `alloc_data` JSON that the late-2022 / early-2023
// torch.cuda._memory_viz trace_plot pages embed (zdevito_*.alloc_data.json in shared/traces/real): either the
// bare dict {actions, elements_size, initially_allocated?, ...} or that dict under the key "alloc_data".
// `actions` lists element ids; an id that is not live is allocated, a live one is freed (so the first
// occurrence is the alloc and the second the free), ids in `initially_allocated` start live. It holds only
// requested sizes and order, so the Snapshot gets:
//   * device 0, stream 0, time 0, has_final_state = false, no segments;
//   * synthetic addresses: element i lives at kAllocDataBase + the sizes of elements 0..i-1, each rounded up
//     to 512 bytes, so live elements never overlap and every id has one fixed address;
//   * one `alloc` per allocation, and per free the `free_requested` + `free_completed` pair that PyTorch
//     records for a free without record_stream;
//   * the elements in `initially_allocated` as `alloc` events at the start (the trace starts empty).
// Element stack frames and categories are ignored.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/stat.h>
#endif

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "traces/json_input.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

using nlohmann::json;

constexpr Bytes kAllocDataBase = Bytes{1} << 32;  // synthetic address of alloc_data element 0
constexpr Bytes kAllocDataAlign = 512;
constexpr std::uint64_t kSizeLimit = std::uint64_t{1} << 60;
constexpr std::uint64_t kAddressLimit = std::uint64_t{1} << 63;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// A file's bytes: a regular file is mapped read-only (a trace of hundreds of MB is then read from the page
// cache in place, without copying it into fresh memory); anything else (a pipe, /dev/stdin) is read.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      throw InputError(fmt::format("{}: is a directory, not a trace file", path));
    }
#if defined(__linux__)
    const FilePtr file(std::fopen(path.c_str(), "rb"));
    if (!file) {
      throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    }
    struct stat info {};
    if (fstat(fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
      const auto size = static_cast<std::size_t>(info.st_size);
      check_input_size(path, size, kMaxTraceBytes);
      void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fileno(file.get()), 0);
      if (p != MAP_FAILED) {
        mapped_ = p;
        view_ = std::string_view(static_cast<const char*>(p), size);
        return;
      }
    }
#endif
    // A pipe, a device (/dev/stdin, /dev/zero) or an unmappable file: read, at most the trace limit.
    data_ = read_input_file(path, "trace file", kMaxTraceBytes);
    view_ = data_;
  }
  ~FileBytes() {
#if defined(__linux__)
    if (mapped_ != nullptr) {
      munmap(mapped_, view_.size());
    }
#endif
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  std::string_view view() const { return view_; }

 private:
  [[maybe_unused]] void* mapped_ = nullptr;  // Linux only: what mmap returned
  std::string data_;
  std::string_view view_;
};

void write_file(const std::string& path, std::string_view data) {
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (!file) {
    throw InputError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  }
  const bool wrote = std::fwrite(data.data(), 1, data.size(), file.get()) == data.size();
  const bool closed = std::fclose(file.release()) == 0;
  if (!wrote || !closed) {
    throw InputError(fmt::format("{}: write error: {}", path, std::strerror(errno)));
  }
}

bool is_alloc_data(const json& root) {
  if (!root.is_object() || root.contains("segments")) {
    return false;
  }
  return root.contains("alloc_data") || (root.contains("actions") && root.contains("elements_size"));
}

// Reads a list of non-negative integers below `limit`; `where` names the list and `expected` its items in
// messages.
std::vector<std::uint64_t> read_uint_list(const json& value, const std::string& source,
                                          const std::string& where, std::uint64_t limit,
                                          std::string_view expected) {
  if (!value.is_array()) {
    throw InputError(fmt::format("{}: {}: expected a list, got {}", source, where, value.type_name()));
  }
  std::vector<std::uint64_t> out;
  out.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    const bool ok = item.is_number_unsigned() || (item.is_number_integer() && item.get<std::int64_t>() >= 0);
    if (!ok || item.get<std::uint64_t>() >= limit) {
      throw InputError(fmt::format("{}: {}[{}]: expected {} below {}, got {}", source, where, i, expected,
                                   limit, item.is_number_integer() ? item.dump() : item.type_name()));
    }
    out.push_back(item.get<std::uint64_t>());
  }
  return out;
}

Snapshot snapshot_from_alloc_data(const json& root, const std::string& source) {
  const bool nested = root.contains("alloc_data");
  const json& data = nested ? root.at("alloc_data") : root;
  const std::string prefix = nested ? "alloc_data" : "";
  const auto path = [&prefix](std::string_view key) {
    return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
  };
  if (!data.is_object()) {
    throw InputError(fmt::format("{}: alloc_data: expected an object, got {}", source, data.type_name()));
  }
  for (const char* key : {"actions", "elements_size"}) {
    if (!data.contains(key)) {
      throw InputError(
          fmt::format("{}: {}: missing key \"{}\"", source, prefix.empty() ? "top level" : prefix, key));
    }
  }
  const std::vector<std::uint64_t> sizes =
      read_uint_list(data.at("elements_size"), source, path("elements_size"), kSizeLimit, "a size in bytes");
  const std::vector<std::uint64_t> actions =
      read_uint_list(data.at("actions"), source, path("actions"), sizes.size(), "an element id");
  std::vector<std::uint64_t> initial;
  if (const auto it = data.find("initially_allocated"); it != data.end() && !it->is_null()) {
    initial = read_uint_list(*it, source, path("initially_allocated"), sizes.size(), "an element id");
  }

  std::vector<Bytes> address(sizes.size());
  Bytes next = kAllocDataBase;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    address[i] = next;
    next += (std::max<Bytes>(sizes[i], 1) + kAllocDataAlign - 1) / kAllocDataAlign * kAllocDataAlign;
    if (next >= kAddressLimit) {
      throw InputError(
          fmt::format("{}: {}: the elements add up to more than 2^63 bytes", source, path("elements_size")));
    }
  }

  Snapshot snapshot;
  snapshot.source = source;
  snapshot.has_final_state = false;
  std::vector<TraceEvent>& events = snapshot.device_traces.emplace_back().events;
  events.reserve(initial.size() + actions.size() * 2);
  std::vector<bool> live(sizes.size(), false);
  const auto toggle = [&](std::uint64_t id) {
    TraceEvent event;
    event.addr = address[id];
    event.size_bytes = sizes[id];
    if (!live[id]) {
      event.action = TraceAction::kAlloc;
      events.push_back(event);
    } else {
      event.action = TraceAction::kFreeRequested;
      events.push_back(event);
      event.action = TraceAction::kFreeCompleted;
      events.push_back(event);
    }
    live[id] = !live[id];
  };
  for (const std::uint64_t id : initial) {
    if (!live[id]) {
      toggle(id);
    }
  }
  for (const std::uint64_t id : actions) {
    toggle(id);
  }
  return snapshot;
}

Snapshot snapshot_from_any_json(const json& root, const std::string& source) {
  return is_alloc_data(root) ? snapshot_from_alloc_data(root, source) : snapshot_from_json(root, source);
}

bool ends_with_ci(std::string_view text, std::string_view suffix) {
  if (text.size() < suffix.size()) {
    return false;
  }
  return std::equal(suffix.begin(), suffix.end(), text.end() - static_cast<std::ptrdiff_t>(suffix.size()),
                    [](char a, char b) {
                      return std::tolower(static_cast<unsigned char>(a)) ==
                             std::tolower(static_cast<unsigned char>(b));
                    });
}

}  // namespace

std::string_view trace_format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::kPickle:
      return "pickle";
    case TraceFormat::kJson:
      return "json";
    case TraceFormat::kVtrace:
      return "vtrace";
  }
  return "?";
}

Snapshot snapshot_from_pickle(std::span<const std::uint8_t> bytes, std::string_view source) {
  // Stack frames are never read: skipping them keeps a 3 MB snapshot from expanding into 110 MB of JSON,
  // and the snapshot is read in place, without building its JSON form.
  static constexpr std::string_view kUnreadKeys[] = {"frames"};
  const PickleDocument document(bytes, source, kUnreadKeys);
  const PickleValue root = document.root();
  const bool alloc_data = root.is_object() && !root.find("segments") &&
                          (root.find("alloc_data") || (root.find("actions") && root.find("elements_size")));
  if (alloc_data) {  // the old trace_plot form, read through its JSON (such files are small)
    return snapshot_from_alloc_data(document.to_json(), std::string(source));
  }
  return snapshot_from_pickle_value(root, source);
}

Snapshot load_snapshot(const std::string& path) {
  const FileBytes file(path);
  const std::string_view data = file.view();
  if (!data.empty() && static_cast<unsigned char>(data[0]) == 0x80) {  // pickle PROTO opcode
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(data.data());
    return snapshot_from_pickle(std::span<const std::uint8_t>(bytes, data.size()), path);
  }
  if (data.starts_with("vramsim-trace")) {
    return read_vtrace(data, path);
  }
  std::size_t first = data.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // UTF-8 byte order mark
  while (first < data.size() && std::isspace(static_cast<unsigned char>(data[first]))) {
    ++first;
  }
  if (first < data.size() && (data[first] == '{' || data[first] == '[')) {
    const json root = parse_json_input(data, path, kMaxTraceJsonMemory);
    return snapshot_from_any_json(root, path);
  }
  throw InputError(fmt::format("{}: not a PyTorch snapshot (pickle or JSON) or vramsim trace", path));
}

TraceFormat format_from_path(const std::string& path) {
  if (ends_with_ci(path, ".pickle") || ends_with_ci(path, ".pkl")) {
    return TraceFormat::kPickle;
  }
  if (ends_with_ci(path, ".json")) {
    return TraceFormat::kJson;
  }
  if (ends_with_ci(path, ".vtrace")) {
    return TraceFormat::kVtrace;
  }
  throw InputError(fmt::format(
      "{}: cannot tell the trace format from the file name (expected .pickle, .pkl, .json or .vtrace)",
      path));
}

void save_snapshot(const Snapshot& snapshot, const std::string& path, TraceFormat format) {
  switch (format) {
    case TraceFormat::kPickle: {
      // PyTorch pickles segment_pool_id as a tuple (memory_snapshot.cpp); Python code compares it with
      // tuples such as (0, 0), which a list never equals.
      static constexpr std::string_view kTupleKeys[] = {"segment_pool_id"};
      const std::vector<std::uint8_t> bytes = write_pickle(snapshot_to_json(snapshot), kTupleKeys);
      write_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      return;
    }
    case TraceFormat::kJson: {
      // Compact (the files get large); strings that are not valid UTF-8 are written with U+FFFD, not thrown
      // on.
      std::string text = snapshot_to_json(snapshot).dump(-1, ' ', false, json::error_handler_t::replace);
      text += '\n';
      write_file(path, text);
      return;
    }
    case TraceFormat::kVtrace:
      write_file(path, write_vtrace(snapshot));
      return;
  }
}

}  // namespace vramsim
