// The vtrace reader's fast road for the common event line (issue 40: replay at the speed of reading); the
// general road (vtrace_reader.cpp) reads every line this one declines, and words every error.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "traces/trace_io.h"
#include "traces/utf8.h"
#include "traces/vtrace_reader.h"

namespace vramsim::vtrace {

bool VtraceReader::read_event_fast(std::string_view line) {
  const char* p = line.data();
  const char* const end = p + line.size();
  std::uint64_t device = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::int64_t time_ns = 0;
  const std::uint64_t device_limit = declared_devices_ ? *declared_devices_ : kMaxDevices;
  if (!fast_uint(p, end, device) || device >= device_limit || !skip_separators(p, end)) {
    return false;
  }
  const std::optional<TraceAction> action = fast_action(p, end);
  if (!action || !skip_separators(p, end) || !fast_uint(p, end, addr) || addr >= kAddressLimit ||
      !skip_separators(p, end) || !fast_uint(p, end, size) || size >= kSizeLimit ||
      !skip_separators(p, end) || !fast_uint(p, end, stream) || !skip_separators(p, end) ||
      !fast_int(p, end, time_ns)) {
    return false;
  }
  TraceEvent event;
  event.action = *action;
  event.addr = addr;
  event.size_bytes = size;
  event.stream = stream;
  event.time_ns = time_ns;
  while (p != end && separates(*p)) {
    ++p;
  }
  if (p != end && !fast_event_fields(p, end, event)) {
    return false;
  }
  close_segment();
  body_started_ = true;
  if (device >= out_.device_traces.size()) {
    out_.device_traces.resize(static_cast<std::size_t>(device) + 1);
    // An event line takes at least 16 bytes ("0 alloc 0 0 0 0\n"): room for every event the text can
    // hold, reserved once, so that each page of the array is touched once instead of the doubling series
    // touching them twice (page faults were a third of a replay's time on the VM of bench/RESULTS.md).
    // Capacity never touched is address space, not memory; capped for the largest texts, and only for the
    // first device met (a trace of many devices grows the others' arrays as it goes).
    constexpr std::size_t kMaxReserved = std::size_t{1} << 24;
    if (!reserved_) {
      reserved_ = true;
      out_.device_traces[static_cast<std::size_t>(device)].events.reserve(
          std::min(text_.size() / 16 + 1, kMaxReserved));
    }
  }
  out_.device_traces[static_cast<std::size_t>(device)].events.push_back(event);
  return true;
}

bool VtraceReader::skip_separators(const char*& p, const char* end) {
  if (p == end || !separates(*p)) {
    return false;
  }
  do {
    ++p;
  } while (p != end && separates(*p));
  return p != end;
}

std::optional<TraceAction> VtraceReader::fast_action(const char*& p, const char* end) {
  const char* q = p;
  while (q != end && !separates(*q)) {
    ++q;
  }
  const std::string_view word(p, static_cast<std::size_t>(q - p));
  p = q;
  if (word == "alloc") {
    return TraceAction::kAlloc;
  }
  if (word.size() == 14 && word == "free_completed") {
    return TraceAction::kFreeCompleted;
  }
  if (word.size() == 14 && word == "free_requested") {
    return TraceAction::kFreeRequested;
  }
  return parse_trace_action(word);
}

bool VtraceReader::fast_uint(const char*& p, const char* end, std::uint64_t& value) {
  value = 0;
  const char* q = p;
  if (end - p > 2 && p[0] == '0' && (p[1] | 0x20) == 'x') {
    q += 2;
    const char* const start = q;
    for (int digit = 0; q != end && (digit = kHexValue[static_cast<unsigned char>(*q)]) >= 0; ++q) {
      value = value * 16 + static_cast<std::uint64_t>(digit);
    }
    if (q == start || q - start > 15 || !field_ends(q, end)) {
      return false;
    }
    p = q;
    return true;
  }
  for (; q != end && static_cast<unsigned char>(*q - '0') < 10; ++q) {
    value = value * 10 + static_cast<std::uint64_t>(*q - '0');
  }
  if (q == p || q - p > 19 || !field_ends(q, end)) {
    return false;
  }
  p = q;
  return true;
}

bool VtraceReader::fast_int(const char*& p, const char* end, std::int64_t& value) {
  const bool negative = *p == '-';  // p < end: skip_separators returned true
  const char* q = negative ? p + 1 : p;
  const char* const start = q;
  std::uint64_t magnitude = 0;
  for (; q != end && static_cast<unsigned char>(*q - '0') < 10; ++q) {
    magnitude = magnitude * 10 + static_cast<std::uint64_t>(*q - '0');
  }
  if (q == start || q - start > 18 || !field_ends(q, end)) {
    return false;
  }
  value = negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
  p = q;
  return true;
}

bool VtraceReader::fast_event_fields(const char*& p, const char* end, TraceEvent& event) {
  bool layer_seen = false;
  while (p != end) {
    const auto left = end - p;
    std::size_t key = 0;  // 0 op, 1 cat, 2 phase (last_tag_'s order)
    if (left > 3 && p[0] == 'o' && p[1] == 'p' && p[2] == '=') {
      p += 3;
    } else if (left > 4 && std::memcmp(p, "cat=", 4) == 0) {
      key = 1;
      p += 4;
    } else if (left > 6 && std::memcmp(p, "phase=", 6) == 0) {
      key = 2;
      p += 6;
    } else if (left > 6 && std::memcmp(p, "layer=", 6) == 0) {
      p += 6;
      std::uint64_t layer = 0;
      if (layer_seen || !fast_uint(p, end, layer) || layer >= kLayerLimit) {
        return false;
      }
      layer_seen = true;
      event.layer = static_cast<std::int32_t>(layer);
      key = 3;
    } else {
      return false;
    }
    if (key < 3) {
      std::uint32_t& slot = key == 0 ? event.op_tag : key == 1 ? event.category_tag : event.phase_tag;
      if (slot != kNoTag || !fast_tag(p, end, key, slot)) {
        return false;
      }
    }
    while (p != end && separates(*p)) {
      ++p;
    }
  }
  return true;
}

bool VtraceReader::fast_tag(const char*& p, const char* end, std::size_t key, std::uint32_t& slot) {
  auto& last = last_tag_[key];
  const auto left = static_cast<std::size_t>(end - p);
  const std::size_t n = last.token.size();
  if (n != 0 && n <= left && std::memcmp(p, last.token.data(), n) == 0 && field_ends(p + n, end)) {
    slot = last.id;
    p += n;
    return true;
  }
  const char* q = p;
  while (q != end && !separates(*q) && *q != '%') {
    ++q;
  }
  const std::string_view value(p, static_cast<std::size_t>(q - p));
  if (!field_ends(q, end) || value.empty()) {
    return false;
  }
  const auto known = tag_index_.find(value);
  if (known == tag_index_.end()) {
    return false;
  }
  slot = known->second;
  last = LastTag{value, known->second};
  p = q;
  return true;
}

}  // namespace vramsim::vtrace
