#include "sim/compare/dynamic_shapes.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"

namespace vramsim {
namespace {

constexpr std::int64_t kMaxValue = std::int64_t{1} << 24;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// A positive integer in [1, 2^24]; `where` names the option (and file position) in the error.
std::int64_t parse_value(std::string_view text, const std::string& where) {
  text = trim(text);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size()) {
    throw InputError(fmt::format("{}: not an integer: '{}'", where, text));
  }
  if (v < 1 || v > kMaxValue) {
    throw InputError(fmt::format("{}: {} is outside [1, {}]", where, v, kMaxValue));
  }
  return v;
}

// Uniform in [0, n) without modulo bias: reject the top partial range of the 64-bit output.
std::uint64_t below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
  std::uint64_t x = rng();
  while (x >= limit) {
    x = rng();
  }
  return x % n;
}

}  // namespace

ShapeDistribution ShapeDistribution::parse(std::string_view text, std::string_view option) {
  ShapeDistribution d;
  d.m_text = std::string(text);
  const std::string where(option);
  if (text.starts_with("list:")) {
    d.m_kind = Kind::kList;
    std::string_view rest = text.substr(5);
    while (true) {
      const std::size_t comma = rest.find(',');
      d.m_values.push_back(parse_value(rest.substr(0, comma), where));
      if (comma == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(comma + 1);
    }
  } else if (text.starts_with("uniform:")) {
    d.m_kind = Kind::kUniform;
    const std::string_view range = text.substr(8);
    const std::size_t dots = range.find("..");
    if (dots == std::string_view::npos) {
      throw InputError(fmt::format("{}: expected uniform:LO..HI, got '{}'", where, text));
    }
    d.m_lo = parse_value(range.substr(0, dots), where);
    d.m_hi = parse_value(range.substr(dots + 2), where);
    if (d.m_lo > d.m_hi) {
      throw InputError(fmt::format("{}: empty range {}..{}", where, d.m_lo, d.m_hi));
    }
  } else if (text.starts_with("hist:")) {
    d.m_kind = Kind::kHistogram;
    const std::string path(text.substr(5));
    std::string text_of_file;
    try {
      text_of_file = read_input_file(path, "histogram file", kMaxSmallInputBytes);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: cannot open histogram file '{}': {}", where, path, e.what()));
    }
    std::istringstream in(text_of_file);
    std::map<std::int64_t, std::uint64_t> counts;
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      std::string_view l = line;
      l = trim(l.substr(0, l.find('#')));
      if (l.empty()) {
        continue;
      }
      const std::string at = fmt::format("{}: {}:{}", where, path, line_no);
      const std::size_t space = l.find_first_of(" \t,");
      const std::int64_t value = parse_value(l.substr(0, space), at);
      const std::int64_t count = space == std::string_view::npos ? 1 : parse_value(l.substr(space + 1), at);
      counts[value] += static_cast<std::uint64_t>(count);
    }
    if (counts.empty()) {
      throw InputError(fmt::format("{}: histogram file '{}' has no values", where, path));
    }
    std::uint64_t total = 0;
    for (const auto& [value, count] : counts) {
      total += count;
      d.m_values.push_back(value);
      d.m_cumulative.push_back(total);
    }
  } else {
    d.m_kind = Kind::kFixed;
    d.m_values.push_back(parse_value(text, where));
  }
  return d;
}

std::int64_t ShapeDistribution::draw(std::size_t step, std::mt19937_64& rng) const {
  switch (m_kind) {
    case Kind::kFixed:
      return m_values.front();
    case Kind::kList:
      return m_values[step % m_values.size()];
    case Kind::kUniform:
      return m_lo + static_cast<std::int64_t>(below(rng, static_cast<std::uint64_t>(m_hi - m_lo) + 1));
    case Kind::kHistogram: {
      const std::uint64_t x = below(rng, m_cumulative.back());
      const auto it = std::upper_bound(m_cumulative.begin(), m_cumulative.end(), x);
      return m_values[static_cast<std::size_t>(it - m_cumulative.begin())];
    }
  }
  return 0;
}

std::int64_t ShapeDistribution::min_value() const {
  return m_kind == Kind::kUniform ? m_lo : *std::min_element(m_values.begin(), m_values.end());
}

std::int64_t ShapeDistribution::max_value() const {
  return m_kind == Kind::kUniform ? m_hi : *std::max_element(m_values.begin(), m_values.end());
}

std::vector<StepShape> draw_shapes(const ShapeDistribution& batch, const ShapeDistribution& seq,
                                   std::size_t steps, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<StepShape> out;
  out.reserve(steps);
  for (std::size_t i = 0; i < steps; ++i) {
    StepShape s;
    s.batch = batch.draw(i, rng);
    s.seq = seq.draw(i, rng);
    out.push_back(s);
  }
  return out;
}

