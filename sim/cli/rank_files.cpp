#include "sim/cli/rank_files.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim::cli {

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) != 0 &&
        std::isdigit(static_cast<unsigned char>(b[j])) != 0) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie])) != 0) {
        ++ie;
      }
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je])) != 0) {
        ++je;
      }
      std::string_view x(a.data() + i, ie - i), y(b.data() + j, je - j);
      while (x.size() > 1 && x.front() == '0') {
        x.remove_prefix(1);
      }
      while (y.size() > 1 && y.front() == '0') {
        y.remove_prefix(1);
      }
      if (x.size() != y.size() || x != y) {
        return x.size() != y.size() ? x.size() < y.size() : x < y;
      }
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) {
      return a[i] < b[j];
    }
    ++i;
    ++j;
  }
  if (a.size() - i != b.size() - j) {
    return a.size() - i < b.size() - j;
  }
  // Equal as numbers ("rank01" and "rank1"): byte order decides, so that std::sort's result does not
  // depend on the order the directory listing gave (a strict weak ordering needs a tie to be equality).
  return a < b;
}

std::vector<std::string> rank_files(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const std::string& g : given) {
    std::error_code ec;
    if (!std::filesystem::is_directory(g, ec)) {
      out.push_back(g);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(g, ec)) {
      const std::string ext = entry.path().extension().string();
      if (entry.is_regular_file(ec) && (ext == ".pickle" || ext == ".json" || ext == ".vtrace")) {
        found.push_back(entry.path().string());
      }
    }
    if (found.empty()) {
      throw InputError(fmt::format("{}: a folder with no .pickle, .json or .vtrace file", g));
    }
    std::sort(found.begin(), found.end(), natural_less);
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

}  // namespace vramsim::cli
