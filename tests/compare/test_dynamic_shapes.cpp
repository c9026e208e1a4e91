// Shape distributions and spliced dynamic-shape runs.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <set>

#include "sim/compare/dynamic_shapes.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"

using namespace vramsim;

TEST_CASE("shape distributions: fixed, list, uniform, histogram", "[quick][compare]") {
  std::mt19937_64 rng(7);
  const ShapeDistribution fixed = ShapeDistribution::parse("512", "--seq");
  CHECK(fixed.draw(0, rng) == 512);
  CHECK(fixed.draw(9, rng) == 512);

  const ShapeDistribution list = ShapeDistribution::parse("list:128,256,1024", "--seq");
  CHECK(list.draw(0, rng) == 128);
  CHECK(list.draw(1, rng) == 256);
  CHECK(list.draw(2, rng) == 1024);
  CHECK(list.draw(3, rng) == 128);  // cycles
  CHECK(list.min_value() == 128);
  CHECK(list.max_value() == 1024);

  // uniform:3..6 over 4000 draws: every value appears, nothing else does, each near 1/4 (binomial sd ~27).
  const ShapeDistribution uniform = ShapeDistribution::parse("uniform:3..6", "--seq");
  std::map<std::int64_t, int> counts;
  for (int i = 0; i < 4000; ++i) {
    ++counts[uniform.draw(static_cast<std::size_t>(i), rng)];
  }
  REQUIRE(counts.size() == 4);
  for (const auto& [value, n] : counts) {
    CHECK(value >= 3);
    CHECK(value <= 6);
    CHECK(n > 1000 - 150);
    CHECK(n < 1000 + 150);
  }

  // A histogram: 10 at weight 3, 20 at weight 1 -> about 3:1.
  const std::string path = "vramsim_test_hist.txt";
  {
    std::ofstream f(path);
    f << "# length count\n10 3\n\n20 1  # the long ones\n";
  }
  const ShapeDistribution hist = ShapeDistribution::parse("hist:" + path, "--seq");
  int tens = 0;
  for (int i = 0; i < 4000; ++i) {
    tens += hist.draw(0, rng) == 10 ? 1 : 0;
  }
  CHECK(tens > 3000 - 150);
  CHECK(tens < 3000 + 150);
  std::remove(path.c_str());
}

TEST_CASE("shape distributions: a seed gives the same shapes, another seed others", "[quick][compare]") {
  const ShapeDistribution batch = ShapeDistribution::parse("list:1,2", "--batch");
  const ShapeDistribution seq = ShapeDistribution::parse("uniform:128..4096", "--seq");
  const std::vector<StepShape> a = draw_shapes(batch, seq, 50, 42);
  CHECK(draw_shapes(batch, seq, 50, 42) == a);
  CHECK(draw_shapes(batch, seq, 50, 43) != a);
  CHECK(a[0].batch == 1);
  CHECK(a[1].batch == 2);
  // std::mt19937_64's output is fixed by the C++ standard, so the
  // draws are too: the first seq is the rejection-free reduction of the generator's first output.
  std::mt19937_64 rng(42);
  const std::uint64_t first = rng();
  CHECK(a[0].seq == 128 + static_cast<std::int64_t>(first % (4096 - 128 + 1)));
}

