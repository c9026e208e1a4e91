// The snapshot dict of torch.cuda.memory._snapshot() (spec §8.2-§8.5) -> Snapshot, from JSON or from a
// decoded pickle (one reader for both). Writing is snapshot_json_writer.cpp.
//
// Reading accepts
//   * the dict form {segments, device_traces?, allocator_settings?, external_annotations?, ...}; other keys
//     (_source, a pinned-host section, ...) are ignored;
//   * the legacy form, a bare list of segments (what torch.cuda.memory_snapshot() returns): no traces.
// Every value is type- and range-checked; the first problem throws InputError
// "<source>: <json path>: <problem>", e.g. "x.json: segments[3].blocks[0].size: expected a non-negative
// integer, got string". Nothing is recursive on the input, so no JSON value can crash the reader.
//
// Rules worth knowing (units: bytes, time in ns):
//   * Block addresses are always recomputed as segment address + sizes of earlier blocks, as MemoryViz does;
//     PyTorch 2.0 files have no block `address` (they carry `history` instead, ignored here). A recorded
//     address that disagrees with the running sum is an error, as are blocks that do not tile their segment
//     and recorded allocated_size / active_size / requested_size that disagree with the blocks (the real
//     files agree exactly, spec §12, so a mismatch means the file is corrupt).
//   * Defaults for keys older PyTorch versions lack: is_expandable false, segment_pool_id (0, 0),
//     segment_type small iff total_size == 2 MiB, requested_size 0, time_us unknown (time_ns 0).
//   * Sizes must be below 2^60 (PyTorch's allocation ceiling), addresses below 2^63, device indices below
//     kMaxDevices. Segments are sorted by (device, address); same-device segments must not overlap.
//   * device_traces is padded with empty traces so that every segment's device has one.
//   * "annotate" trace entries (torch.cuda.memory._annotate_memory, pytorch/pytorch#190575; no memory moves)
//     are kept in DeviceTrace::annotations, and the `user_metadata` / `compile_context` strings of every
//     entry in DeviceTrace::notes (an empty or null value counts as absent); other unknown actions are
//     errors.
//   * external_annotations (PyTorch 2.5+): a list of {device, time_us, <text keys>}; every value but device
//     and time_us must be a string.
//   * Written only for MemoryViz: an empty top-level "categores" list when trace entries carry categories and
//     none is "unknown" (categories_need_unknown in snapshot_json_writer.cpp); reading ignores it like any
//     other unknown key.
//   * Keys of our own: "vramsim_has_final_state": false marks a generated trace with no final state, and
//     trace entries may carry "category" (what MemoryViz reads for profiler-made files) and "op" strings,
//     stored through Snapshot::strings (a non-string or empty value counts as absent), a "phase" string
//     (stored the same way; must be a non-empty string) and a "layer" integer (decoder layer, 0 <= layer <
//     2^31). Each is written only when the event carries it.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/segment_blocks.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

using nlohmann::json;

constexpr std::uint64_t kSizeLimit = std::uint64_t{1} << 60;  // spec §1.1 allocation ceiling
constexpr std::uint64_t kAddressLimit = std::uint64_t{1} << 63;
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
constexpr int kMaxDevices = 1024;
constexpr Bytes kSmallSegmentBytes = 2 * kMiB;
constexpr std::int64_t kMaxTimeUs = std::numeric_limits<std::int64_t>::max() / 1000;
constexpr std::uint64_t kLayerLimit = std::uint64_t{1} << 31;  // TraceEvent::layer is a non-negative int32

// A JSON path built on the stack and only turned into text when an error is reported, so reading a large
// file allocates no path strings.
struct JsonPath {
  const JsonPath* parent = nullptr;
  std::string_view key;  // object member name; empty for the root and for array elements
  std::size_t index = 0;
  bool is_index = false;

  JsonPath operator/(std::string_view member) const { return JsonPath{this, member, 0, false}; }
  JsonPath operator[](std::size_t i) const { return JsonPath{this, {}, i, true}; }

