#include "sim/cli/moe_routing.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/size_format.h"

namespace vramsim::cli {
namespace {

double parse_number(std::string_view text, const std::string& whole) {
  double v = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    throw InputError(fmt::format("--moe-imbalance-dist: '{}' is not uniform:LO..HI (numbers)", whole));
  }
  return v;
}

ImbalancePoint predict_at(const PredictRequest& request, double imbalance) {
  PredictRequest r = request;
  r.options.moe.imbalance = imbalance;
  const Prediction p = predict(r);
  ImbalancePoint point;
  point.imbalance = imbalance;
  point.peak_allocated_bytes = p.peak_allocated_needed_bytes;  // without the device limit
  point.peak_reserved_bytes = p.peak_reserved_bytes;
  point.fits = p.num_ooms == 0;
  return point;
}

}  // namespace

ImbalanceDist parse_imbalance_dist(const std::string& text) {
  constexpr std::string_view kPrefix = "uniform:";
  const std::size_t dots = text.find("..");
  if (text.rfind(kPrefix, 0) != 0 || dots == std::string::npos) {
    throw InputError(fmt::format("--moe-imbalance-dist: '{}' is not uniform:LO..HI", text));
  }
  ImbalanceDist d;
  d.lo = parse_number(std::string_view(text).substr(kPrefix.size(), dots - kPrefix.size()), text);
  d.hi = parse_number(std::string_view(text).substr(dots + 2), text);
  if (!(d.lo >= 1.0 && d.hi >= d.lo)) {
    throw InputError(
        fmt::format("--moe-imbalance-dist: '{}' needs 1 <= LO <= HI (F is the busiest "
                    "expert's tokens over the mean)",
                    text));
  }
  return d;
}

ImbalanceSweep sweep_imbalance(const PredictRequest& request, const ImbalanceDist& dist) {
  ImbalanceSweep s;
  for (int i = 0; i < 4; ++i) {
    s.grid.push_back(predict_at(request, dist.lo + (dist.hi - dist.lo) * i / 3.0));
    if (dist.hi == dist.lo) {
      break;
    }
  }
  // The largest fitting grid point and the next (failing) one bracket the threshold.
  double fit = -1.0, fail = -1.0;
  for (const ImbalancePoint& p : s.grid) {
    if (p.fits) {
      fit = p.imbalance;
    } else if (fail < 0.0 && fit >= 0.0) {
      fail = p.imbalance;
    }
  }
  if (!s.grid.front().fits) {
    s.oom_probability = 1.0;
    return s;
  }
  s.any_fits = true;
  if (fail < 0.0) {  // every grid point fits, the highest too
    s.largest_fitting = dist.hi;
    return s;
  }
  while (fail - fit > s.tolerance) {
    const double mid = (fit + fail) / 2.0;
    (predict_at(request, mid).fits ? fit : fail) = mid;
  }
  s.largest_fitting = fit;
  s.oom_probability = (dist.hi - fit) / (dist.hi - dist.lo);
  return s;
}

void print_imbalance_sweep(const ImbalanceSweep& s, const ImbalanceDist& dist) {
  fmt::print("routing model    F (busiest expert's tokens / mean) uniform on [{}, {}]\n", dist.lo, dist.hi);
  fmt::print("  {:>6}  {:>16}  {:>16}  {}\n", "F", "allocated needed", "peak reserved", "fits");
  for (const ImbalancePoint& p : s.grid) {
    fmt::print("  {:>6.2f}  {:>16}  {:>16}  {}\n", p.imbalance,
               format_bytes_short(static_cast<Bytes>(p.peak_allocated_bytes)),
               format_bytes_short(static_cast<Bytes>(p.peak_reserved_bytes)), p.fits ? "yes" : "OOM");
  }
  if (!s.any_fits) {
    fmt::print("largest F fitting none: OOM at F = {}\n", dist.lo);
  } else if (s.oom_probability == 0.0) {
    fmt::print("largest F fitting {} (the whole range)\n", dist.hi);
  } else {
    fmt::print("largest F fitting {:.2f} (bisection to {})\n", s.largest_fitting, s.tolerance);
  }
  fmt::print("OOM probability  {:.2f} = P(F > the largest fitting F) under the routing model\n",
             s.oom_probability);
}

}  // namespace vramsim::cli
