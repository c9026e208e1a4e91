#include "kernels/replay/replay_report.h"

#include <fmt/format.h>

#include "sim/core/size_format.h"

namespace vramsim::hw {
namespace {

std::string bytes_text(std::int64_t b) {
  // fmt rather than "-" + string: GCC 12 warns (-Wrestrict) about the latter, wrongly.
  const std::string human =
      fmt::format("{}{}", b < 0 ? "-" : "", format_bytes_short(static_cast<Bytes>(b < 0 ? -b : b)));
  return fmt::format("{:>11}  ({} bytes)", human, b);
}

std::string row_where(const ReplayRow& r) {
  if (r.final) {
    return "at the end";
  }
  if (r.kind == ReplayOpKind::kEmptyCache) {
    return fmt::format("after op {} (trace event {}, empty_cache)", r.op_index, r.trace_index);
  }
  return fmt::format("after op {} (trace event {}, {} of {} bytes)", r.op_index, r.trace_index,
                     op_kind_name(r.kind), r.size_bytes);
}

nlohmann::ordered_json row_json(const ReplayRow& r) {
  nlohmann::ordered_json j;
  j["op"] = r.op_index;
  j["event"] = r.trace_index;
  j["kind"] = r.final ? "end" : std::string(op_kind_name(r.kind));
  j["size_bytes"] = r.size_bytes;
  j["segment_events"] = r.segment_events;
  j["reserved_bytes"] = r.reserved_bytes;
  j["in_use_bytes"] = r.in_use_bytes;
  j["difference_bytes"] = r.difference_bytes();
  j["live_requested_bytes"] = r.live_requested_bytes;
  return j;
}

}  // namespace

void print_replay_text(std::ostream& out, const ReplayPlan& plan, const ReplaySetup& setup,
                       const ReplayRunResult& r) {
  out << fmt::format("trace            {}: device {}, {} events ({})\n", plan.source, plan.device,
                     plan.trace_events,
                     plan.starts_empty ? "no final state: starts from an empty allocator"
                                       : "a recording: may start mid-run");
  out << fmt::format("backend          {}: {}\n", r.backend, setup.backend_summary);
  if (r.fake) {
    out << "                 FAKE: no GPU was used; 'in use' below is host bookkeeping, not a measurement\n";
  }
  if (!setup.policy.empty()) {
    out << fmt::format("policy           {} \"{}\" ({})\n", setup.policy, setup.alloc_conf,
                       setup.alloc_conf_origin);
  }
  out << fmt::format(
      "plan             {} allocs, {} frees, {} empty_cache on {} stream(s); not replayed: {} frees of "
      "blocks from before the trace, {} recorded segment events, {} ooms; {} allocations live at the end\n",
      plan.allocs, plan.frees, plan.empty_caches, plan.streams.size(), plan.frees_before_trace,
      plan.segment_events, plan.ooms, plan.live_at_end);
  out << fmt::format("events replayed  {} operations, {} device-level calls, {} measurements\n",
                     r.ops_replayed, r.segment_events, r.measurements);
  out << fmt::format("peak in use      {}  {}\n", bytes_text(r.peak_in_use_bytes),
                     r.fake ? "fake device bookkeeping" : "measured: cudaMemGetInfo used - baseline");
  out << fmt::format("peak reserved    {}  {}\n",
                     bytes_text(static_cast<std::int64_t>(r.peak_reserved_bytes)), r.reserved_meaning);
  out << fmt::format("peak requested   {}  live requested bytes of the trace\n",
                     bytes_text(static_cast<std::int64_t>(r.peak_live_requested_bytes)));
  out << fmt::format("max |difference| {}  in use - reserved, {}\n", bytes_text(r.max_abs_difference_bytes),
                     row_where(r.max_difference_row));
  out << fmt::format("final            in use {}, reserved {}, difference {} bytes\n",
                     r.final_row.in_use_bytes, r.final_row.reserved_bytes, r.final_row.difference_bytes());
  if (setup.verify && r.fake) {
    out << "verify           not possible on a fake device (no bytes to read back)\n";
  } else if (setup.verify) {
    out << fmt::format(
        "verify           {} allocations read back before their free: {}\n", r.verified_allocations,
        r.verify_mismatches == 0
            ? std::string("every byte held its pattern")
            : fmt::format("{} BYTES LOST THEIR PATTERN (allocations overlapped)", r.verify_mismatches));
  }
  out << fmt::format("elapsed          {:.3f} ms  ({}; includes one synchronization per measurement)\n",
                     r.elapsed_ms, r.fake ? "host clock" : "CUDA events");
}

nlohmann::ordered_json replay_json(const ReplayPlan& plan, const ReplaySetup& setup, const ReplayRunResult& r,
                                   bool with_rows) {
  nlohmann::ordered_json j;
  j["file"] = plan.source;
  j["device"] = plan.device;
  j["trace_events"] = plan.trace_events;
  j["backend"] = r.backend;
  j["fake"] = r.fake;
  j["reserved_meaning"] = r.reserved_meaning;
  j["policy"] = setup.policy.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(setup.policy);
  j["alloc_conf"] = setup.alloc_conf;
  j["alloc_conf_origin"] = setup.alloc_conf_origin;
  j["plan"] = {{"starts_empty", plan.starts_empty},
               {"allocs", plan.allocs},
               {"frees", plan.frees},
               {"empty_caches", plan.empty_caches},
               {"frees_before_trace", plan.frees_before_trace},
               {"free_completed", plan.free_completed},
               {"segment_events_recorded", plan.segment_events},
               {"ooms_recorded", plan.ooms},
               {"live_at_end", plan.live_at_end},
               {"streams", plan.streams.size()},
               {"total_allocated_bytes", plan.total_allocated_bytes}};
  j["events_replayed"] = r.ops_replayed;
  j["segment_events"] = r.segment_events;
  j["measurements"] = r.measurements;
  j["peak_measured_in_use_bytes"] = r.peak_in_use_bytes;
  j["peak_model_reserved_bytes"] = r.peak_reserved_bytes;
  j["peak_live_requested_bytes"] = r.peak_live_requested_bytes;
  j["max_abs_difference_bytes"] = r.max_abs_difference_bytes;
  j["max_difference_at"] = row_json(r.max_difference_row);
  j["final"] = row_json(r.final_row);
  j["elapsed_ms"] = r.elapsed_ms;
  j["elapsed_clock"] = r.fake ? "host" : "cuda_events";
  if (setup.verify) {
    j["verify"] = {{"allocations", r.verified_allocations}, {"mismatched_bytes", r.verify_mismatches}};
  }
  if (with_rows) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const ReplayRow& row : r.rows) {
      rows.push_back(row_json(row));
    }
    j["rows"] = std::move(rows);
  }
  return j;
}

}  // namespace vramsim::hw