  std::string str() const {
    std::vector<const JsonPath*> chain;
    for (const JsonPath* p = this; p != nullptr; p = p->parent) {
      chain.push_back(p);
    }
    std::string out;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const JsonPath& p = **it;
      if (p.is_index) {
        out += fmt::format("[{}]", p.index);
      } else if (!p.key.empty()) {
        if (!out.empty()) {
          out += '.';
        }
        out += p.key;
      }
    }
    return out;
  }
};

// A JSON value seen through the interface SnapshotReader reads documents with, which PickleValue (a decoded
// pickle read in place) has too: the same reader, and the same messages, for both formats.
class JsonValue {
 public:
  explicit JsonValue(const json& v) : v_(&v) {}
  std::string_view type_name() const {  // nlohmann's names, with integers and floats told apart
    if (v_->is_number_integer()) {
      return "integer";
    }
    return v_->is_number_float() ? "float" : v_->type_name();
  }
  bool is_object() const { return v_->is_object(); }
  bool is_array() const { return v_->is_array(); }
  bool is_string() const { return v_->is_string(); }
  bool is_boolean() const { return v_->is_boolean(); }
  bool is_null() const { return v_->is_null(); }
  bool is_number() const { return v_->is_number(); }
  bool is_number_integer() const { return v_->is_number_integer(); }
  bool is_number_unsigned() const { return v_->is_number_unsigned(); }
  bool as_bool() const { return v_->get<bool>(); }
  std::uint64_t as_uint() const { return v_->get<std::uint64_t>(); }
  std::int64_t as_int() const { return v_->get<std::int64_t>(); }
  double as_double() const { return v_->get<double>(); }
  std::string_view as_string() const { return v_->get_ref<const std::string&>(); }
  std::size_t size() const { return v_->size(); }
  JsonValue at(std::size_t index) const { return JsonValue((*v_)[index]); }
  std::optional<JsonValue> find(std::string_view key) const {
    const auto& obj = v_->get_ref<const json::object_t&>();
    const auto it = obj.find(key);  // nlohmann's object comparator is std::less<>: no temporary string
    return it == obj.end() ? std::nullopt : std::optional<JsonValue>(JsonValue(it->second));
  }
  template <class F>
  void for_each_member(F&& f) const {
    for (const auto& [key, value] : v_->get_ref<const json::object_t&>()) {
      f(std::string_view(key), JsonValue(value));
    }
  }

 private:
  const json* v_;
};

// Quotes user text for a one-line message: control characters become '?', long text is cut.
std::string quote_text(std::string_view text) {
  constexpr std::size_t kMaxShown = 60;
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  out += text.size() > kMaxShown ? "...\"" : "\"";
  return out;
}

class DocumentReader {
 public:
  explicit DocumentReader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(const JsonPath& path, std::string_view problem) const {
    const std::string where = path.str();
    if (where.empty()) {
      throw InputError(fmt::format("{}: {}", source_, problem));
    }
    throw InputError(fmt::format("{}: {}: {}", source_, where, problem));
  }

