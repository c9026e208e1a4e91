#include "sim/report/html_page.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "sim/core/size_format.h"

namespace vramsim::html {
namespace {

constexpr double kWidth = 960.0;
constexpr double kHeight = 360.0;
constexpr double kLeft = 70.0;  // room for the axis labels
constexpr double kRight = 10.0;
constexpr double kTop = 30.0;  // room for the marker's label
constexpr double kBottom = 40.0;
constexpr std::size_t kMaxPoints = 1500;

// Colour-blind-safe (Okabe-Ito) colours, fixed per category so that every page colours a category alike;
// anything else takes the next colour of the palette in order.
constexpr std::pair<std::string_view, std::string_view> kNamed[] = {{"parameter", "#0072B2"},
                                                                    {"gradient", "#E69F00"},
                                                                    {"optimizer_state", "#009E73"},
                                                                    {"activation", "#D55E00"},
                                                                    {"temporary", "#CC79A7"},
                                                                    {"workspace", "#56B4E9"},
                                                                    {"input", "#F0E442"},
                                                                    {"communication", "#999999"},
                                                                    {"kv_cache", "#000000"},
                                                                    {"free", "#FFFFFF"},
                                                                    {"inactive split", "#BBBBBB"},
                                                                    {"pending free", "#777777"},
                                                                    {"live at trace start", "#A6CEE3"},
                                                                    {"untagged", "#0072B2"},
                                                                    {"reserved", "#000000"},
                                                                    {"allocated", "#882255"},
                                                                    {"active", "#009E73"}};
constexpr std::string_view kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
                                         "#56B4E9", "#F0E442", "#999999", "#000000", "#882255"};

std::string colour(const std::string& name, std::size_t index) {
  for (const auto& [n, c] : kNamed) {
    if (n == name) {
      return std::string(c);
    }
  }
  return std::string(kPalette[index % std::size(kPalette)]);
}

// The reports' "12.34 GiB" style; negative sizes (none are drawn) show as 0.
std::string short_bytes(std::int64_t bytes) {
  return format_bytes_short(static_cast<Bytes>(std::max<std::int64_t>(0, bytes)));
}

std::string svg_open(const std::string& aria_label, double height = kHeight) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "role=\"img\" aria-label=\"{2}\">\n",
      kWidth, height, escape(aria_label));
}

// Maps data to the plot area.
struct Frame {
  double x_min = 0;
  double x_max = 1;
  std::int64_t y_max = 1;
  double x(double v) const {
    const double span = x_max > x_min ? x_max - x_min : 1.0;
    return kLeft + (v - x_min) / span * (kWidth - kLeft - kRight);
  }
  double y(std::int64_t bytes) const {
    return kTop +
           (kHeight - kBottom - kTop) * (1.0 - static_cast<double>(bytes) / static_cast<double>(y_max));
  }
};

std::string axes(const Frame& f, const std::string& x_label) {
  std::string s;
  for (double frac : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const auto b = static_cast<std::int64_t>(frac * static_cast<double>(f.y_max));
    s += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" font-size=\"11\" text-anchor=\"end\">{5}</text>\n",
        kLeft, kWidth - kRight, f.y(b), kLeft - 4.0, f.y(b) + 4.0, short_bytes(b));
  }
  s += fmt::format(
      "<text x=\"{0}\" y=\"{1}\" font-size=\"11\">{2:g}</text><text x=\"{3}\" y=\"{1}\" font-size=\"11\" "
      "text-anchor=\"end\">{4:g}</text><text x=\"{5}\" y=\"{1}\" font-size=\"11\" "
      "text-anchor=\"middle\">{6}</text>\n",
      kLeft, kHeight - kBottom + 14.0, f.x_min, kWidth - kRight, f.x_max, (kLeft + kWidth) / 2,
      escape(x_label));
  return s;
}

// Entries: (colour, text).
std::string legend(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string s = "<ul class=\"legend\">";
  for (const auto& [c, text] : entries) {
    s += fmt::format("<li><span style=\"background:{}\"></span>{}</li>", c, escape(text));
  }
  return s + "</ul>\n";
}

