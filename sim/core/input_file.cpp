#include "sim/core/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

void check_input_size(const std::string& path, std::size_t size, std::size_t limit) {
  if (size > limit) {
    throw InputError(fmt::format(
        "{}: {} bytes, more than the {} bytes vramsim reads from one input: not read", path, size, limit));
  }
}

std::string read_input_file(const std::string& path, const char* what, std::size_t limit) {
  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw InputError(fmt::format("{}: cannot open the {}: {}", path, what, std::strerror(errno)));
  }
  struct stat info {};
  if (fstat(fileno(file.get()), &info) != 0) {
    throw InputError(fmt::format("{}: cannot read the {}: {}", path, what, std::strerror(errno)));
  }
  if (S_ISDIR(info.st_mode)) {
    throw InputError(fmt::format("{}: is a directory, not a {}", path, what));
  }
  std::string data;
  if (S_ISREG(info.st_mode)) {
    check_input_size(path, static_cast<std::size_t>(info.st_size), limit);
    data.reserve(static_cast<std::size_t>(info.st_size));
  }
  // Read in chunks, the limit checked before each chunk is kept: a regular file that grows while it is read,
  // a pipe or a device never holds more than `limit` bytes here.
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    if (n > limit - data.size()) {
      throw InputError(fmt::format("{}: more than {} bytes, the most vramsim reads from one input: not read",
                                   path, limit));
    }
    data.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    throw InputError(fmt::format("{}: read error: {}", path, std::strerror(errno)));
  }
  return data;
}

}  // namespace vramsim
