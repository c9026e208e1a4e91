// The vtrace reader's general road: every line type, tokenized, each problem a one-line error
// (traces/vtrace_reader.h states the contract; the fast road for event lines is vtrace_fast_path.cpp).
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
#include "traces/segment_blocks.h"
#include "traces/trace_io.h"
#include "traces/utf8.h"
#include "traces/vtrace_reader.h"

namespace vramsim {
namespace vtrace {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

std::string shown(std::string_view token) {
  constexpr std::size_t kMaxShown = 40;
  std::string out = "\"";
  for (std::size_t i = 0; i < token.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : token[i];
  }
  out += token.size() > kMaxShown ? "...\"" : "\"";
  return out;
}

Snapshot VtraceReader::read() {
  std::size_t pos = 0;
  bool magic_seen = false;
  while (pos < text_.size() || (!magic_seen && pos == 0)) {
    const std::size_t end = std::min(text_.find('\n', pos), text_.size());
    std::string_view line = text_.substr(pos, end - pos);
    pos = end + 1;
    ++line_no_;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (magic_seen && read_event_fast(line)) {
      continue;
    }
    tokenize(line);
    if (!magic_seen) {
      if (tokens_.size() != 2 || tokens_[0] != kMagic) {
        fail(fmt::format("expected the header \"{} {}\" on the first line", kMagic, kVersion));
      }
      if (tokens_[1] != kVersion) {
        fail(fmt::format("unsupported vtrace version {} (this build reads version {})", shown(tokens_[1]),
                         kVersion));
      }
      magic_seen = true;
      continue;
    }
    if (tokens_.empty() || tokens_[0].front() == '#') {
      continue;
    }
    dispatch();
  }
  close_segment();
  finish();
  return std::move(out_);
}

[[noreturn]] void VtraceReader::fail_at(std::size_t line, std::string_view problem) const {
  throw InputError(fmt::format("{}: line {}: {}", source_, line, problem));
}

void VtraceReader::tokenize(std::string_view line) {
  tokens_.clear();
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && separates(line[i])) {
      ++i;
    }
    const std::size_t start = i;
    while (i < line.size() && in_token(line[i])) {
      ++i;
    }
    if (i > start) {
      tokens_.push_back(line.substr(start, i - start));
    }
  }
}

void VtraceReader::expect_fields(std::size_t count, std::string_view usage) const {
  if (tokens_.size() != count + 1) {
    fail(fmt::format("'{}' takes {} field{} ({}), got {}", tokens_[0], count, count == 1 ? "" : "s", usage,
                     tokens_.size() - 1));
  }
}

