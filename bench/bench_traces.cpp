#include "bench/bench_traces.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>

namespace vramsim::bench {
namespace fs = std::filesystem;

namespace {

struct TraceDir {
  fs::path path;
  std::string tag;
  bool real_corpus = false;
};

std::vector<TraceDir> existing_dirs() {
  std::vector<TraceDir> dirs;
  const auto add = [&](const fs::path& p, std::string tag, bool real) {
    std::error_code ec;
    if (!p.empty() && fs::is_directory(p, ec)) {
      dirs.push_back(TraceDir{p, std::move(tag), real});
    }
  };
  add(VRAMSIM_REAL_TRACES_DIR, "real", true);
  add(VRAMSIM_SAMPLE_TRACES_DIR, "samples", false);
  if (const char* extra = std::getenv("VRAMSIM_BENCH_TRACES"); extra != nullptr && *extra != '\0') {
    add(extra, "env", false);
  }
  return dirs;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The largest recordings of the real corpus (about 5k-20k events each).
bool is_selected_real_trace(const std::string& name) {
  static constexpr std::array<std::string_view, 4> kNamed = {
      "kkaitlyn111_memory_ctx512_forward.pickle",
      "kkaitlyn111_memory_2.7b_forward.pickle",
      "cranberrii_memory_snapshot.pickle",
      "MAGMA27_memory_snapshot.pickle",
  };
  return name.find("fullstep") != std::string::npos ||
         std::find(kNamed.begin(), kNamed.end(), name) != kNamed.end();
}

std::vector<fs::directory_entry> sorted_files(const fs::path& dir) {
  std::vector<fs::directory_entry> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) {
      files.push_back(e);
    }
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  return files;
}

}  // namespace

std::vector<fs::path> trace_dirs() {
  std::vector<fs::path> out;
  for (const TraceDir& d : existing_dirs()) {
    out.push_back(d.path);
  }
  return out;
}

std::vector<TraceFile> replay_traces() {
  std::vector<TraceFile> out;
  for (const TraceDir& dir : existing_dirs()) {
    for (const fs::directory_entry& e : sorted_files(dir.path)) {
      const std::string name = e.path().filename().string();
      if (!ends_with(name, ".pickle") || (dir.real_corpus && !is_selected_real_trace(name))) {
        continue;
      }
      out.push_back(TraceFile{e.path(), dir.tag + ":" + name.substr(0, name.size() - 7), e.file_size()});
    }
  }
  return out;
}

TraceFile largest_trace_file(const std::string& suffix) {
  TraceFile best;
  for (const TraceDir& dir : existing_dirs()) {
    for (const fs::directory_entry& e : sorted_files(dir.path)) {
      const std::string name = e.path().filename().string();
      if (ends_with(name, suffix) && name != "INDEX.json" && e.file_size() > best.bytes) {
        best = TraceFile{e.path(), dir.tag + ":" + name, e.file_size()};
      }
    }
  }
  return best;
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path.string());
  }
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace vramsim::bench
