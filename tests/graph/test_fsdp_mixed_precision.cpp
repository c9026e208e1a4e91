// FSDP mixed precision on a model built in fp32 (--precision bf16 with --master-weights fp32, FSDP's
// default: FSDP1 MixedPrecision(param_dtype=bf16), FSDP2 MixedPrecisionPolicy(param_dtype=bf16), as
// torchtitan runs it): what each rank keeps, in what dtype, and the transient low-precision copies. Bytes are
// worked by hand from PyTorch's code:
//   FSDP1 torch/distributed/fsdp/_flat_param.py: the FlatParameter and its shard (_local_shard) keep the
//     module's dtype, fp32; init_flat_param_attributes makes and frees _mp_shard (bf16, the shard's size),
//     _full_param_padded (bf16) and _full_prec_full_param_padded (fp32, padded unsharded size);
//     _use_low_precision_shard allocates _mp_shard before each all-gather and
//     _free_low_precision_sharded_param frees it after; _runtime_utils.py _cast_grad_to_param_dtype casts the
//     reduced shard to the FlatParameter's dtype, fp32.
//   FSDP2 torch/distributed/fsdp/_fully_shard/_fsdp_param.py _init_sharded_param: the sharded parameter keeps
//     the module's dtype (fp32), dim 0 padded; _fsdp_collectives.py _get_param_all_gather_inputs casts the
//     unit's shards into one flat param_dtype buffer (flat_foreach_copy_input); foreach_reduce casts
//     reduce_output to orig_dtype (fp32).
//   torch.optim.AdamW steps those fp32 shards: exp_avg and exp_avg_sq fp32 (torch.zeros_like(p)), no master
//     copy and no fp32 copy of the gradients.
// The old model (bf16 shards and bf16 gradient shards plus an fp32 master copy) fails every category check.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// The tiny Llama of graph_test_util.h over 4 ranks (sizes as in test_fsdp_flat_param_grad.cpp). A decoder
// layer: q, k, v, o 4 x 64 x 64, gate, up, down 3 x 64 x 172, two norms of 64: 49,536 elements, 12,384 per
// rank (FSDP1's flat shard; FSDP2's dim-0 shards 16 x 64 x 4 + 43 x 64 x 2 + 16 x 172 + 16 x 2 are the same
// count). The root: embed_tokens and lm_head 1000 x 64 each, the final norm 64: 128,064, 32,016 per rank.
// Every parameter's element count divides by 4, so the optimizer's per-parameter shards add up to the same.
constexpr std::int64_t kLayer = 49'536;
constexpr std::int64_t kRoot = 128'064;
constexpr std::int64_t kPerRank = (2 * kLayer + kRoot) / 4;  // 56,784 elements

OpGraph build(const std::string& scheme, MasterWeights master) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.master_weights = master;
  o.zero_grad_set_to_none = false;  // the gradient shards stay to the end, where persistent_bytes looks
  o.data_parallel.scheme = scheme;
  o.data_parallel.world_size = 4;
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

void check_model_states_fp32(const OpGraph& g) {
  // fp32 shards (4 B), fp32 gradient shards (4 B), AdamW's two fp32 moments (8 B); no master copy.
  CHECK(test::persistent_bytes(g, TensorCategory::kParameter) == 4 * kPerRank);
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 4 * kPerRank);
  CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 8 * kPerRank);
  CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.master").empty());
  CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.grad_fp32").empty());
}

}  // namespace