// Indices of at most ~kMaxPoints samples: per bucket of neighbouring samples the first and the one with the
// highest key, plus the last.
std::vector<std::size_t> pick(std::size_t n, const std::vector<std::int64_t>& key) {
  std::vector<std::size_t> out;
  const std::size_t bucket = std::max<std::size_t>(1, (n + kMaxPoints / 2 - 1) / (kMaxPoints / 2));
  for (std::size_t b = 0; b < n; b += bucket) {
    std::size_t best = b;
    for (std::size_t i = b; i < std::min(n, b + bucket); ++i) {
      best = key[i] > key[best] ? i : best;
    }
    out.push_back(b);
    out.push_back(best);
  }
  if (n > 0) {
    out.push_back(n - 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string polyline(const Series& s, const std::vector<std::size_t>& at, const Frame& f,
                     const std::string& c, bool dashed) {
  std::string points;
  for (std::size_t i : at) {
    points += fmt::format("{:.1f},{:.1f} ", f.x(s.x[i]), f.y(s.bytes[i]));
  }
  return fmt::format(
      "<g class=\"series\" data-series=\"{}\"><polyline points=\"{}\" fill=\"none\" stroke=\"{}\" "
      "stroke-width=\"1.5\"{}/></g>\n",
      escape(s.name), points, c, dashed ? " stroke-dasharray=\"5 3\"" : "");
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

std::string page(const std::string& title, const std::string& body, const std::string& note) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + escape(title) +
         "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1000px}h1{overflow-wrap:anywhere}"
         "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
         "td.n{text-align:right;font-variant-numeric:tabular-nums}"
         ".legend{list-style:none;padding:0}.legend li{display:inline-block;margin-right:1em}"
         ".legend span{display:inline-block;width:12px;height:12px;margin-right:4px;border:1px solid #999;"
         "-webkit-print-color-adjust:exact;print-color-adjust:exact}"
         "svg{max-width:100%;height:auto}@media print{body{margin:0}h2{break-before:auto}}</style>\n"
         "</head><body>\n<h1>" +
         escape(title) + "</h1>\n" + body + "<p class=\"note\">" + escape(note) + "</p>\n</body></html>\n";
}

std::string section(const std::string& heading, const std::string& body) {
  return "<h2>" + escape(heading) + "</h2>\n" + body;
}

std::string table(const std::string& css_class, const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, bool numeric) {
  std::string s = "<table class=\"" + escape(css_class) + "\"><tr>";
  for (const std::string& h : header) {
    s += "<th>" + escape(h) + "</th>";
  }
  s += "</tr>\n";
  for (const std::vector<std::string>& row : rows) {
    s += "<tr>";
    for (std::size_t c = 0; c < row.size(); ++c) {
      s += (numeric && c > 0 ? "<td class=\"n\">" : "<td>") + escape(row[c]) + "</td>";
    }
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string stacked_chart(const std::vector<Series>& areas, const std::vector<Series>& lines,
                          const std::optional<Marker>& marker, const std::string& x_label,
                          const std::string& aria_label) {
  static const std::vector<double> kNone;
  const std::vector<double>& xs = !areas.empty() ? areas.front().x : lines.empty() ? kNone : lines.front().x;
  if (xs.empty()) {
    return "<p>No memory events.</p>\n";
  }
  const std::size_t n = xs.size();
  std::vector<std::int64_t> stack(n, 0);
  for (const Series& a : areas) {
    for (std::size_t i = 0; i < n; ++i) {
      stack[i] += a.bytes[i];
    }
  }
  const std::vector<std::size_t> at = pick(n, areas.empty() ? lines.front().bytes : stack);
  Frame f{xs.front(), xs.back(), 1};
  for (std::size_t i : at) {
    f.y_max = std::max(f.y_max, stack[i]);
    for (const Series& l : lines) {
      f.y_max = std::max(f.y_max, l.bytes[i]);
    }
  }
  std::string svg = svg_open(aria_label) + axes(f, x_label);
  std::vector<std::int64_t> lower(n, 0);
  std::vector<std::pair<std::string, std::string>> keys;
  for (std::size_t k = 0; k < areas.size(); ++k) {
    const Series& a = areas[k];
    const std::int64_t most = *std::max_element(a.bytes.begin(), a.bytes.end());
    if (most > 0) {
      std::string points;
      for (std::size_t i : at) {
        points += fmt::format("{:.1f},{:.1f} ", f.x(xs[i]), f.y(lower[i] + a.bytes[i]));
      }
      for (auto it = at.rbegin(); it != at.rend(); ++it) {
        points += fmt::format("{:.1f},{:.1f} ", f.x(xs[*it]), f.y(lower[*it]));
      }
      svg += fmt::format(
          "<g class=\"series\" data-series=\"{}\"><polygon points=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" "
          "stroke=\"none\"/></g>\n",
          escape(a.name), points, colour(a.name, k));
      keys.emplace_back(colour(a.name, k), fmt::format("{} (up to {})", a.name, gib(most)));
    }
    for (std::size_t i = 0; i < n; ++i) {
      lower[i] += a.bytes[i];
    }
  }
  for (std::size_t k = 0; k < lines.size(); ++k) {
    svg += polyline(lines[k], at, f, colour(lines[k].name, k), k > 0);
    const std::int64_t most = *std::max_element(lines[k].bytes.begin(), lines[k].bytes.end());
    keys.emplace_back(colour(lines[k].name, k), fmt::format("{} (line, up to {})", lines[k].name, gib(most)));
  }
  if (marker) {
    const double x = f.x(marker->x);
    svg += fmt::format(
        "<g class=\"peak\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#000\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{3:.1f}\" y=\"{4}\" font-size=\"12\">{5}</text></g>\n",
        x, kTop, kHeight - kBottom, std::clamp(x - 200.0, kLeft, kWidth - 480.0), kTop - 8.0,
        escape(marker->label));
  }
  return svg + "</svg>\n" + legend(keys);
}

std::string line_chart(const std::vector<Series>& lines, const std::string& x_label,
                       const std::string& aria_label) {
  Frame f{0, 1, 1};
  bool any = false;
  for (const Series& l : lines) {
    for (std::size_t i = 0; i < l.x.size(); ++i) {
      f.x_min = any ? std::min(f.x_min, l.x[i]) : l.x[i];
      f.x_max = any ? std::max(f.x_max, l.x[i]) : l.x[i];
      f.y_max = std::max(f.y_max, l.bytes[i]);
      any = true;
    }
  }
  if (!any) {
    return "<p>Nothing to draw.</p>\n";
  }
  std::string svg = svg_open(aria_label) + axes(f, x_label);
  std::string keys = "<ul class=\"legend\">";
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const std::string c(kPalette[k % std::size(kPalette)]);
    svg += polyline(lines[k], pick(lines[k].x.size(), lines[k].bytes), f, c, k >= std::size(kPalette));
    keys += fmt::format("<li><span style=\"background:{}\"></span>{}</li>", c, escape(lines[k].name));
  }
  return svg + "</svg>\n" + keys + "</ul>\n";
}

std::string histogram(const std::vector<std::int64_t>& values, int bins, const std::string& x_label,
                      const std::string& aria_label) {
  if (values.empty() || bins < 1) {
    return "<p>Nothing to draw.</p>\n";
  }
  const auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  const std::int64_t lo = *lo_it;
  const std::int64_t hi = *hi_it;
  // Bins of whole values: width = ceil(range / bins), at least 1.
  const std::int64_t width = std::max<std::int64_t>(1, (hi - lo + bins) / bins);
  const auto count = static_cast<std::size_t>((hi - lo) / width + 1);
  std::vector<std::int64_t> counts(count, 0);
  for (std::int64_t v : values) {
    ++counts[static_cast<std::size_t>((v - lo) / width)];
  }
  const std::int64_t top = *std::max_element(counts.begin(), counts.end());
  const double plot_w = kWidth - kLeft - kRight;
  const double bar_w = plot_w / static_cast<double>(count);
  const double plot_h = kHeight - kBottom - kTop;
  std::string svg = svg_open(aria_label) + "<g class=\"series\" data-series=\"count\">\n";
  for (std::size_t b = 0; b < count; ++b) {
    const double h = plot_h * static_cast<double>(counts[b]) / static_cast<double>(top);
    const std::int64_t from = lo + static_cast<std::int64_t>(b) * width;
    svg += fmt::format(
        "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#0072B2\">"
        "<title>{}..{}: {}</title></rect>\n",
        kLeft + bar_w * static_cast<double>(b), kTop + plot_h - h, std::max(1.0, bar_w - 1.0), h, from,
        from + width - 1, counts[b]);
  }
  svg += "</g>\n";
  svg += fmt::format(
      "<text x=\"{0}\" y=\"{1}\" font-size=\"11\" text-anchor=\"end\">{2}</text>"
      "<text x=\"{0}\" y=\"{3}\" font-size=\"11\" text-anchor=\"end\">0</text>\n"
      "<text x=\"{4}\" y=\"{5}\" font-size=\"11\">{6}</text><text x=\"{7}\" y=\"{5}\" font-size=\"11\" "
      "text-anchor=\"end\">{8}</text><text x=\"{9}\" y=\"{5}\" font-size=\"11\" "
      "text-anchor=\"middle\">{10}</text>\n",
      kLeft - 4.0, kTop + 4.0, top, kHeight - kBottom, kLeft, kHeight - kBottom + 14.0, lo, kWidth - kRight,
      lo + static_cast<std::int64_t>(count) * width - 1, (kLeft + kWidth) / 2, escape(x_label));
  return svg + "</svg>\n";
}

std::string segment_map(const std::vector<MapSegment>& segments, std::size_t max_rows,
                        const std::string& aria_label) {
  if (segments.empty()) {
    return "<p>No segments.</p>\n";
  }
  // The largest `max_rows` segments, drawn in address order.
  std::vector<std::size_t> order(segments.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return segments[a].size_bytes > segments[b].size_bytes;
  });
  std::int64_t left_out_bytes = 0;
  for (std::size_t i = std::min(max_rows, order.size()); i < order.size(); ++i) {
    left_out_bytes += segments[order[i]].size_bytes;
  }
  const std::size_t left_out = order.size() - std::min(max_rows, order.size());
  order.resize(std::min(max_rows, order.size()));
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return segments[a].address < segments[b].address; });
  std::int64_t biggest = 1;
  for (std::size_t i : order) {
    biggest = std::max(biggest, segments[i].size_bytes);
  }
  constexpr double kRow = 9.0;
  const double height = kRow * static_cast<double>(order.size()) + 8.0;
  const double bar_w = kWidth - 190.0;
  std::string svg = svg_open(aria_label, height);
  std::vector<std::string> kinds;
  for (std::size_t r = 0; r < order.size(); ++r) {
    const MapSegment& seg = segments[order[r]];
    const double y = 4.0 + kRow * static_cast<double>(r);
    const double w =
        std::max(2.0, bar_w * static_cast<double>(seg.size_bytes) / static_cast<double>(biggest));
    svg += fmt::format(
        "<g class=\"segment\" data-pool=\"{}\"><text x=\"0\" y=\"{:.1f}\" font-size=\"8\">0x{:x} {}</text>\n",
        escape(seg.pool), y + 7.0, seg.address, short_bytes(seg.size_bytes));
    double x = 180.0;
    for (const MapBlock& b : seg.blocks) {
      const double bw = w * static_cast<double>(b.size_bytes) /
                        static_cast<double>(std::max<std::int64_t>(1, seg.size_bytes));
      if (std::find(kinds.begin(), kinds.end(), b.kind) == kinds.end()) {
        kinds.push_back(b.kind);
      }
      const auto k = static_cast<std::size_t>(std::find(kinds.begin(), kinds.end(), b.kind) - kinds.begin());
      svg += fmt::format(
          "<rect class=\"block\" data-kind=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
          "fill=\"{}\" stroke=\"#555\" stroke-width=\"0.3\"><title>{}: {}</title></rect>\n",
          escape(b.kind), x, y, bw, kRow - 2.0, colour(b.kind, k), escape(b.kind), short_bytes(b.size_bytes));
      x += bw;
    }
    svg += "</g>\n";
  }
  std::vector<std::pair<std::string, std::string>> keys;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    keys.emplace_back(colour(kinds[k], k), kinds[k]);
  }
  std::string out = svg + "</svg>\n" + legend(keys);
  if (left_out > 0) {
    out += fmt::format("<p>{} smaller segments ({}) not drawn.</p>\n", left_out, short_bytes(left_out_bytes));
  }
  return out;
}

}  // namespace vramsim::html
