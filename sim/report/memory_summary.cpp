// memory_summary(): the table of torch.cuda.memory_summary(), same rows and unit rules (_format_size switches
// unit once the peak reaches 768 of the next one; counts switch at 750 thousand).
#include <fmt/format.h>

#include "sim/report/memory_stats.h"

namespace vramsim {
namespace {

std::string format_size_cell(std::int64_t size, std::int64_t pref) {
  static constexpr const char* kPrefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int p = 0;
  double pref_d = static_cast<double>(pref);
  while (p < 5 && pref_d >= 768.0 * 1024) {
    ++p;
    size /= 1024;
    pref_d /= 1024;
  }
  return fmt::format("{:6d} {}", size, kPrefixes[p]);
}

std::string format_count_cell(std::int64_t count, std::int64_t pref) {
  static constexpr const char* kPrefixes[] = {" ", "K", "M"};
  int p = 0;
  double pref_d = static_cast<double>(pref);
  while (p < 2 && pref_d >= 750.0 * 1000) {
    ++p;
    count /= 1000;
    pref_d /= 1000;
  }
  return fmt::format("{:7d} {} ", count, kPrefixes[p]);
}

}  // namespace

std::string memory_summary(const DeviceStats& s, int device) {
  const std::string rule(75, '-');
  const std::string double_rule(75, '=');
  std::string out;
  auto line = [&](const std::string& text) { out += "|" + text + "|\n"; };
  line(double_rule);
  line(fmt::format(" {:16} PyTorch CUDA memory summary, device ID {:<17d} ", "", device));
  line(rule);
  line(fmt::format("  {:9} CUDA OOMs: {:<12d} | {:6} cudaMalloc retries: {:<8d}  ", "", s.num_ooms, "",
                   s.num_alloc_retries));
  line(double_rule);
  line("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  struct Row {
    const char* name;
    const StatArray* stat;
    bool bytes;
  };
  const Row rows[] = {
      {"Allocated memory", &s.allocated_bytes, true},
      {"Active memory", &s.active_bytes, true},
      {"Requested memory", &s.requested_bytes, true},
      {"GPU reserved memory", &s.reserved_bytes, true},
      {"Non-releasable memory", &s.inactive_split_bytes, true},
      {"Allocations", &s.allocation, false},
      {"Active allocs", &s.active, false},
      {"GPU reserved segments", &s.segment, false},
      {"Non-releasable allocs", &s.inactive_split, false},
  };
  // Each column's unit is chosen from that column of the metric's "all" row (`ref`), as PyTorch does.
  auto cells = [&](const Stat& st, const Stat& ref, bool bytes) {
    auto f = bytes ? format_size_cell : format_count_cell;
    return fmt::format(" {} | {} | {} | {} ", f(st.current, ref.current), f(st.peak, ref.peak),
                       f(st.allocated, ref.allocated), f(st.freed, ref.freed));
  };
  for (const Row& r : rows) {
    const Stat& all = (*r.stat)[kStatAll];
    line(rule);
    line(fmt::format(" {:<21} |{}", r.name, cells(all, all, r.bytes)));
    line(fmt::format(" {:<21} |{}", "      from large pool", cells((*r.stat)[kStatLarge], all, r.bytes)));
    line(fmt::format(" {:<21} |{}", "      from small pool", cells((*r.stat)[kStatSmall], all, r.bytes)));
  }
  line(rule);
  line(fmt::format(" {:<21} |{}", "Oversize allocations",
                   cells(s.oversize_allocations, s.oversize_allocations, false)));
  line(rule);
  line(fmt::format(" {:<21} |{}", "Oversize GPU segments",
                   cells(s.oversize_segments, s.oversize_segments, false)));
  line(double_rule);
  return out;
}

}  // namespace vramsim
