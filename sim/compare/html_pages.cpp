#include "sim/compare/html_pages.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "sim/report/html_page.h"

namespace vramsim {
namespace {

std::string pct(double v) { return fmt::format("{:.1f} %", 100.0 * v); }

}  // namespace

std::string compare_html(const std::vector<PolicyRunResult>& results, const std::string& source,
                         std::int64_t peak_live_bytes, const std::string& title) {
  std::vector<std::vector<std::string>> rows;
  for (const PolicyRunResult& r : results) {
    rows.push_back({r.policy, html::gib(r.peaks.peak_reserved_bytes), html::gib(r.peaks.peak_allocated_bytes),
                    pct(r.peaks.fragmentation()), html::gib(r.largest_free_block_at_allocated_peak),
                    std::to_string(r.num_device_alloc), std::to_string(r.num_device_free),
                    std::to_string(r.num_ooms)});
  }
  std::string body = fmt::format(
      "<p>{} policies on the requests of {}; peak live {} (no placement can reserve "
      "less).</p>\n",
      results.size(), html::escape(source), html::gib(peak_live_bytes));
  body += html::section("Policies", html::table("policies",
                                                {"policy", "peak reserved", "peak allocated", "fragmentation",
                                                 "largest free block at the allocated peak", "device mallocs",
                                                 "device frees", "OOMs"},
                                                rows));
  std::vector<html::Series> lines;
  for (const PolicyRunResult& r : results) {
    html::Series s{r.policy, {}, {}};
    for (std::size_t i = 0; i < r.curve.size(); ++i) {
      s.x.push_back(static_cast<double>(i + 1));
      s.bytes.push_back(r.curve[i].reserved_bytes);
    }
    lines.push_back(std::move(s));
  }
  if (!results.empty()) {
    html::Series live{"requested bytes alive", {}, {}};
    for (std::size_t i = 0; i < results.front().curve.size(); ++i) {
      live.x.push_back(static_cast<double>(i + 1));
      live.bytes.push_back(results.front().curve[i].requested_bytes);
    }
    lines.push_back(std::move(live));
  }
  body += html::section("Reserved memory over the requests, per policy",
                        html::line_chart(lines, "request", "reserved bytes per policy over the requests") +
                            "<p>The last line is the requested bytes alive (" +
                            html::escape(results.empty() ? "" : results.front().policy) +
                            "'s run): what any policy must hold.</p>\n");
  return html::page(title, body, "vramsim compare: allocator policies simulated on the same requests.");
}

std::string sweep_html(const std::vector<PolicyRunResult>& results, const DynamicRun& run,
                       std::int64_t peak_live_bytes, const std::string& title) {
  std::vector<std::int64_t> seqs;
  std::vector<std::int64_t> batches;
  std::vector<std::int64_t> tokens;
  for (const StepShape& s : run.shapes) {
    seqs.push_back(s.seq);
    batches.push_back(s.batch);
    tokens.push_back(s.batch * s.seq);
  }
  std::string body =
      fmt::format("<p>{} steps, {} distinct shapes, {} requests; peak live {}.</p>\n", run.shapes.size(),
                  run.distinct_shapes, run.sequence.ops().size(), html::gib(peak_live_bytes));
  std::vector<std::vector<std::string>> rows;
  for (const PolicyRunResult& r : results) {
    std::size_t oom_steps = 0;
    for (const StepSample& st : r.steps) {
      oom_steps += st.num_ooms > 0 ? 1 : 0;
    }
    rows.push_back({r.policy, html::gib(r.peaks.peak_reserved_bytes), html::gib(r.peaks.peak_allocated_bytes),
                    pct(r.peaks.fragmentation()), std::to_string(oom_steps)});
  }
  body += html::section(
      "Policies",
      html::table("policies",
                  {"policy", "peak reserved", "peak allocated", "fragmentation", "steps with OOM"}, rows));
  // A histogram per dimension that varies; one that does not is a sentence.
  const auto distribution = [](const std::vector<std::int64_t>& values, const std::string& what) {
    if (std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) == values.end()) {
      return fmt::format("<p>{}: {} at every step.</p>\n", what, values.empty() ? 0 : values.front());
    }
    return "<h3>" + html::escape(what) + "</h3>\n" +
           html::histogram(values, 40, what, "how often each " + what + " was drawn");
  };
  const bool both_vary =
      std::adjacent_find(seqs.begin(), seqs.end(), std::not_equal_to<>()) != seqs.end() &&
      std::adjacent_find(batches.begin(), batches.end(), std::not_equal_to<>()) != batches.end();
  body += html::section("Shapes drawn", distribution(seqs, "sequence length") +
                                            distribution(batches, "batch size") +
                                            (both_vary ? distribution(tokens, "tokens per step") : ""));
  std::vector<html::Series> reserved;
  for (const PolicyRunResult& r : results) {
    html::Series s{r.policy, {}, {}};
    for (const StepSample& st : r.steps) {
      s.x.push_back(static_cast<double>(st.step + 1));
      s.bytes.push_back(st.reserved_bytes);
    }
    reserved.push_back(std::move(s));
  }
  body += html::section("Reserved memory after each step, per policy",
                        html::line_chart(reserved, "step", "reserved bytes after each step, per policy"));
  std::string frag = "<table class=\"fragmentation\"><tr><th>step</th>";
  for (const PolicyRunResult& r : results) {
    frag += "<th>" + html::escape(r.policy) + "</th>";
  }
  frag += "</tr>\n";
  const std::size_t steps = results.empty() ? 0 : results.front().steps.size();
  const std::size_t stride = std::max<std::size_t>(1, steps / 20);
  for (std::size_t i = 0; i < steps; i += stride) {
    frag += fmt::format("<tr><td>{}</td>", i + 1);
    for (const PolicyRunResult& r : results) {
      frag += "<td class=\"n\">" + (i < r.steps.size() ? pct(r.steps[i].fragmentation()) : "") + "</td>";
    }
    frag += "</tr>\n";
  }
  body += html::section("Fragmentation so far (1 - peak active / peak reserved)", frag + "</table>\n");
  return html::page(
      title, body,
      "vramsim sweep: training steps with drawn shapes, simulated through each allocator policy.");
}

}  // namespace vramsim