TEST_CASE("fsdp1 mixed precision: fp32 flat shards, fp32 gradient shards, fp32 moments, no master",
          "[quick][graph]") {
  const OpGraph g = build("fsdp-full-shard", MasterWeights::kFp32);
  check_model_states_fp32(g);
  // Lazy init, per handle: _mp_shard (2 B x 12,384), _full_param_padded (2 B x 49,536) and
  // _full_prec_full_param_padded (4 B x 49,536). Then each unshard's _mp_shard: layer 0 is gathered for its
  // forward and again for its backward in each of the 2 steps: 1 + 4 of 2 B x 12,384.
  CHECK(test::sizes_named(g, "layers.0._full_prec_full_param_padded") == std::vector<Bytes>{4 * kLayer});
  CHECK(test::sizes_named(g, "root._full_prec_full_param_padded") == std::vector<Bytes>{4 * kRoot});
  CHECK(test::sizes_named(g, "layers.0._mp_shard") == std::vector<Bytes>(5, 2 * kLayer / 4));
  // Construction flattens the fp32 module (_init_param_handle_from_module: 4 B x 49,536); the unsharded
  // parameters the unit computes with are bf16 (2 B x 49,536).
  CHECK(test::sizes_named(g, "layers.0.flat_param.unsharded").at(0) == 4 * kLayer);
  CHECK(test::sizes_named(g, "layers.0.flat_param.unsharded").at(1) == 2 * kLayer);
  test::check_schedule_invariants(g, build_allocation_schedule(g));
}

TEST_CASE("fsdp2 mixed precision: fp32 sharded parameters and gradients, a bf16 copy-in per all-gather",
          "[quick][graph]") {
  const OpGraph g = build("fsdp2-full-shard", MasterWeights::kFp32);
  check_model_states_fp32(g);
  // The shards cast into one bf16 buffer per all-gather (2 B x 12,384 for a layer): 2 gathers per step.
  CHECK(test::sizes_named(g, "layers.0.flat_foreach_copy_input") == std::vector<Bytes>(4, 2 * kLayer / 4));
  // reduce_dtype unset: the reduction runs in bf16 (2 B x 12,384), cast to orig_dtype fp32 (4 B x 12,384).
  CHECK(test::sizes_named(g, "layers.0.reduce_output").at(0) == 2 * kLayer / 4);
  CHECK(test::sizes_named(g, "layers.0.reduce_output.orig_dtype").at(0) == 4 * kLayer / 4);
  test::check_schedule_invariants(g, build_allocation_schedule(g));
}

TEST_CASE("fsdp on a model loaded in bf16 (--master-weights none): bf16 shards, gradients and moments",
          "[quick][graph]") {
  // fsdp_qlora's pure bf16 (mp_policy None): nothing is fp32; torch.optim's moments take the shard's dtype.
  for (const char* scheme : {"fsdp-full-shard", "fsdp2-full-shard"}) {
    const OpGraph g = build(scheme, MasterWeights::kNone);
    CHECK(test::persistent_bytes(g, TensorCategory::kParameter) == 2 * kPerRank);
    CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 2 * kPerRank);
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 4 * kPerRank);
    CHECK(test::sizes_named(g, "layers.0._mp_shard").empty());
    CHECK(test::sizes_named(g, "layers.0.flat_foreach_copy_input").empty());
  }
}

TEST_CASE("fsdp mixed precision composes with LoRA: the adapters' shards are fp32 too", "[quick][graph]") {
  // A model built in fp32 with PEFT adapters (their dtype: the base weight's) under PEFT's
  // fsdp_auto_wrap_policy: the frozen FlatParameters are fp32 shards with no gradient; each adapter is a
  // FlatParameter of its own, fp32, and only the adapters have gradients and moments. q_proj and v_proj
  // (PEFT's Llama default) of rank 8 in 2 layers: lora_A 8 x 64 and lora_B 64 x 8 each, 4,096 elements,
  // 1,024 per rank.
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kFp32;
  o.zero_grad_set_to_none = false;
  o.lora.rank = 8;
  o.data_parallel.scheme = "fsdp-full-shard";
  o.data_parallel.fsdp_peft_wrap = true;
  o.data_parallel.world_size = 4;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  constexpr std::int64_t kAdapters = 2 * 2 * (8 * 64 + 64 * 8) / 4;
  CHECK(test::persistent_bytes(g, TensorCategory::kParameter) == 4 * (kPerRank + kAdapters));
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 4 * kAdapters);
  CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 8 * kAdapters);
}

