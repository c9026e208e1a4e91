// Peaks and fragmentation of one run, sampled from MemoryStatsObserver after every event the driver feeds:
// fragmentation = 1 - peak active / peak reserved (the GMLake metric), plus the inactive-split bytes (memory
// empty_cache cannot return) at the moment reserved memory peaked.
#pragma once

#include <cstdint>

#include "sim/report/memory_stats.h"

namespace vramsim {

struct PeakSummary {
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t peak_active_bytes = 0;
  std::int64_t peak_requested_bytes = 0;
  std::int64_t inactive_split_bytes_at_reserved_peak = 0;
  std::int64_t allocated_bytes_at_reserved_peak = 0;
  std::uint64_t reserved_peak_event_index = 0;  // the event after which reserved first reached its peak

  double fragmentation() const {
    return peak_reserved_bytes > 0
               ? 1.0 - static_cast<double>(peak_active_bytes) / static_cast<double>(peak_reserved_bytes)
               : 0.0;
  }
};

class PeakTracker {
 public:
  void sample(const DeviceStats& s, std::uint64_t event_index) {
    const Stat& reserved = s.reserved_bytes[kStatAll];
    m_peaks.peak_allocated_bytes =
        std::max(m_peaks.peak_allocated_bytes, s.allocated_bytes[kStatAll].current);
    m_peaks.peak_active_bytes = std::max(m_peaks.peak_active_bytes, s.active_bytes[kStatAll].current);
    m_peaks.peak_requested_bytes =
        std::max(m_peaks.peak_requested_bytes, s.requested_bytes[kStatAll].current);
    if (reserved.current > m_peaks.peak_reserved_bytes || !m_sampled) {
      m_peaks.peak_reserved_bytes = reserved.current;
      m_peaks.inactive_split_bytes_at_reserved_peak = s.inactive_split_bytes[kStatAll].current;
      m_peaks.allocated_bytes_at_reserved_peak = s.allocated_bytes[kStatAll].current;
      m_peaks.reserved_peak_event_index = event_index;
    }
    m_sampled = true;
  }
  const PeakSummary& summary() const { return m_peaks; }

 private:
  PeakSummary m_peaks;
  bool m_sampled = false;
};

}  // namespace vramsim
