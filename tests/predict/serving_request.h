// The request the serving tests share (vLLM V1, vLLM's pipeline stages, SGLang, the serving fit and the
// weight formats): one model served on an 80 GB H100 in bf16 with the paged cache, a one-request batch of a
// 128-token prompt and two new tokens (the served batch is not what these tests check: the start-up is).
// Each test sets what it varies (tp, pp, quantization, engine) on the copy it gets.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "sim/predict/step_prediction.h"

namespace vramsim::test {

inline RequestArgs served_on_h100(const std::string& model = "llama-3.1-8b") {
  RequestArgs a;
  a.model = model;
  a.gpu = "h100-80gb";
  a.batch = 1;
  a.seq = 128;
  a.generate = 2;
  a.kv_cache = "paged";
  a.precision = "bf16";
  return a;
}

// The paged-cache sizing of a prediction (vLLM V1 or SGLang); fails the test when the run has none.
inline const Prediction::Generation::Paged& paged_of(const Prediction& p) {
  REQUIRE(p.generation);
  REQUIRE(p.generation->paged);
  return *p.generation->paged;
}

// vLLM V1's start-up lines of a prediction; fails the test when the run has none.
inline const Prediction::Generation::Paged::V1& v1_of(const Prediction& p) {
  const Prediction::Generation::Paged& g = paged_of(p);
  REQUIRE(g.v1);
  return *g.v1;
}

// The paged-cache sizing of a vLLM V1 run, its start-up lines required.
inline const Prediction::Generation::Paged& v1_paged_of(const Prediction& p) {
  const Prediction::Generation::Paged& g = paged_of(p);
  REQUIRE(g.v1);
  return g;
}

}  // namespace vramsim::test