TEST_CASE("fsdp1 NO_SHARD mixed precision: whole fp32 FlatParameters, a whole bf16 _mp_shard per use",
          "[quick][graph]") {
  // torch/distributed/fsdp/_flat_param.py (PyTorch 2.2-2.5): with NO_SHARD the FlatParameter is the whole
  // fp32 module (227,136 elements per rank: 2 layers of 49,536 and the root's 128,064); pre_unshard's
  // _use_low_precision_shard makes _mp_shard, bf16, of the whole FlatParameter (2 B x 49,536 for a layer);
  // unshard() gathers nothing (needs_unshard() is False); post_unshard keeps it; post_reshard frees it after
  // the unit's forward (_post_forward_reshard runs for every handle, the root's too) and after its
  // backward. _reduce_grad_no_shard all-reduces the flat gradient in place and _cast_grad_to_param_dtype
  // makes it fp32. So a rank keeps 4 + 4 + 8 B per parameter of the whole model, no master copy.
  constexpr std::int64_t kWhole = 2 * kLayer + kRoot;
  const OpGraph g = build("fsdp-no-shard", MasterWeights::kFp32);
  CHECK(test::persistent_bytes(g, TensorCategory::kParameter) == 4 * kWhole);
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 4 * kWhole);
  CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 8 * kWhole);
  CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.master").empty());
  // Layer 0's _mp_shard: made for its forward and again for its backward, in each of the 2 steps.
  CHECK(test::sizes_named(g, "layers.0._mp_shard") == std::vector<Bytes>(4, 2 * kLayer));
  CHECK(test::sizes_named(g, "root._mp_shard") == std::vector<Bytes>(4, 2 * kRoot));
  CHECK(test::sizes_named(g, "layers.0.flat_param.unsharded").empty());  // nothing is all-gathered
  test::check_schedule_invariants(g, build_allocation_schedule(g));
}

TEST_CASE("fsdp2 CPUOffloadPolicy: shards, gradients and the optimizer on the host, shards copied per gather",
          "[quick][graph]") {
  // torch/distributed/_composable/fsdp/_fsdp_param.py (PyTorch 2.4-2.6): _init_sharded_param moves each
  // padded shard to the host (.cpu(), pinned); all_gather_inputs copies it back for every all-gather
  // (sharded_param_data.to(self.device, non_blocking=True)), then _to_dtype_if_needed casts it to
  // param_dtype; _get_param_all_gather_inputs' foreach fast path excludes offload_to_cpu, so each parameter
  // gets its own copies, dropped after the copy-in. _fsdp_collectives.py foreach_reduce copies each gradient
  // shard to the host. layers.0 q_proj: 64 x 64 over 4 ranks = 1,024 elements per shard, gathered for the
  // forward and the backward of each of the 2 steps.
  for (const MasterWeights master : {MasterWeights::kNone, MasterWeights::kFp32}) {
    const bool fp32 = master == MasterWeights::kFp32;
    INFO("master weights " << (fp32 ? "fp32" : "none"));
    TrainingOptions o = test::small_options();
    o.precision = Precision::kBf16;
    o.master_weights = master;
    o.zero_grad_set_to_none = false;
    o.data_parallel.scheme = "fsdp2-full-shard";
    o.data_parallel.world_size = 4;
    o.data_parallel.offload_params = true;
    o.data_parallel.offload_optimizer = true;
    const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
    CHECK(test::persistent_bytes(g, TensorCategory::kParameter) == 0);
    CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 0);
    CHECK(test::persistent_bytes(g, TensorCategory::kOptimizerState) == 0);
    const Bytes element = fp32 ? 4 : 2;  // the shards' dtype: the module's
    CHECK(g.host_memory.parameters == element * kPerRank);
    CHECK(g.host_memory.gradients == element * kPerRank);
    CHECK(g.host_memory.optimizer_states == 2 * element * kPerRank);  // AdamW's moments, the shards' dtype
    CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.sharded.to(device)") ==
          std::vector<Bytes>(4, element * 1'024));
    CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.sharded.to(param_dtype)") ==
          (fp32 ? std::vector<Bytes>(4, 2 * 1'024) : std::vector<Bytes>{}));
    test::check_schedule_invariants(g, build_allocation_schedule(g));
  }
}
