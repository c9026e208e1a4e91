#include "sim/predict/html_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace vramsim {
namespace {

constexpr double kWidth = 960.0;
constexpr double kHeight = 360.0;
constexpr double kLeft = 70.0;  // room for the axis labels
constexpr double kBottom = 40.0;
constexpr std::size_t kMaxPoints = 1500;  // samples drawn; the peak sample is always one of them

// Colour per category (colour-blind-safe Okabe-Ito palette, in TensorCategory order).
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
                                    "#56B4E9", "#F0E442", "#999999", "#000000"};

std::string escape(const std::string& text) {
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
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30));
}

std::int64_t total(const PredictedTimeline::MemorySample& m) {
  std::int64_t sum = 0;
  for (std::int64_t b : m.live_bytes) {
    sum += b;
  }
  return sum;
}

// The samples drawn: evenly spaced ones and the highest.
std::vector<std::size_t> drawn_samples(const PredictedTimeline& t) {
  std::vector<std::size_t> out;
  const std::size_t n = t.memory.size();
  const std::size_t stride = std::max<std::size_t>(1, n / kMaxPoints);
  for (std::size_t i = 0; i < n; i += stride) {
    out.push_back(i);
  }
  if (n > 0) {
    out.push_back(std::min(t.peak_sample, n - 1));
    out.push_back(n - 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string chart(const Prediction& p, const PredictedTimeline& t) {
  const std::vector<std::size_t> samples = drawn_samples(t);
  if (samples.empty()) {
    return "<p>No memory events.</p>";
  }
  const bool timed = t.memory.back().time_ns > t.memory.front().time_ns;
  const auto x_of = [&](std::size_t i) {
    const double v =
        timed ? static_cast<double>(t.memory[i].time_ns - t.memory.front().time_ns) /
                    static_cast<double>(t.memory.back().time_ns - t.memory.front().time_ns)
              : static_cast<double>(i) / static_cast<double>(std::max<std::size_t>(1, t.memory.size() - 1));
    return kLeft + v * (kWidth - kLeft - 10.0);
  };
  std::int64_t top = 1;
  for (std::size_t i : samples) {
    top = std::max(top, total(t.memory[i]));
  }
  const std::size_t peak = std::min(t.peak_sample, t.memory.size() - 1);  // where the allocator model peaked
  const double plot_h = kHeight - kBottom - 10.0;
  const auto y_of = [&](std::int64_t bytes) {
    return 10.0 + plot_h * (1.0 - static_cast<double>(bytes) / static_cast<double>(top));
  };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "role=\"img\" "
      "aria-label=\"requested bytes alive over the run, stacked by category\">\n",
      kWidth, kHeight, kWidth, kHeight);
  std::vector<std::int64_t> lower(t.memory.size(), 0);
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    std::int64_t most = 0;
    for (std::size_t i : samples) {
      most = std::max(most, t.memory[i].live_bytes[c]);
    }
    if (most == 0) {
      continue;
    }
    std::string points;
    for (std::size_t i : samples) {
      points += fmt::format("{:.1f},{:.1f} ", x_of(i), y_of(lower[i] + t.memory[i].live_bytes[c]));
    }
    for (auto it = samples.rbegin(); it != samples.rend(); ++it) {
      points += fmt::format("{:.1f},{:.1f} ", x_of(*it), y_of(lower[*it]));
    }
    svg += fmt::format(
        "<g class=\"series\" data-category=\"{}\"><polygon points=\"{}\" fill=\"{}\" "
        "fill-opacity=\"0.85\" stroke=\"none\"/></g>\n",
        t.categories[c], points, kColours[c % std::size(kColours)]);
    for (std::size_t i : samples) {
      lower[i] += t.memory[i].live_bytes[c];
    }
  }
  // axes: bytes at 0, half and the top; time (or event order) along the bottom
  for (double f : {0.0, 0.5, 1.0}) {
    const auto b = static_cast<std::int64_t>(f * static_cast<double>(top));
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ccc\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
        kLeft, kWidth - 10.0, y_of(b), y_of(b), kLeft - 4.0, y_of(b) + 4.0, gib(b));
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", kLeft, kHeight - 12.0,
      timed ? fmt::format("time (roofline estimate), 0 .. {:.1f} ms",
                          static_cast<double>(t.memory.back().time_ns - t.memory.front().time_ns) / 1e6)
            : std::string("allocator events in order (no GPU: no time axis)"));
  svg += fmt::format(
      "<g class=\"peak\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"10\" y2=\"{1:.1f}\" stroke=\"#000\" "
      "stroke-dasharray=\"4 3\"/><text x=\"{2:.1f}\" y=\"24\" font-size=\"12\">peak {3}: step {4}, "
      "{5}, {6}{7}</text></g>\n",
      x_of(peak), kHeight - kBottom, std::min(x_of(peak) + 4.0, kWidth - 380.0), gib(total(t.memory[peak])),
      p.peak_step, escape(p.peak_phase), escape(p.peak_op),
      p.peak_layer >= 0 ? fmt::format(" (layer {})", p.peak_layer) : std::string());
  svg += "</svg>\n";
  std::string legend = "<ul class=\"legend\">";
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    std::int64_t most = 0;
    for (std::size_t i : samples) {
      most = std::max(most, t.memory[i].live_bytes[c]);
    }
    if (most > 0) {
      legend += fmt::format("<li><span style=\"background:{}\"></span>{} (up to {})</li>",
                            kColours[c % std::size(kColours)], t.categories[c], gib(most));
    }
  }
  return svg + legend + "</ul>\n";
}

std::string bill_table(const Prediction& p) {
  const MemoryBill& b = p.bill;
  std::string rows;
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
           {"CUDA context", b.cuda_context}}) {
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n", name,
                        gib(bytes), bytes);
  }
  return "<table class=\"bill\"><tr><th>at the peak of allocated "
         "memory</th><th>GiB</th><th>bytes</th></tr>\n" +
         rows + "</table>\n";
}

}  // namespace

std::string html_report(const Prediction& p, const PredictedTimeline& t, const std::string& title) {
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                     escape(title) +
                     "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1000px}"
                     "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
                     "td.n{text-align:right;font-variant-numeric:tabular-nums}"
                     ".legend{list-style:none;padding:0}.legend li{display:inline-block;margin-right:1em}"
                     ".legend span{display:inline-block;width:12px;height:12px;margin-right:4px;"
                     "-webkit-print-color-adjust:exact;print-color-adjust:exact}</style>\n</head><body>\n";
  page += "<h1>" + escape(title) + "</h1>\n";
  page += fmt::format(
      "<p class=\"verdict\">{}: peak allocated {}, peak reserved {}, headroom {} ({:.1f} % of {}).</p>\n",
      p.fits ? "Fits" : "Does not fit", gib(p.peak_allocated_bytes), gib(p.peak_reserved_bytes),
      gib(p.headroom_bytes), p.headroom_percent, gib(p.total_bytes));
  page += "<h2>Requested bytes alive, by category</h2>\n" + chart(p, t);
  page += "<h2>The bill</h2>\n" + bill_table(p);
  page +=
      "<p>vramsim predict: a simulation, not a measurement; times are the engine's roofline estimate.</p>\n";
  page += "</body></html>\n";
  return page;
}

}  // namespace vramsim