namespace {

// A three-step run at one shape: its graph (for tensor names) and schedule, and where its second and third
// steps begin. The second step is the steady-state piece: it frees what step 1 left alive and leaves alive
// what step 3 frees; the last step of any run also holds the end of the training loop (its variables
// released), which must not appear in the middle of a spliced run.
struct ShapeRun {
  OpGraph graph;
  AllocationSchedule schedule;
  std::size_t step2_begin = 0;
  std::size_t step3_begin = 0;
};

ShapeRun build_shape_run(const ModelConfig& model, TrainingOptions options, StepShape shape) {
  options.batch = shape.batch;
  options.seq = shape.seq;
  options.steps = 3;
  validate(options);
  ShapeRun r{build_training_steps(model, options), {}, 0, 0};
  r.schedule = build_allocation_schedule(r.graph);
  // A step starts at its first phase (zero_grad at the top of the loop, when the loop has one).
  const auto step_begin = [&r](int step) {
    for (const PhaseMarker& p : r.schedule.phases) {
      if (p.step >= step) {
        return p.event_index;
      }
    }
    return r.schedule.events.size();
  };
  r.step2_begin = step_begin(2);
  r.step3_begin = step_begin(3);
  return r;
}

}  // namespace

DynamicRun fixed_shape_run(const ModelConfig& model, const TrainingOptions& options) {
  validate(options);
  const OpGraph graph = build_training_steps(model, options);
  const AllocationSchedule schedule = build_allocation_schedule(graph);
  DynamicRun out;
  out.distinct_shapes = 1;
  out.shapes.assign(static_cast<std::size_t>(options.steps), StepShape{options.batch, options.seq});
  std::vector<TensorId> request_tensor;
  Workload workload = workload_from_schedule(schedule, model.name, &request_tensor);
  const std::vector<RequestOp>& ops = workload.requests.ops();
  int current = 1;  // setup counts with step 1, as in build_dynamic_run
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Tensor& tensor = graph.tensor(request_tensor[i]);
    const int step = std::max(
        1, graph.op(ops[i].kind == RequestOp::Kind::kAlloc ? tensor.producer : tensor.last_consumer()).step);
    for (; current < step; ++current) {
      out.step_ends.push_back(i);
    }
  }
  for (; current <= options.steps; ++current) {
    out.step_ends.push_back(ops.size());
  }
  out.sequence = std::move(workload.requests);
  return out;
}

DynamicRun build_dynamic_run(const ModelConfig& model, const TrainingOptions& base,
                             const std::vector<StepShape>& shapes) {
  DynamicRun out;
  out.shapes = shapes;
  std::map<StepShape, ShapeRun> runs;
  // Tensors alive in the spliced run, by name, with their allocation ids (oldest first).
  std::unordered_map<std::string, std::vector<std::size_t>> live_by_name;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    auto it = runs.find(shapes[k]);
    if (it == runs.end()) {
      it = runs.emplace(shapes[k], build_shape_run(model, base, shapes[k])).first;
    }
    const ShapeRun& r = it->second;
    const std::size_t begin = k == 0 ? 0 : r.step2_begin;
    const std::size_t end = k == 0 ? r.step2_begin : r.step3_begin;
    std::unordered_map<TensorId, std::size_t> local;       // tensors allocated in this piece -> allocation id
    const std::size_t first = out.sequence.alloc_count();  // allocation ids below this are earlier steps'
    for (std::size_t i = begin; i < end; ++i) {
      const TraceEvent& e = r.schedule.events[i];
      const TensorId t = r.schedule.event_tensor[i];
      const std::string& name = r.graph.tensor(t).name;
      if (e.action == TraceAction::kAlloc) {
        const std::size_t id = out.sequence.add_alloc(e.size_bytes, e.stream);
        local.emplace(t, id);
        live_by_name[name].push_back(id);
      } else if (e.action == TraceAction::kFreeRequested) {
        std::vector<std::size_t>& ids = live_by_name[name];
        std::size_t id = 0;
        if (const auto l = local.find(t); l != local.end()) {
          id = l->second;
        } else {
          // Made by an earlier step under this name: the oldest such allocation still alive.
          const auto earlier =
              std::find_if(ids.begin(), ids.end(), [first](std::size_t a) { return a < first; });
          if (earlier == ids.end()) {
            throw std::logic_error(fmt::format(
                "dynamic run: step {} frees '{}', which no earlier step left alive", k + 1, name));
          }
          id = *earlier;
        }
        ids.erase(std::find(ids.begin(), ids.end(), id));
        out.sequence.add_free(id);
      }
    }
    out.step_ends.push_back(out.sequence.ops().size());
  }
  out.distinct_shapes = runs.size();
  return out;
}

}  // namespace vramsim
