// Reading what the user names as input: the one place a file, pipe or device enters vramsim, with a bound.
#pragma once

#include <cstddef>
#include <string>

namespace vramsim {

// The most bytes read from one input: a trace (the pickle reader's own limit, 4 GiB).
inline constexpr std::size_t kMaxTraceBytes = std::size_t{4} << 30;
// The most bytes read from any other input: a model's config.json, a histogram, a markers file, a merge part
// (the largest real ones are a few MB).
inline constexpr std::size_t kMaxSmallInputBytes = std::size_t{256} << 20;

// The whole of `path` (a regular file, a pipe, a device such as /dev/stdin) as bytes. Reads at most `limit`
// bytes: a regular file larger than that is refused before it is read, and anything else is read in chunks
// and refused as soon as it goes past the limit, so /dev/zero or an endless pipe end in bounded time and
// memory. Throws InputError "<path>: <problem>" for a missing, unreadable or oversized input and for a
// directory; `what` names the kind of file in those messages ("trace file", "model config").
std::string read_input_file(const std::string& path, const char* what, std::size_t limit);

// The same check for an input that is mapped rather than read: throws InputError naming `path` when `size`
// (from fstat) is over `limit`.
void check_input_size(const std::string& path, std::size_t size, std::size_t limit);

}  // namespace vramsim
