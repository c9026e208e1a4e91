#include "sim/predict/html_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/report/html_page.h"

namespace vramsim {
namespace {

// The stacking order of the categories: the model states at the bottom, the transient ones on top.
constexpr std::string_view kOrder[] = {
    "live at trace start", "parameter", "gradient",  "optimizer_state", "input", "activation", "kv_cache",
    "communication",       "workspace", "temporary", "untagged"};

std::size_t rank_of(const std::string& category) {
  const auto it = std::find(std::begin(kOrder), std::end(kOrder), category);
  return static_cast<std::size_t>(it - std::begin(kOrder));
}

std::string chart(const MemoryTimeline& t, const std::string& peak_label) {
  if (t.samples.empty()) {
    return "<p>No memory events.</p>\n";
  }
  bool timed = false;
  for (const MemoryTimeline::Sample& s : t.samples) {
    timed = timed || s.time_ns != t.samples.front().time_ns;
  }
  std::vector<double> x;
  x.reserve(t.samples.size());
  for (std::size_t i = 0; i < t.samples.size(); ++i) {
    x.push_back(timed ? static_cast<double>(t.samples[i].time_ns - t.samples.front().time_ns) / 1e6
                      : static_cast<double>(t.samples[i].event_index));
  }
  std::vector<std::size_t> order(t.categories.size());
  for (std::size_t c = 0; c < order.size(); ++c) {
    order[c] = c;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return rank_of(t.categories[a]) < rank_of(t.categories[b]);
  });
  std::vector<html::Series> areas;
  for (std::size_t c : order) {
    html::Series s{t.categories[c], x, {}};
    s.bytes.reserve(x.size());
    for (const MemoryTimeline::Sample& m : t.samples) {
      s.bytes.push_back(c < m.requested_bytes.size() ? m.requested_bytes[c] : 0);
    }
    areas.push_back(std::move(s));
  }
  html::Series reserved{"reserved", x, {}};
  html::Series allocated{"allocated", x, {}};
  for (const MemoryTimeline::Sample& m : t.samples) {
    reserved.bytes.push_back(m.reserved_bytes);
    allocated.bytes.push_back(m.allocated_bytes);
  }
  const std::size_t peak = std::min(t.peak_sample, t.samples.size() - 1);
  return html::stacked_chart(
      areas, {reserved, allocated}, html::Marker{x[peak], peak_label},
      timed ? "time, ms" : "trace event (the trace has no times)",
      "requested bytes alive over the run, stacked by category, with the allocator's reserved and allocated "
      "bytes");
}

// The blocks of the segments at the peak, by kind: the allocation's category, or the free space.
std::vector<html::MapSegment> map_segments(const MemoryTimeline& t) {
  std::vector<html::MapSegment> out;
  for (const SnapshotSegment& seg : t.segments_at_peak) {
    html::MapSegment m{seg.address,
                       static_cast<std::int64_t>(seg.total_size_bytes),
                       seg.is_expandable   ? "expandable"
                       : seg.is_small_pool ? "small"
                                           : "large",
                       {}};
    const bool split = seg.blocks.size() > 1;
    for (const SnapshotBlock& b : seg.blocks) {
      std::string kind;
      if (b.state == BlockState::kInactive) {
        kind = split ? "inactive split" : "free";
      } else if (b.state == BlockState::kActivePendingFree) {
        kind = "pending free";
      } else {
        const auto it = std::lower_bound(t.block_category_at_peak.begin(), t.block_category_at_peak.end(),
                                         std::pair<Bytes, int>{b.address, -1});
        kind = it != t.block_category_at_peak.end() && it->first == b.address && it->second >= 0 &&
                       static_cast<std::size_t>(it->second) < t.categories.size()
                   ? t.categories[static_cast<std::size_t>(it->second)]
                   : "live at trace start";
      }
      m.blocks.push_back({static_cast<std::int64_t>(b.size_bytes), kind});
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::string memory_sections(const MemoryTimeline& t, const std::string& peak_label) {
  std::string body = html::section(
      t.tagged ? "Requested bytes alive, by category" : "Memory over the run",
      chart(t, peak_label) +
          (t.tagged ? ""
                    : "<p>The trace carries no tensor categories (a recording): its allocations are one "
                      "series.</p>\n"));
  std::int64_t segments_bytes = 0;
  for (const SnapshotSegment& s : t.segments_at_peak) {
    segments_bytes += static_cast<std::int64_t>(s.total_size_bytes);
  }
  body += html::section(
      "Segments at the peak of allocated memory",
      fmt::format(
          "<p>{} segments, {} reserved: one bar per segment (length in proportion to the largest), its "
          "blocks in address order.</p>\n",
          t.segments_at_peak.size(), html::gib(segments_bytes)) +
          html::segment_map(map_segments(t), 2000, "the allocator's segments and blocks at the peak"));
  return body;
}

std::string html_report(const Prediction& p, const MemoryTimeline& t, const std::string& title) {
  std::string body = fmt::format(
      "<p class=\"verdict\">{}: peak allocated {}, peak reserved {}, headroom {} ({:.1f} % of {}).</p>\n",
      p.fits ? "Fits" : "Does not fit", html::gib(p.peak_allocated_bytes), html::gib(p.peak_reserved_bytes),
      html::gib(p.headroom_bytes), p.headroom_percent, html::gib(p.total_bytes));
  const std::string peak_label =
      fmt::format("peak {}: step {}, {}, {}{}", html::gib(p.peak_allocated_bytes), p.peak_step, p.peak_phase,
                  p.peak_op, p.peak_layer >= 0 ? fmt::format(" (layer {})", p.peak_layer) : std::string());
  body += memory_sections(t, peak_label);
  const MemoryBill& b = p.bill;
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, bytes] : std::vector<std::pair<const char*, std::int64_t>>{
           {"parameters", b.parameters},
           {"gradients", b.gradients},
           {"optimizer states", b.optimizer_states},
           {"activations (saved for backward)", b.activations},
           {"temporaries (incl. workspace)", b.temporaries},
           {"inputs", b.inputs},
           {"communication buffers", b.communication},
           {"KV cache", b.kv_cache},
           {"allocator rounding", b.allocator_rounding},
           {"allocator overhead (reserved - allocated)", b.allocator_overhead},
           {"CUDA context", b.cuda_context},
           {"NCCL communicators (outside the allocator)", b.nccl}}) {
    rows.push_back({name, html::gib(bytes), std::to_string(bytes)});
  }
  body += html::section("The bill",
                        html::table("bill", {"at the peak of allocated memory", "GiB", "bytes"}, rows));
  return html::page(title, body,
                    "vramsim: a simulation, not a measurement; times are the engine's roofline estimate. The "
                    "chart and the segment map are the allocator model's own state on the device" +
                        std::string(p.fits ? "." : " (the run out of memory: what the device could hold)."));
}

namespace {

// The recording's own annotations, as replay's text report gives them, and every annotate entry (up to 200).
std::string annotations_section(const RecordedAnnotations& n) {
  std::string ranges;
  for (const std::string& name : n.open_ranges) {
    ranges += (ranges.empty() ? "" : " > ") + name;
  }
  const std::vector<std::vector<std::string>> rows = {
      {"record_function marks (external_annotations)", std::to_string(n.external)},
      {"annotate entries", std::to_string(n.annotate_entries)},
      {"events with user_metadata", std::to_string(n.events_with_metadata)},
      {"distinct user_metadata texts", std::to_string(n.distinct_metadata)},
      {"events with compile_context", std::to_string(n.events_with_compile_context)},
      {"record_function ranges open at the reserved peak", ranges.empty() ? "none" : ranges},
      {"user_metadata at the reserved peak", n.metadata.empty() ? "none" : n.metadata},
  };
  std::string body = html::table("annotations", {"the recording", ""}, rows, false);
  constexpr std::size_t kMaxListed = 200;
  std::vector<std::vector<std::string>> listed;
  for (std::size_t i = 0; i < n.annotated.size() && i < kMaxListed; ++i) {
    const RecordedAnnotations::Annotated& a = n.annotated[i];
    listed.push_back({std::to_string(a.before_event), fmt::format("{:#x}", a.addr), a.text});
  }
  if (!listed.empty()) {
    body += html::table("annotate-entries", {"before event", "allocation", "annotation"}, listed, false);
  }
  return html::section("Annotations", body);
}

}  // namespace

std::string replay_html(const ReplayResult& r, const MemoryTimeline& t, const std::string& title,
                        const RecordedAnnotations* notes) {
  const std::vector<std::vector<std::string>> rows = {
      {"peak allocated", html::gib(r.peaks.peak_allocated_bytes),
       std::to_string(r.peaks.peak_allocated_bytes)},
      {"peak reserved", html::gib(r.peaks.peak_reserved_bytes), std::to_string(r.peaks.peak_reserved_bytes)},
      {"peak active", html::gib(r.peaks.peak_active_bytes), std::to_string(r.peaks.peak_active_bytes)},
      {"peak requested", html::gib(r.peaks.peak_requested_bytes),
       std::to_string(r.peaks.peak_requested_bytes)},
      {"reserved at trace start", html::gib(static_cast<std::int64_t>(r.reserved_at_start_bytes)),
       std::to_string(r.reserved_at_start_bytes)},
      {"inactive split at the reserved peak", html::gib(r.peaks.inactive_split_bytes_at_reserved_peak),
       std::to_string(r.peaks.inactive_split_bytes_at_reserved_peak)},
  };
  std::string body = fmt::format(
      "<p class=\"verdict\">{} events of device {} replayed through the {} allocator model ({}); "
      "fragmentation {:.1f} %.</p>\n",
      r.events, r.device, r.policy, r.config_origin, 100.0 * r.peaks.fragmentation());
  body += html::section("Peaks", html::table("peaks", {"the allocator model", "GiB", "bytes"}, rows));
  const std::size_t peak = std::min(t.peak_sample, t.samples.empty() ? 0 : t.samples.size() - 1);
  const std::string peak_label = t.samples.empty() ? std::string()
                                                   : fmt::format("peak allocated {} after event {}",
                                                                 html::gib(t.samples[peak].allocated_bytes),
                                                                 t.samples[peak].event_index);
  body += memory_sections(t, peak_label);
  if (notes != nullptr && notes->any()) {
    body += annotations_section(*notes);
  }
  return html::page(title, body, "vramsim replay: the allocator model's state replaying the recorded trace.");
}

}  // namespace vramsim