std::uint64_t VtraceReader::parse_uint(std::string_view token, std::string_view what,
                                       std::uint64_t limit) const {
  if (!token.empty() && token[0] == '-') {
    fail(fmt::format("{} must not be negative, got {}", what, shown(token)));
  }
  int base = 10;
  std::string_view digits = token;
  if (token.size() > 2 && token[0] == '0' && (token[1] == 'x' || token[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (ec == std::errc::result_out_of_range) {
    fail(fmt::format("{} {} is too large", what, shown(token)));
  }
  if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty()) {
    fail(fmt::format("bad {} {} (expected a decimal or 0x-hex integer)", what, shown(token)));
  }
  if (limit != kNoLimit && value >= limit) {
    fail(fmt::format("{} {} is too large (must be below {})", what, shown(token),
                     limit == kSizeLimit      ? "2^60"
                     : limit == kAddressLimit ? "2^63"
                     : limit == kLayerLimit   ? "2^31"
                                              : std::to_string(limit)));
  }
  return value;
}

std::int64_t VtraceReader::parse_int(std::string_view token, std::string_view what) const {
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value, 10);
  if (ec == std::errc::result_out_of_range) {
    fail(fmt::format("{} {} does not fit 64 bits", what, shown(token)));
  }
  if (ec != std::errc() || ptr != token.data() + token.size()) {
    fail(fmt::format("bad {} {} (expected a decimal integer)", what, shown(token)));
  }
  return value;
}

std::string VtraceReader::decode(std::string_view token, std::string_view what) const {
  if (token.find('%') == std::string_view::npos) {  // most tags: copied as they are
    if (!is_valid_utf8(token)) {
      fail(fmt::format("{} is not valid UTF-8 (write other bytes as %XX)", what));
    }
    return std::string(token);
  }
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (token[i] != '%') {
      out += token[i];
      continue;
    }
    const int hi = i + 2 < token.size() ? hex_digit(token[i + 1]) : -1;
    const int lo = i + 2 < token.size() ? hex_digit(token[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      fail(fmt::format("bad percent escape in {} {} (expected %XX)", what, shown(token)));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (!is_valid_utf8(out)) {
    fail(fmt::format("{} is not valid UTF-8 (write other bytes as %XX)", what));
  }
  return out;
}

int VtraceReader::parse_device(std::string_view token) const {
  const std::uint64_t limit = declared_devices_ ? *declared_devices_ : kMaxDevices;
  const std::uint64_t device = parse_uint(token, "device", kNoLimit);
  if (device >= limit) {
    fail(fmt::format("device {} is out of range (the trace has {} device{})", device, limit,
                     limit == 1 ? "" : "s"));
  }
  return static_cast<int>(device);
}

void VtraceReader::dispatch() {
  const std::string_view keyword = tokens_[0];
  if (keyword[0] >= '0' && keyword[0] <= '9') {
    close_segment();
    body_started_ = true;
    read_event();
  } else if (keyword == "segment") {
    close_segment();
    body_started_ = true;
    read_segment();
  } else if (keyword == "block") {
    read_block();
  } else if (keyword == "annotation") {
    close_segment();
    body_started_ = true;
    read_annotation();
  } else if (keyword == "devices" || keyword == "final_state" || keyword == "tag" ||
             keyword.starts_with("settings")) {
    read_header_line(keyword);
  } else {
    fail(fmt::format("unknown line type {}", shown(keyword)));
  }
}

void VtraceReader::read_header_line(std::string_view keyword) {
  if (body_started_) {
    fail(fmt::format("'{}' must come before the first segment or event line", keyword));
  }
  if (keyword != "tag" && !seen_headers_.insert(std::string(keyword)).second) {
    fail(fmt::format("duplicate '{}' line", keyword));
  }
  if (keyword == "devices") {
    expect_fields(1, "the number of devices");
    declared_devices_ = parse_uint(tokens_[1], "device count", kMaxDevices + 1);
  } else if (keyword == "final_state") {
    expect_fields(1, "yes or no");
    out_.has_final_state = parse_flag(tokens_[1], "final_state", "yes", "no");
  } else if (keyword == "tag") {
    expect_fields(1, "a percent-encoded string");
    std::string text = decode(tokens_[1], "tag");
    const auto [it, inserted] = tag_index_.try_emplace(text, static_cast<std::uint32_t>(out_.strings.size()));
    if (!inserted) {
      fail(fmt::format("duplicate tag {}", shown(text)));
    }
    out_.strings.push_back(std::move(text));
  } else {
    read_settings_line(keyword);
  }
}

void VtraceReader::read_settings_line(std::string_view keyword) {
  RecordedAllocatorSettings& settings =
      out_.allocator_settings ? *out_.allocator_settings : out_.allocator_settings.emplace();
  if (keyword == "settings") {
    if (tokens_.size() > 2) {
      fail("'settings' takes one percent-encoded string (write spaces as %20)");
    }
    settings.alloc_conf = tokens_.size() == 2 ? decode(tokens_[1], "settings") : std::string();
  } else if (keyword == "settings.max_split_size") {
    expect_fields(1, "bytes, or -1 for unlimited");
    settings.max_split_size = parse_int(tokens_[1], "max_split_size");
    if (settings.max_split_size < -1) {
      fail(fmt::format("max_split_size must be -1 (unlimited) or a size, got {}", settings.max_split_size));
    }
  } else if (keyword == "settings.garbage_collection_threshold") {
    expect_fields(1, "a fraction in [0, 1]");
    const std::string_view token = tokens_[1];
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (ec != std::errc() || ptr != token.data() + token.size() || !(value >= 0.0 && value <= 1.0)) {
      fail(fmt::format("bad garbage_collection_threshold {} (expected a fraction in [0, 1])", shown(token)));
    }
    settings.garbage_collection_threshold = value;
  } else if (keyword == "settings.expandable_segments") {
    expect_fields(1, "0 or 1");
    settings.expandable_segments = parse_flag(tokens_[1], "expandable_segments", "1", "0");
  } else if (keyword == "settings.roundup_power2_divisions") {
    expect_fields(settings.roundup_power2_divisions.size(), "one value per size interval");
    for (std::size_t i = 0; i < settings.roundup_power2_divisions.size(); ++i) {
      settings.roundup_power2_divisions[i] = parse_uint(tokens_[i + 1], "divisions", kNoLimit);
    }
  } else {
    fail(fmt::format("unknown line type {}", shown(keyword)));
  }
}

void VtraceReader::read_segment() {
  expect_fields(8, "device address total_size stream small|large expandable pool_a pool_b");
  if (!out_.has_final_state) {
    fail("segment line in a trace without final state (add 'final_state yes' to the header)");
  }
  SnapshotSegment seg;
  seg.device = parse_device(tokens_[1]);
  seg.address = parse_uint(tokens_[2], "segment address", kAddressLimit);
  seg.total_size_bytes = parse_uint(tokens_[3], "segment size", kSizeLimit);
  if (seg.total_size_bytes == 0) {
    fail("a segment cannot be empty");
  }
  seg.stream = parse_uint(tokens_[4], "stream", kNoLimit);
  seg.is_small_pool = parse_flag(tokens_[5], "pool", "small", "large");
  seg.is_expandable = parse_flag(tokens_[6], "expandable flag", "1", "0");
  seg.pool_id_first = parse_int(tokens_[7], "pool id");
  seg.pool_id_second = parse_int(tokens_[8], "pool id");
  out_.segments.push_back(std::move(seg));
  segment_lines_.push_back(line_no_);
  segment_open_ = true;
  segment_offset_ = 0;
}

void VtraceReader::read_block() {
  if (!segment_open_) {
    fail("block line outside a segment (blocks must directly follow their segment line)");
  }
  expect_fields(4, "address size requested allocated|pending_free|inactive");
  SnapshotSegment& seg = out_.segments.back();
  SnapshotBlock block;
  block.address = parse_uint(tokens_[1], "block address", kAddressLimit);
  block.size_bytes = parse_uint(tokens_[2], "block size", kSizeLimit);
  block.requested_bytes = parse_uint(tokens_[3], "requested size", kSizeLimit);
  const std::string_view state = tokens_[4];
  if (state == "allocated") {
    block.state = BlockState::kActiveAllocated;
  } else if (state == "pending_free") {
    block.state = BlockState::kActivePendingFree;
  } else if (state == "inactive") {
    block.state = BlockState::kInactive;
  } else {
    fail(fmt::format("unknown block state {} (expected allocated, pending_free or inactive)", shown(state)));
  }
  if (block.address != seg.address + segment_offset_) {
    fail(fmt::format("block at {:#x} does not start where the previous block of its segment ends ({:#x})",
                     block.address, seg.address + segment_offset_));
  }
  if (const std::string problem = append_segment_block(seg, block, segment_offset_); !problem.empty()) {
    fail(problem);
  }
}

void VtraceReader::close_segment() {
  if (!segment_open_) {
    return;
  }
  segment_open_ = false;
  if (const std::string problem = segment_coverage_problem(out_.segments.back(), segment_offset_);
      !problem.empty()) {
    fail_at(segment_lines_.back(), problem);
  }
}

void VtraceReader::read_event() {
  if (tokens_.size() < 6) {
    fail(fmt::format("an event line needs 6 fields (device action addr size stream time_ns), got {}",
                     tokens_.size()));
  }
  const int device = parse_device(tokens_[0]);
  const std::optional<TraceAction> action = parse_trace_action(tokens_[1]);
  const bool annotate = !action && tokens_[1] == "annotate";
  if (!action && !annotate) {
    fail(fmt::format("unknown action {}", shown(tokens_[1])));
  }
  TraceEvent event;
  event.action = action.value_or(TraceAction::kAlloc);
  event.addr = parse_uint(tokens_[2], "address", kAddressLimit);
  event.size_bytes = parse_uint(tokens_[3], "size", kSizeLimit);
  event.stream = parse_uint(tokens_[4], "stream", kNoLimit);
  event.time_ns = parse_int(tokens_[5], "time_ns");
  bool layer_seen = false;
  EventNote note;
  for (std::size_t i = 6; i < tokens_.size(); ++i) {
    const std::string_view token = tokens_[i];
    const std::size_t eq = token.find('=');
    const std::string_view key = token.substr(0, eq == std::string_view::npos ? 0 : eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : token.substr(eq + 1);
    if (key == "layer") {
      if (layer_seen) {
        fail(fmt::format("duplicate field {}", shown(token)));
      }
      layer_seen = true;
      event.layer = static_cast<std::int32_t>(parse_uint(value, "layer", kLayerLimit));
      continue;
    }
    std::uint32_t* slot = nullptr;
    if (key == "op") {
      slot = &event.op_tag;
    } else if (key == "cat") {
      slot = &event.category_tag;
    } else if (key == "phase") {
      slot = &event.phase_tag;
    } else if (key == "meta") {
      slot = &note.metadata_tag;
    } else if (key == "ctx") {
      slot = &note.context_tag;
    } else {
      fail(
          fmt::format("unknown event field {} (expected op=<name>, cat=<name>, phase=<name>, layer=<index>, "
                      "meta=<text> or ctx=<text>)",
                      shown(token)));
    }
    if (*slot != kNoTag) {
      fail(fmt::format("duplicate field {}", shown(token)));
    }
    if (key == "op" || key == "cat" || key == "phase") {
      // A tag seen before and written without escapes is its own decoded text (already checked when it
      // was first read): look it up in place, without building a string per event. Consecutive events
      // mostly repeat the op, category and phase, so the last one of each is compared first.
      LastTag& last = last_tag_[key == "op" ? 0 : key == "cat" ? 1 : 2];
      if (!value.empty() && value == last.token) {
        *slot = last.id;
        continue;
      }
      if (!value.empty() && value.find('%') == std::string_view::npos) {
        if (const auto known = tag_index_.find(value); known != tag_index_.end()) {
          *slot = known->second;
          last = LastTag{value, known->second};
          continue;
        }
      }
    }
    *slot = intern(token, value);
  }
  if (annotate &&
      (layer_seen || event.op_tag != kNoTag || event.category_tag != kNoTag || event.phase_tag != kNoTag)) {
    fail("an annotate line takes only meta= and ctx= fields");
  }
  if (static_cast<std::size_t>(device) >= out_.device_traces.size()) {
    out_.device_traces.resize(static_cast<std::size_t>(device) + 1);
  }
  DeviceTrace& trace = out_.device_traces[static_cast<std::size_t>(device)];
  if (annotate) {
    trace.annotations.push_back(TraceAnnotation{trace.events.size(), event.addr, event.size_bytes,
                                                event.stream, event.time_ns, note.metadata_tag,
                                                note.context_tag});
    return;
  }
  if (note.metadata_tag != kNoTag || note.context_tag != kNoTag) {
    note.event = trace.events.size();
    trace.notes.push_back(note);
  }
  trace.events.push_back(event);
}

std::uint32_t VtraceReader::intern(std::string_view token, std::string_view value) {
  std::string text = decode(value, "tag");
  if (text.empty()) {
    fail(fmt::format("empty value in {}", shown(token)));
  }
  const auto [it, inserted] =
      tag_index_.try_emplace(std::move(text), static_cast<std::uint32_t>(out_.strings.size()));
  if (inserted) {
    out_.strings.push_back(it->first);
  }
  return it->second;
}

// annotation DEVICE TIME_NS KEY=TEXT ...: one entry of external_annotations.
void VtraceReader::read_annotation() {
  if (tokens_.size() < 3) {
    fail("an annotation line needs device, time_ns and key=text fields");
  }
  ExternalAnnotation a;
  a.device = parse_device(tokens_[1]);
  a.time_ns = parse_int(tokens_[2], "time_ns");
  for (std::size_t i = 3; i < tokens_.size(); ++i) {
    const std::string_view token = tokens_[i];
    const std::size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      fail(fmt::format("bad annotation field {} (expected key=text)", shown(token)));
    }
    std::string key = decode(token.substr(0, eq), "annotation key");
    if (key == "device" || key == "time_us") {
      fail(fmt::format("annotation field {} is given by the line's own fields", shown(token)));
    }
    if (!a.metadata.try_emplace(std::move(key), decode(token.substr(eq + 1), "annotation text")).second) {
      fail(fmt::format("duplicate field {}", shown(token)));
    }
  }
  out_.external_annotations.push_back(std::move(a));
}

void VtraceReader::finish() {
  std::size_t devices = declared_devices_ ? static_cast<std::size_t>(*declared_devices_) : 0;
  devices = std::max(devices, out_.device_traces.size());
  for (const SnapshotSegment& seg : out_.segments) {
    devices = std::max(devices, static_cast<std::size_t>(seg.device) + 1);
  }
  out_.device_traces.resize(devices);

  std::vector<std::size_t> order(out_.segments.size());
  std::iota(order.begin(), order.end(), 0);
  const auto& segs = out_.segments;
  const auto key_less = [&segs](std::size_t a, std::size_t b) {
    return segs[a].device != segs[b].device ? segs[a].device < segs[b].device
                                            : segs[a].address < segs[b].address;
  };
  if (!std::is_sorted(order.begin(), order.end(), key_less)) {
    std::stable_sort(order.begin(), order.end(), key_less);
    std::vector<SnapshotSegment> sorted;
    std::vector<std::size_t> lines;
    sorted.reserve(segs.size());
    for (const std::size_t i : order) {
      sorted.push_back(std::move(out_.segments[i]));
      lines.push_back(segment_lines_[i]);
    }
    out_.segments = std::move(sorted);
    segment_lines_ = std::move(lines);
  }
  for (std::size_t i = 1; i < out_.segments.size(); ++i) {
    const SnapshotSegment& prev = out_.segments[i - 1];
    const SnapshotSegment& next = out_.segments[i];
    if (prev.device == next.device && next.address < prev.address + prev.total_size_bytes) {
      fail_at(segment_lines_[i], fmt::format("segment {:#x} overlaps the segment at {:#x} (line {})",
                                             next.address, prev.address, segment_lines_[i - 1]));
    }
  }
}

}  // namespace vtrace

Snapshot read_vtrace(std::string_view text, std::string_view source) {
  return vtrace::VtraceReader(text, source).read();
}

}  // namespace vramsim