  template <class V>
  V object(const V& v, const JsonPath& path) const {
    if (!v.is_object()) {
      fail(path, fmt::format("expected an object, got {}", v.type_name()));
    }
    return v;
  }
  template <class V>
  V array(const V& v, const JsonPath& path) const {
    if (!v.is_array()) {
      fail(path, fmt::format("expected a list, got {}", v.type_name()));
    }
    return v;
  }
  template <class V>
  std::string_view string(const V& v, const JsonPath& path) const {
    if (!v.is_string()) {
      fail(path, fmt::format("expected a string, got {}", v.type_name()));
    }
    return v.as_string();
  }
  template <class V>
  bool boolean(const V& v, const JsonPath& path) const {
    if (!v.is_boolean()) {
      fail(path, fmt::format("expected true or false, got {}", v.type_name()));
    }
    return v.as_bool();
  }
  // A non-negative integer below `limit` (exclusive; kNoLimit = any 64-bit value).
  template <class V>
  std::uint64_t uint(const V& v, const JsonPath& path, std::uint64_t limit) const {
    if (!v.is_number_integer()) {
      fail(path, fmt::format("expected a non-negative integer, got {}", v.type_name()));
    }
    // A JSON value built in code may hold a non-negative int as signed.
    if (!v.is_number_unsigned() && v.as_int() < 0) {
      fail(path, fmt::format("expected a non-negative integer, got {}", v.as_int()));
    }
    const std::uint64_t value = v.is_number_unsigned() ? v.as_uint() : static_cast<std::uint64_t>(v.as_int());
    if (limit != kNoLimit && value >= limit) {
      const std::string bound =
          std::has_single_bit(limit) ? fmt::format("2^{}", std::bit_width(limit) - 1) : std::to_string(limit);
      fail(path, fmt::format("expected a non-negative integer below {}, got {}", bound, value));
    }
    return value;
  }
  template <class V>
  std::int64_t int64(const V& v, const JsonPath& path) const {
    if (v.is_number_unsigned()) {
      const std::uint64_t value = v.as_uint();
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(path, fmt::format("integer {} does not fit 64-bit signed", value));
      }
      return static_cast<std::int64_t>(value);
    }
    if (v.is_number_integer()) {
      return v.as_int();
    }
    fail(path, fmt::format("expected an integer, got {}", v.type_name()));
  }
  template <class V>
  double number(const V& v, const JsonPath& path) const {
    if (!v.is_number()) {
      fail(path, fmt::format("expected a number, got {}", v.type_name()));
    }
    return v.as_double();
  }

  template <class V>
  V require(const V& obj, const JsonPath& path, std::string_view key) const {
    const std::optional<V> v = obj.find(key);
    if (!v) {
      fail(path, fmt::format("missing key \"{}\"", key));
    }
    return *v;
  }

 private:
  std::string_view source_;
};

template <class V>
class SnapshotReader {
 public:
  explicit SnapshotReader(std::string_view source) : in_(source) { out_.source = std::string(source); }

  Snapshot read(const V& root) {
    const JsonPath root_path;
    if (root.is_array()) {  // legacy: torch.cuda.memory_snapshot() / a pickled segment list
      read_segments(root, root_path);
    } else if (root.is_object()) {
      const V& obj = root;
      read_segments(in_.require(obj, root_path, "segments"), root_path / "segments");
      if (const std::optional<V> traces = obj.find("device_traces")) {
        read_traces(*traces, root_path / "device_traces");
      }
      if (const std::optional<V> settings = obj.find("allocator_settings")) {
        read_settings(*settings, root_path / "allocator_settings");
      }
      if (const std::optional<V> annotations = obj.find("external_annotations")) {
        read_external_annotations(*annotations, root_path / "external_annotations");
      }
      if (const std::optional<V> flag = obj.find("vramsim_has_final_state")) {
        out_.has_final_state = in_.boolean(*flag, root_path / "vramsim_has_final_state");
      }
    } else {
      in_.fail(root_path,
               fmt::format("expected a snapshot dict or a list of segments at the top level, got {}",
                           root.type_name()));
    }
    sort_and_check_overlap();
    std::size_t devices = out_.device_traces.size();
    for (const SnapshotSegment& segment : out_.segments) {
      devices = std::max(devices, static_cast<std::size_t>(segment.device) + 1);
    }
    out_.device_traces.resize(devices);
    return std::move(out_);
  }

