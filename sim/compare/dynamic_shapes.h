// Training runs whose batch shape changes from step to step (variable sequence lengths): the distributions
// the shapes are drawn from, and the request sequence of such a run, built from the step simulator.
//
// Distribution syntax (--seq-dist / --batch-dist):
//   N                 every step the same value
//   list:A,B,C        the values in this order, repeated (no randomness)
//   uniform:LO..HI    integers drawn uniformly from [LO, HI]
//   hist:FILE         drawn from a histogram of real values: FILE has one "value count" pair (or a bare
//                     value, count 1) per line; '#' starts a comment
// Draws use std::mt19937_64 (its output sequence is fixed by the C++ standard) and an unbiased range
// reduction written here, so a seed gives the same shapes on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "sim/alloc/request_sequence.h"
#include "sim/models/model_config.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/training/training_options.h"

namespace vramsim {

class ShapeDistribution {
 public:
  // Throws InputError naming `option` (and the file and line for hist:) on malformed text, values < 1 or
  // > 2^24, an empty list or histogram, or LO > HI.
  static ShapeDistribution parse(std::string_view text, std::string_view option);

  // The value for `step` (0-based); list: distributions ignore the generator, the others draw from it.
  std::int64_t draw(std::size_t step, std::mt19937_64& rng) const;
  // The smallest and largest value a draw can produce.
  std::int64_t min_value() const;
  std::int64_t max_value() const;
  const std::string& text() const { return m_text; }

 private:
  enum class Kind : std::uint8_t { kFixed, kList, kUniform, kHistogram };
  Kind m_kind = Kind::kFixed;
  std::vector<std::int64_t> m_values;       // fixed / list / histogram values
  std::vector<std::uint64_t> m_cumulative;  // histogram: running sum of counts
  std::int64_t m_lo = 0;
  std::int64_t m_hi = 0;
  std::string m_text;
};

struct StepShape {
  std::int64_t batch = 1;
  std::int64_t seq = 1;
  auto operator<=>(const StepShape&) const = default;
};

// `steps` shapes: batch from `batch`, seq from `seq`, drawn step by step (batch first) from one generator
// seeded with `seed`.
std::vector<StepShape> draw_shapes(const ShapeDistribution& batch, const ShapeDistribution& seq,
                                   std::size_t steps, std::uint64_t seed);

struct DynamicRun {
  RequestSequence sequence;
  std::vector<std::size_t> step_ends;  // op index after each step's last request
  std::vector<StepShape> shapes;
  std::size_t distinct_shapes = 0;  // graphs built
};

// The request sequence of training steps with the given shapes. Step 1 is the first step of a run at its
// shape (model and batch moved to the device, optimizer states created lazily); every later step k is the
// steady-state step (the second of three) of a run at shape k. Tensors that cross a step boundary (gradients,
// the training loop's held logits, ...) are matched by name: a step frees what the previous step left alive
// under that name, whatever its size. `base` gives everything but batch, seq and steps.
// Throws InputError when the model and options do not combine (as predict does).
// A generated schedule (one shape for every step) as a request sequence, with its step ends.
DynamicRun fixed_shape_run(const ModelConfig& model, const TrainingOptions& options);

DynamicRun build_dynamic_run(const ModelConfig& model, const TrainingOptions& base,
                             const std::vector<StepShape>& shapes);

}  // namespace vramsim
