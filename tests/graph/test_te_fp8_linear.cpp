// Transformer Engine's FP8 training (sim/training/te_fp8_linear.h): te.Linear under
// fp8_autocast(DelayedScaling()), every nn.Linear converted as Accelerate's convert_model converts it.
// Bytes worked by hand from TransformerEngine (NVIDIA/TransformerEngine d0067d0d):
//   transformer_engine/common/recipe/__init__.py DelayedScaling: amax_history_len = 1024 by default;
//   transformer_engine/pytorch/module/base.py init_fp8_meta_tensors: num_gemms * 3 forward and num_gemms * 2
//     backward quantizers; quantization.py DelayedScalingRecipeState: scale = torch.ones(n) fp32,
//     amax_history = torch.zeros(amax_history_len, n) fp32;
//   transformer_engine/pytorch/module/linear.py _linear_forward_impl: the input quantized row-wise and
//     column-wise, then inputmat.update_usage(rowwise_usage=False) and saved_inputmat = inputmat (the
//     transposed fp8 copy); the weight quantized with columnwise_usage = is_grad_enabled and not is_fsdp2,
//     wt_save = weightmat; Linear.forward: cache_name = None if is_first_microbatch is None else "weight".
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph/graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/training/te_fp8_linear.h"

using namespace vramsim;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bytes of saved-for-backward tensors whose producing op's name ends with `suffix`.
Bytes saved_by(const OpGraph& g, const std::string& suffix) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kActivation && ends_with(g.op(t.producer).name, suffix)) {
      total += t.size_bytes;
    }
  }
  return total;
}

// The tensors whose name ends with `suffix`: how many, and their bytes.
std::pair<int, Bytes> named(const OpGraph& g, const std::string& suffix) {
  std::pair<int, Bytes> out{0, 0};
  for (const Tensor& t : g.tensors()) {
    if (ends_with(t.name, suffix)) {
      ++out.first;
      out.second += t.size_bytes;
    }
  }
  return out;
}

// A 2-layer Llama of width 64 (q_proj, o_proj 64 -> 64; k_proj, v_proj 64 -> 32; MLP 128; vocabulary 1024):
// every linear's dimensions are multiples of 16, so all 7 per layer and lm_head become te.Linear.
ModelConfig tiny() {
  ModelConfig m = test::tiny_model("tinyllama-1.1b", 2);
  m.d_ff = 128;
  m.vocab_size = 1024;
  return m;
}
constexpr std::int64_t kT = 64;  // batch 2 x 32 tokens

TrainingOptions te_options() {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kNone;
  o.steps = 1;
  o.float8.recipe = Float8Recipe::kTeDelayed;
  return o;
}

}  // namespace

TEST_CASE("Transformer Engine: fp8_meta of every te.Linear, DelayedScaling's 1024-row amax history",
          "[quick][graph][fp8]") {
  const OpGraph g = build_training_steps(tiny(), te_options());
  // 2 layers x 7 linears + lm_head = 15 modules; scaling_fwd: (1024, 3) fp32, scaling_bwd: (1024, 2) fp32
  CHECK(named(g, "fp8_meta.scaling_fwd.amax_history") == std::pair<int, Bytes>{15, 15 * 1024 * 3 * 4});
  CHECK(named(g, "fp8_meta.scaling_bwd.amax_history") == std::pair<int, Bytes>{15, 15 * 1024 * 2 * 4});
  CHECK(named(g, "fp8_meta.scaling_fwd.scale") == std::pair<int, Bytes>{15, 15 * 3 * 4});
  // te_linear_bytes' hand formula agrees: (3 + 2) x (1024 + 1) x 4
  CHECK(te_linear_bytes(kT, 64, 64, te_options().float8).fp8_meta == 20500);
  TrainingOptions shorter = te_options();
  shorter.float8.amax_history_len = 16;
  CHECK(named(build_training_steps(tiny(), shorter), "fp8_meta.scaling_fwd.amax_history").second ==
        15 * 16 * 3 * 4);
}

TEST_CASE("Transformer Engine: what te.Linear saves for backward", "[quick][graph][fp8]") {
  SECTION("the input's transposed fp8 copy and the fp8 weight with its transpose (TE's default)") {
    const OpGraph g = build_training_steps(tiny(), te_options());
    // layer 0's q_proj: x (64 tokens x 64) -> one byte per element, transposed; its row-wise data is dropped
    CHECK(saved_by(g, "layers.0.attn.q_proj.input.fp8_transpose") == kT * 64);
    CHECK(saved_by(g, "layers.0.attn.q_proj.input.fp8") == 0);
    // the weight (64 x 64): row-wise data and the transpose, one byte each, and its one-element scale_inv
    CHECK(saved_by(g, "layers.0.attn.q_proj.weight.fp8") == 64 * 64);
    CHECK(saved_by(g, "layers.0.attn.q_proj.weight.fp8_transpose") == 64 * 64);
    CHECK(saved_by(g, "layers.0.attn.k_proj.weight.fp8_transpose") == 64 * 32);
    // down_proj: its input is the MLP's (64 tokens x 128)
    CHECK(saved_by(g, "layers.1.mlp.down_proj.input.fp8_transpose") == kT * 128);
  }
  SECTION("--fp8-weight-cache: the weight workspaces live for the run, nothing weight-sized is saved") {
    TrainingOptions o = te_options();
    o.float8.te_weight_cache = true;
    const OpGraph g = build_training_steps(tiny(), o);
    // every converted weight: per layer 2 x 64 x 64 + 2 x 32 x 64 + 3 x 128 x 64 = 36,864; lm_head 65,536
    const Bytes weights = 2 * 36864 + 1024 * 64;
    CHECK(named(g, "._fp8_workspaces.weight._data").second == weights);
    CHECK(named(g, "._fp8_workspaces.weight._transpose").second == weights);
    CHECK(saved_by(g, "layers.0.attn.q_proj.weight.fp8") == 0);
    CHECK(saved_by(g, "layers.0.attn.q_proj.input.fp8_transpose") == kT * 64);
  }
}

TEST_CASE("Transformer Engine: refusals", "[quick][graph][fp8]") {
  TrainingOptions o = te_options();
  o.tensor_parallel = 2;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o),
                    "--float8 te: te.Linear's tensor parallelism (parallel_mode, tp_group) is not modelled "
                    "with --tp (vramsim)");
  o = te_options();
  o.checkpointing = Checkpointing::kSelectiveOp;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o),
                    "--float8 te: with --checkpointing selective-op is not modelled (vramsim)");
  o = te_options();
  o.float8.amax_history_len = 0;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o), "--fp8-amax-history-len: 0 is not in 1..1048576");
  o = te_options();
  o.float8.recipe = Float8Recipe::kTensorwise;
  o.float8.te_weight_cache = true;
  CHECK_THROWS_WITH(build_training_steps(tiny(), o),
                    "--fp8-weight-cache: te.Linear's weight workspaces (use it with --float8 te)");
}
