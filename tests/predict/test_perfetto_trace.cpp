// `predict --perfetto`: the Chrome trace-event JSON that Perfetto and chrome://tracing open. Checked against
// the trace-event format's rules (a "traceEvents" list; "X" complete events with ts and dur in microseconds,
// pid and tid; "C" counters with numeric args; "i" instant events with a scope; "M" metadata naming the
// process and the threads) and against the prediction itself: one slice per op; the requested-bytes series
// sum, at their largest, to the peak of requested bytes; the allocator counter's largest allocated and
// reserved are the prediction's peaks; and the cudaMalloc minus cudaFree instants, summed in order, reach
// the peak reserved (reserved memory is exactly what cudaMalloc handed out and cudaFree did not take back).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "run_cli.h"
#include "sim/predict/perfetto_trace.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

TEST_CASE("perfetto: predict's timeline as trace events", "[predict]") {
  RequestArgs a;
  a.model = "gpt2";
  a.gpu = "h100";
  a.batch = 2;
  a.seq = 256;
  a.steps = 1;
  PredictRequest r = make_request(a);
  r.keep_timeline = true;
  const Prediction p = predict(r);
  REQUIRE(p.timeline);
  const nlohmann::json j = nlohmann::json::parse(perfetto_json(p.timeline->ops, p.timeline->memory, "test"));
  REQUIRE(j.contains("traceEvents"));
  std::size_t slices = 0;
  std::int64_t most = 0;
  std::int64_t most_allocated = 0;
  std::int64_t most_reserved = 0;
  std::int64_t device_bytes = 0;
  std::int64_t most_device_bytes = 0;
  double last_counter_ts = -1.0;
  for (const nlohmann::json& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    CHECK(e["pid"] == 1);
    if (ph == "X") {
      ++slices;
      CHECK(e["ts"].is_number());
      CHECK(e["dur"].get<double>() >= 0.0);
      CHECK(e["tid"].is_number_integer());
      CHECK(e["name"].is_string());
    } else if (ph == "C" && e["name"] == "allocator") {
      CHECK(e["ts"].get<double>() >= last_counter_ts);  // in time order
      last_counter_ts = e["ts"];
      most_allocated = std::max(most_allocated, e["args"]["allocated"].get<std::int64_t>());
      most_reserved = std::max(most_reserved, e["args"]["reserved"].get<std::int64_t>());
    } else if (ph == "i") {
      CHECK(e["s"] == "t");
      CHECK(e["ts"].is_number());
      const std::int64_t bytes = e["args"]["bytes"];
      if (e["name"] == "cudaMalloc") {
        device_bytes += bytes;
      } else if (e["name"] == "cudaFree") {
        device_bytes -= bytes;
      }
      most_device_bytes = std::max(most_device_bytes, device_bytes);
    } else if (ph == "C") {
      CHECK(e["name"] == "requested bytes alive");
      std::int64_t sum = 0;
      for (const auto& [category, bytes] : e["args"].items()) {
        CHECK(bytes.get<std::int64_t>() >= 0);
        sum += bytes.get<std::int64_t>();
      }
      most = std::max(most, sum);
    } else {
      CHECK(ph == "M");
    }
  }
  CHECK(slices == p.ops);
  CHECK(most == p.peak_requested_bytes);
  CHECK(most_allocated == p.peak_allocated_bytes);
  CHECK(most_reserved == p.peak_reserved_bytes);
  CHECK(most_device_bytes == p.peak_reserved_bytes);
  CHECK(perfetto_json(p.timeline->ops, p.timeline->memory, "test") ==
        perfetto_json(p.timeline->ops, p.timeline->memory, "test"));
}

TEST_CASE("cli: predict --perfetto writes the file", "[predict]") {
  const std::string path = "vramsim_test_perfetto.json";
  int status = -1;
  test::run_cli("predict --model gpt2 --gpu h100 --batch 1 --seq 128 --steps 1 --perfetto " + path, &status);
  CHECK(status == 0);
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  std::remove(path.c_str());
  CHECK(nlohmann::json::parse(text.str())["traceEvents"].size() > 100);
}