TEST_CASE("shape distributions: bad text is a one-line error naming the option", "[quick][compare]") {
  const auto error_of = [](const std::string& text) {
    try {
      (void)ShapeDistribution::parse(text, "--seq");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("uniform:600..100"), Catch::StartsWith("--seq: empty range 600..100"));
  CHECK_THAT(error_of("uniform:100"), Catch::StartsWith("--seq: expected uniform:LO..HI"));
  CHECK_THAT(error_of("list:"), Catch::StartsWith("--seq: not an integer"));
  CHECK_THAT(error_of("list:128,,256"), Catch::StartsWith("--seq: not an integer"));
  CHECK_THAT(error_of("0"), Catch::StartsWith("--seq: 0 is outside [1, 16777216]"));
  CHECK_THAT(error_of("99999999999"), Catch::StartsWith("--seq: 99999999999 is outside"));
  CHECK_THAT(error_of("gaussian:5"), Catch::StartsWith("--seq: not an integer: 'gaussian:5'"));
  CHECK_THAT(error_of("hist:/nonexistent/lengths.txt"),
             Catch::StartsWith("--seq: cannot open histogram file"));
  const std::string path = "vramsim_test_bad_hist.txt";
  {
    std::ofstream f(path);
    f << "128 4\n256 many\n";
  }
  CHECK_THAT(error_of("hist:" + path), Catch::StartsWith("--seq: " + path + ":2: not an integer: 'many'"));
  std::remove(path.c_str());
}

TEST_CASE("dynamic run with one shape repeats the fixed-shape run's steps", "[quick][compare]") {
  // Two independent constructions of the same run: the fixed-shape run follows tensor ids through one
  // 4-step graph; the dynamic run splices step 1 and then step 2 of 3-step graphs by tensor name. Steps 1-3
  // must agree request for request (step 4 of the fixed run also ends the training loop).
  const ModelConfig model = model_preset("gpt2");
  TrainingOptions o;
  o.batch = 2;
  o.seq = 96;
  o.steps = 4;
  const DynamicRun fixed = fixed_shape_run(model, o);
  const DynamicRun dynamic = build_dynamic_run(model, o, std::vector<StepShape>(4, StepShape{2, 96}));
  REQUIRE(fixed.step_ends.size() == 4);
  REQUIRE(dynamic.step_ends.size() == 4);
  CHECK(dynamic.distinct_shapes == 1);
  for (int k = 0; k < 3; ++k) {
    CHECK(fixed.step_ends[static_cast<std::size_t>(k)] == dynamic.step_ends[static_cast<std::size_t>(k)]);
  }
  const auto& f = fixed.sequence.ops();
  const auto& d = dynamic.sequence.ops();
  for (std::size_t i = 0; i < fixed.step_ends[2]; ++i) {
    INFO("request " << i);
    REQUIRE(f[i].kind == d[i].kind);
    if (f[i].kind == RequestOp::Kind::kAlloc) {
      REQUIRE(f[i].size_bytes == d[i].size_bytes);
    } else {
      // The freed allocation is the same one: same ordinal, hence same size and same birth.
      REQUIRE(f[i].alloc_id == d[i].alloc_id);
    }
  }
}

TEST_CASE("dynamic run with varying lengths: what is alive between steps does not grow", "[quick][compare]") {
  const ModelConfig model = model_preset("gpt2");
  TrainingOptions o;
  o.precision = Precision::kAmpBf16;
  const std::vector<StepShape> shapes = {{2, 64}, {2, 200}, {1, 128}, {2, 64}, {3, 32}, {2, 200}};
  const DynamicRun run = build_dynamic_run(model, o, shapes);
  CHECK(run.distinct_shapes == 4);
  REQUIRE(run.step_ends.size() == shapes.size());
  // Count live allocations at each step end: from step 2 on, the same tensors (parameters, gradients,
  // optimizer states, the loop's held variables) are alive, whatever the shape.
  std::vector<bool> live(run.sequence.alloc_count(), false);
  std::size_t live_count = 0;
  std::vector<std::size_t> at_end;
  std::size_t next = 0;
  for (std::size_t i = 0; i < run.sequence.ops().size(); ++i) {
    const RequestOp& op = run.sequence.ops()[i];
    if (op.kind == RequestOp::Kind::kAlloc) {
      live[op.alloc_id] = true;
      ++live_count;
    } else {
      REQUIRE(live[op.alloc_id]);
      live[op.alloc_id] = false;
      --live_count;
    }
    while (next < run.step_ends.size() && run.step_ends[next] == i + 1) {
      at_end.push_back(live_count);
      ++next;
    }
  }
  REQUIRE(at_end.size() == shapes.size());
  for (std::size_t k = 1; k < at_end.size(); ++k) {
    CHECK(at_end[k] == at_end[0]);
  }
}
