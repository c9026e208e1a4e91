#include "kernels/replay/replay_runner.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>

namespace vramsim::hw {
namespace {

class Runner {
 public:
  Runner(const ReplayPlan& plan, IReplayBackend& backend, const RunOptions& options)
      : m_plan(plan), m_backend(backend), m_options(options) {
    m_result.backend = backend.name();
    m_result.reserved_meaning = backend.reserved_meaning();
    m_result.fake = backend.is_fake();
  }

  ReplayRunResult run() {
    m_backend.start_clock();
    for (std::size_t i = 0; i < m_plan.ops.size(); ++i) {
      const ReplayOp& op = m_plan.ops[i];
      const std::uint64_t events_before = m_backend.segment_events();
      try {
        execute(i, op);
      } catch (const std::exception& e) {
        throw ReplayError(fmt::format("{}: {}: {}", where(op.trace_index), describe(op), e.what()));
      }
      ++m_result.ops_replayed;
      m_result.peak_reserved_bytes = std::max(m_result.peak_reserved_bytes, m_backend.reserved_bytes());
      if (m_backend.segment_events() != events_before) {
        measure(i, op, false);
      }
    }
    try {
      m_backend.sync();
      m_result.elapsed_ms = m_backend.stop_clock_ms();
      ReplayOp end;
      end.kind = ReplayOpKind::kEmptyCache;
      end.trace_index = m_plan.trace_events;
      measure(m_plan.ops.size(), end, true);
    } catch (const std::exception& e) {
      throw ReplayError(fmt::format("{}: after the last event: {}", m_plan.source, e.what()));
    }
    m_result.segment_events = m_backend.segment_events();
    return std::move(m_result);
  }

 private:
  std::string where(std::size_t trace_index) const {
    return fmt::format("{}: device_traces[{}][{}]", m_plan.source, m_plan.device, trace_index);
  }

  static std::string describe(const ReplayOp& op) {
    if (op.kind == ReplayOpKind::kEmptyCache) {
      return "empty_cache";
    }
    return fmt::format("{} of {} bytes on stream {}", op_kind_name(op.kind), op.size_bytes, op.stream);
  }

  void execute(std::size_t i, const ReplayOp& op) {
    switch (op.kind) {
      case ReplayOpKind::kAlloc: {
        // Seeds differ per allocation, so an allocation that overwrote another shows up in verify().
        const Bytes addr = m_backend.alloc(op.size_bytes, op.stream, static_cast<std::uint32_t>(i + 1));
        m_addr_of_alloc.emplace(i, addr);
        ++m_result.allocs;
        m_live_requested_bytes += op.size_bytes;
        m_result.peak_live_requested_bytes =
            std::max(m_result.peak_live_requested_bytes, m_live_requested_bytes);
        break;
      }
      case ReplayOpKind::kFree: {
        const auto it = m_addr_of_alloc.find(op.alloc_op);
        if (it == m_addr_of_alloc.end()) {
          throw std::logic_error("the plan frees an allocation that was not made");
        }
        if (m_options.verify) {
          m_result.verify_mismatches += m_backend.verify(it->second);
          ++m_result.verified_allocations;
        }
        m_backend.free(it->second);
        m_addr_of_alloc.erase(it);
        ++m_result.frees;
        m_live_requested_bytes -= op.size_bytes;
        break;
      }
      case ReplayOpKind::kEmptyCache:
        m_backend.empty_cache();
        ++m_result.empty_caches;
        break;
    }
  }

  void measure(std::size_t i, const ReplayOp& op, bool final) {
    m_backend.sync();
    ReplayRow row;
    row.op_index = i;
    row.trace_index = op.trace_index;
    row.kind = op.kind;
    row.size_bytes = op.size_bytes;
    row.segment_events = m_backend.segment_events();
    row.reserved_bytes = m_backend.reserved_bytes();
    row.in_use_bytes = m_backend.mem_in_use_bytes();
    row.live_requested_bytes = m_live_requested_bytes;
    row.final = final;
    ++m_result.measurements;
    m_result.peak_in_use_bytes = std::max(m_result.peak_in_use_bytes, row.in_use_bytes);
    const std::int64_t diff = std::llabs(row.difference_bytes());
    if (diff > m_result.max_abs_difference_bytes || m_result.measurements == 1) {
      m_result.max_abs_difference_bytes = diff;
      m_result.max_difference_row = row;
    }
    if (final) {
      m_result.final_row = row;
    }
    if (m_options.keep_rows || final) {
      m_result.rows.push_back(row);
    }
  }

  const ReplayPlan& m_plan;
  IReplayBackend& m_backend;
  const RunOptions& m_options;
  ReplayRunResult m_result;
  std::unordered_map<std::size_t, Bytes> m_addr_of_alloc;  // kAlloc op index -> address, while live
  Bytes m_live_requested_bytes = 0;
};

}  // namespace

ReplayRunResult run_replay(const ReplayPlan& plan, IReplayBackend& backend, const RunOptions& options) {
  return Runner(plan, backend, options).run();
}

std::string_view op_kind_name(ReplayOpKind kind) {
  switch (kind) {
    case ReplayOpKind::kAlloc:
      return "alloc";
    case ReplayOpKind::kFree:
      return "free";
    case ReplayOpKind::kEmptyCache:
      return "empty_cache";
  }
  return "?";
}

}  // namespace vramsim::hw
