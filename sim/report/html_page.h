// The pieces of the self-contained HTML pages `--html` writes (predict, trace, replay, compare, sweep): the
// project's own SVG, no script, nothing fetched, readable in print. Why not a vendored charting library: the
// pages need four plain chart kinds, and inline SVG keeps them static (no script to run or to break), small,
// printable and byte-for-byte deterministic.
//
// Every drawn series is a <g class="series" data-series="NAME">, every segment of a segment map a
// <g class="segment">, so a test (or a user's script) can find them in the DOM.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramsim::html {

std::string escape(std::string_view text);
std::string gib(std::int64_t bytes);  // "12.34 GiB"

// The page: title, a style sheet, the body as given, and a closing note.
std::string page(const std::string& title, const std::string& body, const std::string& note);

// An <h2> and what follows it.
std::string section(const std::string& heading, const std::string& body);

// A table; cells are escaped; columns after the first are right-aligned numbers when `numeric`.
std::string table(const std::string& css_class, const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, bool numeric = true);

// One series of a chart: y in bytes at each x (x ascending; the same x for every area of a stacked chart).
struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<std::int64_t> bytes;
};

// A vertical line with a label (the peak).
struct Marker {
  double x = 0;
  std::string label;
};

// Areas stacked on one another (the first at the bottom), lines drawn over them unstacked, an optional
// marker. At most ~1,500 points per series are drawn: in every bucket of neighbouring x the one where the
// stack (or, without areas, the first line) is highest, so peaks survive.
std::string stacked_chart(const std::vector<Series>& areas, const std::vector<Series>& lines,
                          const std::optional<Marker>& marker, const std::string& x_label,
                          const std::string& aria_label);

// Lines over x (each series its own x), one colour each, with a legend.
std::string line_chart(const std::vector<Series>& lines, const std::string& x_label,
                       const std::string& aria_label);

// How often each value occurs: bars over the value range, in at most `bins` bins.
std::string histogram(const std::vector<std::int64_t>& values, int bins, const std::string& x_label,
                      const std::string& aria_label);

// The segment map: one bar per segment (its length in proportion to the largest segment's), its blocks
// coloured by kind: a category name, "free" (cached, in an unsplit segment), "inactive split" (free inside a
// segment that also holds allocated blocks: memory empty_cache() cannot return) or "pending free".
struct MapBlock {
  std::int64_t size_bytes = 0;
  std::string kind;
};
struct MapSegment {
  std::uint64_t address = 0;
  std::int64_t size_bytes = 0;
  std::string pool;              // "large", "small", "expandable"
  std::vector<MapBlock> blocks;  // address order, tiling the segment
};
// At most `max_rows` segments are drawn (the largest, in address order); the page says how many are left out.
std::string segment_map(const std::vector<MapSegment>& segments, std::size_t max_rows,
                        const std::string& aria_label);

}  // namespace vramsim::html
