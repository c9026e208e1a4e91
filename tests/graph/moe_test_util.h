// The setup the mixture-of-experts graph tests share (test_megatron_moe.cpp, test_torchtitan_moe.cpp): a
// Mixtral-shaped model small enough to count by hand, and the byte totals the tests compare with their hand
// calculations, and the options every MoE test starts from (each test adds its library's precision).
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "graph/graph_test_util.h"
#include "sim/graph/op_graph.h"
#include "sim/models/model_config.h"
#include "sim/training/training_options.h"
#include "test_paths.h"

namespace vramsim::test {

// Mixtral-8x7B's real config.json (its MoE fields: 8 experts, top-2, SwiGLU experts), shrunk: d_model 64,
// expert ff 96, 4 heads of 16 (no GQA), vocabulary 512, `layers` decoder layers.
inline ModelConfig tiny_mixtral(int layers = 1) {
  ModelConfig m = load_model(
      (source_dir() / "tests" / "data" / "hf_configs" / "mistralai__Mixtral-8x7B-v0.1.config.json").string());
  m.vocab_size = 512;
  m.d_model = 64;
  m.n_layers = layers;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.head_dim = 16;
  m.d_ff = m.moe.expert_d_ff = 96;
  return m;
}

// batch 2 x seq 32 = 64 tokens (small_options), one forward-and-backward step, `impl`'s MoE layer with expert
// parallelism `ep` and the routing model's imbalance, data parallelism `scheme` over `world_size` ranks.
inline TrainingOptions moe_options(MoeImpl impl, int ep, double imbalance, const std::string& scheme,
                                   int world_size) {
  TrainingOptions o = small_options();
  o.steps = 1;
  o.moe.impl = impl;
  o.moe.expert_parallel = ep;
  o.moe.imbalance = imbalance;
  o.data_parallel.scheme = scheme;
  o.data_parallel.world_size = world_size;
  return o;
}

// size_bytes summed over the tensors named exactly `name` (0 when there is none).
inline Bytes bytes_named(const OpGraph& g, const std::string& name) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name == name) {
      total += t.size_bytes;
    }
  }
  return total;
}

// size_bytes summed over the tensors whose name contains `part` and ends with `suffix`.
inline Bytes bytes_matching(const OpGraph& g, const std::string& part, const std::string& suffix) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.find(part) != std::string::npos && t.name.size() >= suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace vramsim::test