 private:
  void read_segments(const V& value, const JsonPath& path) {
    const auto& list = in_.array(value, path);
    out_.segments.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      out_.segments.push_back(read_segment(list.at(i), path[i]));
    }
  }

  SnapshotSegment read_segment(const V& value, const JsonPath& path) {
    const auto& obj = in_.object(value, path);
    SnapshotSegment seg;
    seg.device = read_device(in_.require(obj, path, "device"), path / "device");
    seg.address = in_.uint(in_.require(obj, path, "address"), path / "address", kAddressLimit);
    seg.total_size_bytes = in_.uint(in_.require(obj, path, "total_size"), path / "total_size", kSizeLimit);
    if (seg.total_size_bytes == 0) {
      in_.fail(path / "total_size", "a segment cannot be empty");
    }
    seg.stream = in_.uint(in_.require(obj, path, "stream"), path / "stream", kNoLimit);
    seg.is_small_pool = seg.total_size_bytes == kSmallSegmentBytes;
    if (const std::optional<V> type = obj.find("segment_type")) {
      const std::string_view text = in_.string(*type, path / "segment_type");
      if (text != "small" && text != "large") {
        in_.fail(path / "segment_type",
                 fmt::format("expected \"small\" or \"large\", got {}", quote_text(text)));
      }
      seg.is_small_pool = text == "small";
    }
    if (const std::optional<V> expandable = obj.find("is_expandable")) {
      seg.is_expandable = in_.boolean(*expandable, path / "is_expandable");
    }
    if (const std::optional<V> pool = obj.find("segment_pool_id")) {
      const JsonPath pool_path = path / "segment_pool_id";
      const auto& pair = in_.array(*pool, pool_path);
      if (pair.size() != 2) {
        in_.fail(pool_path, fmt::format("expected a pair of integers, got a list of {}", pair.size()));
      }
      seg.pool_id_first = in_.int64(pair.at(0), pool_path[0]);
      seg.pool_id_second = in_.int64(pair.at(1), pool_path[1]);
    }
    read_blocks(obj, path, seg);
    check_recorded(obj, path, "allocated_size", seg.allocated_bytes);
    check_recorded(obj, path, "active_size", seg.active_bytes);
    check_recorded(obj, path, "requested_size", seg.requested_bytes);
    return seg;
  }

  void read_blocks(const V& seg_obj, const JsonPath& seg_path, SnapshotSegment& seg) {
    const JsonPath path = seg_path / "blocks";
    const auto& list = in_.array(in_.require(seg_obj, seg_path, "blocks"), path);
    seg.blocks.reserve(list.size());
    Bytes offset = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonPath block_path = path[i];
      const V& obj = in_.object(list.at(i), block_path);
      SnapshotBlock block;
      block.address = seg.address + offset;
      block.size_bytes = in_.uint(in_.require(obj, block_path, "size"), block_path / "size", kSizeLimit);
      if (const std::optional<V> address = obj.find("address")) {
        const Bytes recorded = in_.uint(*address, block_path / "address", kAddressLimit);
        if (recorded != block.address) {
          in_.fail(block_path / "address",
                   fmt::format("recorded address {:#x} disagrees with segment address + earlier block sizes "
                               "({:#x})",
                               recorded, block.address));
        }
      }
      if (const std::optional<V> requested = obj.find("requested_size")) {
        block.requested_bytes = in_.uint(*requested, block_path / "requested_size", kSizeLimit);
      }
      block.state = read_state(in_.require(obj, block_path, "state"), block_path / "state");
      if (const std::string problem = append_segment_block(seg, block, offset); !problem.empty()) {
        in_.fail(block_path / "size", problem);
      }
    }
    if (const std::string problem = segment_coverage_problem(seg, offset); !problem.empty()) {
      in_.fail(path, problem);
    }
  }

  BlockState read_state(const V& value, const JsonPath& path) const {
    const std::string_view text = in_.string(value, path);
    if (text == "active_allocated") {
      return BlockState::kActiveAllocated;
    }
    // The newest docstring says "active_awaiting_free"; the code emits "active_pending_free" (spec §8.4).
    if (text == "active_pending_free" || text == "active_awaiting_free") {
      return BlockState::kActivePendingFree;
    }
    if (text == "inactive") {
      return BlockState::kInactive;
    }
    in_.fail(path, fmt::format("unknown block state {} (expected active_allocated, active_pending_free or "
                               "inactive)",
                               quote_text(text)));
  }

  void check_recorded(const V& obj, const JsonPath& path, std::string_view key, Bytes from_blocks) const {
    if (const std::optional<V> value = obj.find(key)) {
      const Bytes recorded = in_.uint(*value, path / key, kSizeLimit);
      if (recorded != from_blocks) {
        in_.fail(path / key,
                 fmt::format("recorded {} disagrees with the blocks ({})", recorded, from_blocks));
      }
    }
  }

  int read_device(const V& value, const JsonPath& path) const {
    const std::uint64_t device = in_.uint(value, path, kNoLimit);
    if (device >= kMaxDevices) {
      in_.fail(path, fmt::format("device index {} is out of range (below {} expected)", device, kMaxDevices));
    }
    return static_cast<int>(device);
  }

  void read_traces(const V& value, const JsonPath& path) {
    const auto& devices = in_.array(value, path);
    if (devices.size() > kMaxDevices) {
      in_.fail(path,
               fmt::format("{} device traces (at most {} devices expected)", devices.size(), kMaxDevices));
    }
    out_.device_traces.resize(devices.size());
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const V entries = in_.array(devices.at(d), path[d]);
      DeviceTrace& trace = out_.device_traces[d];
      trace.events.reserve(entries.size());
      for (std::size_t i = 0; i < entries.size(); ++i) {
        read_event(entries.at(i), path[d][i], trace);
      }
    }
  }

  // The members of a trace entry that are read, gathered in one pass over it: a trace has tens of thousands
  // of entries, and a lookup per key would scan each one ten times. A repeated key: the last one counts.
  struct EntryFields {
    std::optional<V> action, addr, device_free, size, stream, time_us, op, category, phase, layer,
        user_metadata, compile_context;

    explicit EntryFields(const V& entry) {
      entry.for_each_member([this](std::string_view key, const V& value) {
        if (std::optional<V>* slot = slot_of(key)) {
          *slot = value;
        }
      });
    }
    std::optional<V>* slot_of(std::string_view key) {
      const std::pair<std::string_view, std::optional<V> EntryFields::*> kSlots[] = {
          {"action", &EntryFields::action},
          {"addr", &EntryFields::addr},
          {"device_free", &EntryFields::device_free},
          {"size", &EntryFields::size},
          {"stream", &EntryFields::stream},
          {"time_us", &EntryFields::time_us},
          {"op", &EntryFields::op},
          {"category", &EntryFields::category},
          {"phase", &EntryFields::phase},
          {"layer", &EntryFields::layer},
          {"user_metadata", &EntryFields::user_metadata},
          {"compile_context", &EntryFields::compile_context}};
      for (const auto& [name, slot] : kSlots) {
        if (name == key) {
          return &(this->*slot);
        }
      }
      return nullptr;
    }
  };

  const V& required(const std::optional<V>& field, const JsonPath& path, std::string_view key) const {
    if (!field) {
      in_.fail(path, fmt::format("missing key \"{}\"", key));
    }
    return *field;
  }

  void read_event(const V& value, const JsonPath& path, DeviceTrace& trace) {
    const EntryFields fields(in_.object(value, path));
    const std::string_view name = in_.string(required(fields.action, path, "action"), path / "action");
    const std::optional<TraceAction> action = parse_trace_action(name);
    if (!action) {
      if (name == "annotate") {
        read_annotate(fields, path, trace);
        return;
      }
      in_.fail(path / "action", fmt::format("unknown action {}", quote_text(name)));
    }
    std::vector<TraceEvent>& events = trace.events;
    TraceEvent event;
    event.action = *action;
    const bool device_free = *action == TraceAction::kOom && fields.device_free;
    const std::string_view addr_key = device_free ? "device_free" : "addr";
    if (!device_free && !fields.addr) {
      in_.fail(path, *action == TraceAction::kOom ? "missing key \"device_free\"" : "missing key \"addr\"");
    }
    event.addr = in_.uint(device_free ? *fields.device_free : *fields.addr, path / addr_key, kAddressLimit);
    event.size_bytes = in_.uint(required(fields.size, path, "size"), path / "size", kSizeLimit);
    event.stream = in_.uint(required(fields.stream, path, "stream"), path / "stream", kNoLimit);
    if (fields.time_us) {
      const std::uint64_t time_us =
          in_.uint(*fields.time_us, path / "time_us", static_cast<std::uint64_t>(kMaxTimeUs) + 1);
      event.time_ns = static_cast<TimeNs>(time_us) * 1000;
    }
    event.op_tag = read_tag(fields.op);
    event.category_tag = read_tag(fields.category);
    if (fields.phase) {
      const std::string_view text = in_.string(*fields.phase, path / "phase");
      if (text.empty()) {
        in_.fail(path / "phase", "expected a phase name, got an empty string");
      }
      event.phase_tag = intern(text);
    }
    if (fields.layer) {
      event.layer = static_cast<std::int32_t>(in_.uint(*fields.layer, path / "layer", kLayerLimit));
    }
    const EventNote note{events.size(), read_text(fields.user_metadata, path / "user_metadata"),
                         read_text(fields.compile_context, path / "compile_context")};
    if (note.metadata_tag != kNoTag || note.context_tag != kNoTag) {
      trace.notes.push_back(note);
    }
    events.push_back(event);
  }

  // An "annotate" entry (pytorch/pytorch#190575): addr = the live allocation's base; its text is in
  // user_metadata. size and stream are kept when present.
  void read_annotate(const EntryFields& fields, const JsonPath& path, DeviceTrace& trace) {
    TraceAnnotation a;
    a.before_event = trace.events.size();
    a.addr = in_.uint(required(fields.addr, path, "addr"), path / "addr", kAddressLimit);
    if (fields.size) {
      a.size_bytes = in_.uint(*fields.size, path / "size", kSizeLimit);
    }
    if (fields.stream) {
      a.stream = in_.uint(*fields.stream, path / "stream", kNoLimit);
    }
    a.time_ns = read_time(fields.time_us, path / "time_us");
    a.metadata_tag = read_text(fields.user_metadata, path / "user_metadata");
    a.context_tag = read_text(fields.compile_context, path / "compile_context");
    trace.annotations.push_back(a);
  }

  TimeNs read_time(const std::optional<V>& value, const JsonPath& path) const {
    if (!value) {
      return 0;
    }
    return static_cast<TimeNs>(in_.uint(*value, path, static_cast<std::uint64_t>(kMaxTimeUs) + 1)) * 1000;
  }

  // A string stored in Snapshot::strings; absent, null or empty -> kNoTag; any other type is an error.
  std::uint32_t read_text(const std::optional<V>& value, const JsonPath& path) {
    if (!value || value->is_null()) {
      return kNoTag;
    }
    const std::string_view text = in_.string(*value, path);
    return text.empty() ? kNoTag : intern(text);
  }

  void read_external_annotations(const V& value, const JsonPath& path) {
    const auto& list = in_.array(value, path);
    out_.external_annotations.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonPath entry_path = path[i];
      ExternalAnnotation a;
      bool has_device = false;
      in_.object(list.at(i), entry_path).for_each_member([&](std::string_view key, const V& v) {
        if (key == "device") {
          a.device = read_device(v, entry_path / "device");
          has_device = true;
        } else if (key == "time_us") {
          a.time_ns = read_time(v, entry_path / "time_us");
        } else {
          a.metadata.insert_or_assign(std::string(key), std::string(in_.string(v, entry_path / key)));
        }
      });
      if (!has_device) {
        in_.fail(entry_path, "missing key \"device\"");
      }
      out_.external_annotations.push_back(std::move(a));
    }
  }

  // Optional free-text labels; a non-string value (profiler files may hold null) is treated as absent.
  std::uint32_t read_tag(const std::optional<V>& value) {
    if (!value || !value->is_string() || value->as_string().empty()) {
      return kNoTag;
    }
    return intern(value->as_string());
  }

  std::uint32_t intern(std::string_view text) {
    if (const auto it = tag_index_.find(text); it != tag_index_.end()) {
      return it->second;
    }
    const auto index = static_cast<std::uint32_t>(out_.strings.size());
    out_.strings.emplace_back(text);
    tag_index_.emplace(out_.strings.back(), index);
    return index;
  }

  void read_settings(const V& value, const JsonPath& path) {
    const auto& obj = in_.object(value, path);
    RecordedAllocatorSettings settings;
    if (const std::optional<V> conf = obj.find("PYTORCH_CUDA_ALLOC_CONF"); conf && !conf->is_null()) {
      settings.alloc_conf = in_.string(*conf, path / "PYTORCH_CUDA_ALLOC_CONF");
    }
    if (const std::optional<V> split = obj.find("max_split_size")) {
      const JsonPath split_path = path / "max_split_size";
      // Unlimited is -1; some builds may print SIZE_MAX instead.
      if (split->is_number_unsigned() && split->as_uint() == kNoLimit) {
        settings.max_split_size = -1;
      } else {
        settings.max_split_size = in_.int64(*split, split_path);
        if (settings.max_split_size < -1) {
          in_.fail(split_path,
                   fmt::format("expected -1 (unlimited) or a size, got {}", settings.max_split_size));
        }
      }
    }
    if (const std::optional<V> gc = obj.find("garbage_collection_threshold")) {
      const JsonPath gc_path = path / "garbage_collection_threshold";
      settings.garbage_collection_threshold = in_.number(*gc, gc_path);
      if (!(settings.garbage_collection_threshold >= 0.0 && settings.garbage_collection_threshold <= 1.0)) {
        in_.fail(gc_path,
                 fmt::format("expected a fraction in [0, 1], got {}", settings.garbage_collection_threshold));
      }
    }
    if (const std::optional<V> expandable = obj.find("expandable_segments")) {
      settings.expandable_segments = in_.boolean(*expandable, path / "expandable_segments");
    }
    if (const std::optional<V> divisions = obj.find("roundup_power2_divisions")) {
      read_divisions(*divisions, path / "roundup_power2_divisions", settings.roundup_power2_divisions);
    }
    out_.allocator_settings = settings;
  }

  // {"1": d0, "2": d1, ..., "32768": d15}: keys are interval lower bounds in MiB (spec §1.3). A plain list of
  // 16 values is accepted too.
  void read_divisions(const V& value, const JsonPath& path, std::array<std::uint64_t, 16>& table) const {
    if (value.is_array()) {
      if (value.size() != table.size()) {
        in_.fail(path, fmt::format("expected 16 values, got {}", value.size()));
      }
      for (std::size_t i = 0; i < table.size(); ++i) {
        table[i] = in_.uint(value.at(i), path[i], kNoLimit);
      }
      return;
    }
    // In key order with repeated keys resolved (the last wins), as the JSON form of a pickled dict has them.
    std::map<std::string, V, std::less<>> members;
    in_.object(value, path).for_each_member([&members](std::string_view key, const V& entry) {
      members.insert_or_assign(std::string(key), entry);
    });
    for (const auto& [key, entry] : members) {
      std::size_t index = table.size();
      for (std::size_t i = 0; i < table.size(); ++i) {
        if (key == std::to_string(std::uint64_t{1} << i)) {
          index = i;
        }
      }
      if (index == table.size()) {
        in_.fail(path, fmt::format("unknown interval {} (expected \"1\", \"2\", \"4\", ..., \"32768\")",
                                   quote_text(key)));
      }
      table[index] = in_.uint(entry, path / key, kNoLimit);
    }
  }

  // Segments come sorted by (device, address) from PyTorch; sort anyway (stable, a no-op for real files) and
  // reject overlapping segments of one device, which no allocator state can produce.
  void sort_and_check_overlap() {
    auto& segs = out_.segments;
    const auto key_less = [](const SnapshotSegment& a, const SnapshotSegment& b) {
      return a.device != b.device ? a.device < b.device : a.address < b.address;
    };
    if (!std::is_sorted(segs.begin(), segs.end(), key_less)) {
      std::stable_sort(segs.begin(), segs.end(), key_less);
    }
    for (std::size_t i = 1; i < segs.size(); ++i) {
      const SnapshotSegment& prev = segs[i - 1];
      const SnapshotSegment& next = segs[i];
      if (prev.device == next.device && next.address < prev.address + prev.total_size_bytes) {
        in_.fail(JsonPath{}, fmt::format("segments at {:#x} ({} bytes) and {:#x} on device {} overlap",
                                         prev.address, prev.total_size_bytes, next.address, next.device));
      }
    }
  }

  DocumentReader in_;
  Snapshot out_;
  struct TextHash {
    using is_transparent = void;  // find() by string_view without a temporary string
    std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::unordered_map<std::string, std::uint32_t, TextHash, std::equal_to<>> tag_index_;
};

}  // namespace

Snapshot snapshot_from_json(const nlohmann::json& root, std::string_view source) {
  return SnapshotReader<JsonValue>(source).read(JsonValue(root));
}

Snapshot snapshot_from_pickle_value(const PickleValue& root, std::string_view source) {
  return SnapshotReader<PickleValue>(source).read(root);
}

}  // namespace vramsim
