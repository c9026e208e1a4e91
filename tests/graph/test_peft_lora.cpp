// PEFT LoRA (sim/finetune/peft_lora.h): lora.Linear.forward's tensors, what autograd saves once the base
// weight is frozen, and the adapters' parameters, gradients and optimizer states, worked by hand.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/finetune/peft_lora.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "sim/torch/torch_ops.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

using test::persistent_bytes;

}  // namespace

TEST_CASE("lora: one adapted linear allocates and saves what lora.Linear.forward does", "[quick][graph]") {
  // x (T = 8 tokens, in = 32) -> base (out = 48), r = 4, lora_dropout 0.1, fp32.
  constexpr std::int64_t T = 8, in = 32, out = 48, r = 4;
  OpGraph g;
  EagerTape tape(g);
  TorchOps ops(tape);
  tape.begin_op("setup", "setup");
  const VarId w = tape.parameter("proj.weight", {out, in}, DType::kFloat32);
  tape.freeze(w);
  const VarId a = tape.parameter("proj.lora_A.default.weight", {r, in}, DType::kFloat32);
  const VarId b = tape.parameter("proj.lora_B.default.weight", {out, r}, DType::kFloat32);
  const VarId x = tape.parameter("hidden", {T, in}, DType::kFloat32);  // a tensor that requires grad
  const LoraAdapters adapters{{w, LoraAdapter{a, b, {a, b}, {}}}};
  LoraOptions options;
  options.rank = static_cast<int>(r);
  options.dropout = 0.1;
  ops.set_lora(&adapters, &options, true);
  const std::size_t first = g.tensors().size();
  const VarId y = ops.linear("proj", x, w);

  // result = base(x); dropout(x) and its bool mask; lora_A; lora_B; * scaling; result + ...
  std::vector<Bytes> sizes;
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    sizes.push_back(g.tensors()[i].size_bytes);
  }
  CHECK(sizes == std::vector<Bytes>{T * out * 4, T * in * 4, T * in, T * r * 4, T * out * 4, T * out * 4,
                                    T * out * 4});
  // Saved for backward: the mask (dropout), the dropped input (lora_A's weight gradient) and lora_A's
  // output (lora_B's); the frozen base mm saves nothing, lora_B's output and the scaled copy are temporaries.
  Bytes saved = 0;
  for (std::size_t i = first; i < g.tensors().size(); ++i) {
    if (g.tensors()[i].category == TensorCategory::kActivation) {
      saved += g.tensors()[i].size_bytes;
    }
  }
  CHECK(saved == T * in + T * in * 4 + T * r * 4);

  // Backward: the adapters get gradients, the frozen weight none.
  const VarId loss = ops.mean_all("loss", y);
  tape.drop(y);
  tape.backward(loss);
  CHECK(tape.grad(w) == kNoTensor);
  CHECK(tape.grad(a) != kNoTensor);
  CHECK(tape.grad(b) != kNoTensor);
}

TEST_CASE("lora: adapters, their gradients and optimizer states on a small Llama", "[quick][graph]") {
  // tiny_model: d_model 64, 2 layers, 4 heads of 16 (4 key/value heads). PEFT's default targets for llama
  // are q_proj and v_proj, both 64 -> 64: per module lora_A 4 x 64 + lora_B 64 x 4 = 512 fp32 elements.
  // 2 layers x 2 modules x 512 x 4 B = 8,192 B of adapters.
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.zero_grad_set_to_none = false;  // keep the gradients to count them
  const OpGraph full = build_training_steps(m, o);
  o.lora.rank = 4;
  const OpGraph lora = build_training_steps(m, o);
  CHECK(persistent_bytes(lora, TensorCategory::kParameter) ==
        persistent_bytes(full, TensorCategory::kParameter) + 8192);
  CHECK(persistent_bytes(lora, TensorCategory::kGradient) == 8192);            // the adapters' only
  CHECK(persistent_bytes(lora, TensorCategory::kOptimizerState) == 2 * 8192);  // AdamW exp_avg, exp_avg_sq
  test::check_schedule_invariants(lora, build_allocation_schedule(lora));

  // all-linear: q, k, v, o (64 -> 64: 512 each), gate and up (64 -> 172: 4 x 64 + 172 x 4 = 944 each),
  // down (172 -> 64: 4 x 172 + 64 x 4 = 944): per layer 4 x 512 + 3 x 944 = 4,880 elements; lm_head never.
  // 2 layers x 4,880 x 4 B = 39,040 B.
  parse_lora_targets("all-linear", o.lora);
  const OpGraph all = build_training_steps(m, o);
  CHECK(persistent_bytes(all, TensorCategory::kGradient) == 39040);
}

TEST_CASE("lora: targets and options are checked", "[quick][graph]") {
  LoraOptions l;
  CHECK_THROWS_AS(parse_lora_targets("q_proj,,v_proj", l), InputError);
  CHECK_THROWS_AS(parse_lora_targets("q_proj;rm -rf", l), InputError);
  parse_lora_targets("q_proj,v_proj", l);
  CHECK(l.targets == std::vector<std::string>{"q_proj", "v_proj"});
  l.rank = -1;
  CHECK_THROWS_AS(validate(l), InputError);
  l.rank = 8;
  l.dropout = 1.0;
  CHECK_THROWS_AS(validate(l), InputError);
  // matching is by module-name suffix, as PEFT's: "q_proj" matches "model.layers.0.self_attn.q_proj"
  const auto weight = [](const char* name) { return ParameterShape{name, {64, 64}, 0}; };
  CHECK(is_lora_target(weight("model.layers.0.self_attn.q_proj.weight"), {"q_proj"}, false));
  CHECK_FALSE(is_lora_target(weight("model.layers.0.self_attn.qq_proj.weight"), {"q_proj"}, false));
  CHECK_FALSE(is_lora_target(weight("lm_head.weight"), {}, true));
  const ModelConfig m = test::tiny_model("llama-2-7b");
  // a target that matches nothing is an error, as PEFT's "Target modules ... not found in the base model"
  TrainingOptions o = test::small_options();
  o.lora.rank = 4;
  parse_lora_targets("not_a_module", o.lora);
  CHECK_THROWS_AS(build_training_steps(m, o), InputError);
}

TEST_CASE("lora: trainable parameters as PEFT prints them for Llama-2-7B", "[quick][graph]") {
  // facebookresearch/llama-recipes fine-tuning log of meta-llama/Llama-2-7b-hf with LoraConfig(r=8,
  // target_modules=["q_proj", "v_proj"]): "trainable params: 4,194,304 || all params: 6,742,609,920 ||
  // trainable%: 0.06220594176090199". By hand: 32 layers x 2 modules x 8 x (4,096 + 4,096) = 4,194,304.
  LoraOptions l;
  l.rank = 8;
  const ParameterCount c = count_parameters(model_preset("llama-2-7b"), l);
  CHECK(c.trainable == 4194304);
  CHECK(c.total == 6742609920);
}

TEST_CASE("lora: only torch.nn.Linear layers can be wrapped", "[quick][graph]") {
  // the CS336 staff model's Linear is its own nn.Module, which PEFT refuses to target
  ModelConfig m = test::tiny_model("cs336-small");
  m.code = "cs336-basics";
  TrainingOptions o = test::small_options();
  o.lora.rank = 4;
  parse_lora_targets("q_proj", o.lora);
  CHECK_THROWS_AS(build_training_steps(m, o), InputError);
}

TEST_CASE("lora: gpt_bigcode's nn.Linear weights are (out, in), not Conv1D's (in, out)", "[quick][graph]") {
  // bigcode/gpt_bigcode-santacoder (tests/data/hf_configs): multi-query c_attn maps 2,048 -> 2,048 + 2 x 128.
  // Adapters on c_attn, r 4: lora_A 4 x 2,048 and lora_B 2,304 x 4 = 17,408 fp32 elements per layer; with two
  // layers 139,264 B of adapter gradients. Taking the weight as Conv1D's (in, out) made lora_B's output 2,048
  // wide, which cannot be added to the 2,304-wide base output.
  ModelConfig m = load_model(
      (test::source_dir() / "tests" / "data" / "hf_configs" / "bigcode__gpt_bigcode-santacoder.config.json")
          .string());
  m.n_layers = 2;
  TrainingOptions o = test::small_options();
  o.zero_grad_set_to_none = false;
  o.lora.rank = 4;
  const OpGraph g = build_training_steps(m, o);
  CHECK(persistent_bytes(g, TensorCategory::kGradient) == 139264);
  o.bnb.format = BnbFormat::kNf4;  // QLoRA: the quantized weight keeps nn.Linear's (out, in)
  CHECK_NOTHROW(build_training_steps(m, o));
}

TEST_CASE("lora with data parallelism: only the adapters are reduced, sharded and stepped",
          "[quick][graph]") {
  // The small Llama above, r 4 on q_proj and v_proj, fp32: 8 adapter tensors of 256 elements (lora_A 4 x 64,
  // lora_B 64 x 4), 8,192 B; 4 ranks.
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.zero_grad_set_to_none = false;
  o.lora.rank = 4;
  o.data_parallel.world_size = 4;
  const auto with = [&](const std::string& scheme) {
    TrainingOptions d = o;
    d.data_parallel.scheme = scheme;
    return build_training_steps(m, d);
  };
  // DDP: the Reducer buckets the parameters that require grad: the adapters' 8,192 B fit the first bucket
  // (1 MiB), one buffer; every rank keeps the full adapter gradients and AdamW states.
  const OpGraph ddp = with("ddp");
  CHECK(persistent_bytes(ddp, TensorCategory::kCommunication) == 8192);
  CHECK(persistent_bytes(ddp, TensorCategory::kGradient) == 8192);
  CHECK(persistent_bytes(ddp, TensorCategory::kOptimizerState) == 2 * 8192);
  // ZeRO-2: the optimizer (given the adapters only) partitions their states and gradients: 256 / 4 = 64
  // elements of each tensor per rank, 8 x 64 x 4 B = 2,048 B; the frozen base stays whole on every rank. The
  // step flattens the gradient partition (2,048 elements padded to a multiple of 2 x 4, a quarter each: 512
  // fp32 elements, already fp32 so no copy) and frees the parameters' gradients (free_grad_in_param_list),
  // whatever zero_grad does later.
  const OpGraph zero2 = with("zero2");
  CHECK(persistent_bytes(zero2, TensorCategory::kOptimizerState) == 2 * 2048);
  CHECK(test::sizes_named(zero2, "zero.single_grad_partition") == std::vector<Bytes>{2048, 2048});
  CHECK(persistent_bytes(zero2, TensorCategory::kGradient) == 0);
  CHECK(persistent_bytes(zero2, TensorCategory::kParameter) ==
        persistent_bytes(ddp, TensorCategory::kParameter));
  // FSDP2: every parameter is sharded along dim 0 (frozen ones too; every dim 0 here divides by 4, the
  // adapters' lora_A 4 rows: one per rank); only the adapters get gradient shards.
  const OpGraph fsdp2 = with("fsdp2-full-shard");
  CHECK(persistent_bytes(fsdp2, TensorCategory::kOptimizerState) == 2 * 2048);
  CHECK(persistent_bytes(fsdp2, TensorCategory::kGradient) == 2048);
  CHECK(persistent_bytes(fsdp2, TensorCategory::kParameter) * 4 ==
        persistent_bytes(ddp, TensorCategory::kParameter));
  // Model parallelism: tests/predict/test_lora_model_parallel.cpp.
}

TEST_CASE("lora with FSDP1: the frozen parameters' gradients are computed and sharded anyway",
          "[quick][graph]") {
  // FSDP's docstring on use_orig_params=True with frozen parameters: "the gradient memory usage will be
  // higher than expected (namely, equivalent to not freezing those parameters)". So where the optimizer step
  // begins, a rank holds the gradient shards of full fine-tuning plus the adapters' (8 x 64 x 4 B = 2,048 B,
  // the previous test), while its optimizer states are the adapters' only.
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.data_parallel.world_size = 4;
  o.data_parallel.scheme = "fsdp-full-shard";
  const auto at_step = [&](const TrainingOptions& opts) {
    const OpGraph g = build_training_steps(m, opts);
    const AllocationSchedule s = build_allocation_schedule(g);
    return live_bill(g, s, s.phase_begin(1, Phase::kOptimizer)->event_index);
  };
  const MemoryBill full = at_step(o);
  o.lora.rank = 4;
  const MemoryBill lora = at_step(o);
  CHECK(lora.gradients == full.gradients + 2048);
  // AdamW's states (the first step makes them before the update): the adapters' shards only, 2 x 2,048 B.
  const OpGraph g = build_training_steps(m, o);
  CHECK(persistent_bytes(g, TensorCategory::kOptimizerState) == 2 * 2048);
}

TEST_CASE("lora with FSDP1 under PEFT's fsdp_auto_wrap_policy: only the adapters get gradient shards",
          "[quick][graph]") {
  // PEFT's policy (peft/utils/other.py fsdp_auto_wrap_policy, which the Trainer installs for a PeftModel)
  // makes each lora_A / lora_B its own FlatParameter: the layers' FlatParameters hold frozen parameters only
  // and get no gradient. Each adapter (256 fp32 elements, padded to a multiple of 4 ranks: 256) leaves a
  // shard of 64 elements, 8 x 64 x 4 B = 2,048 B in all, where the optimizer step begins.
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.data_parallel.world_size = 4;
  o.data_parallel.scheme = "fsdp-full-shard";
  o.data_parallel.fsdp_peft_wrap = true;
  o.lora.rank = 4;
  const OpGraph g = build_training_steps(m, o);
  const AllocationSchedule s = build_allocation_schedule(g);
  CHECK(live_bill(g, s, s.phase_begin(1, Phase::kOptimizer)->event_index).gradients == 2048);
  // Adapters inside their layer's unit with use_orig_params=False: FSDP refuses to flatten mixed
  // requires_grad
  // (_flat_param.py _validate_tensors_to_flatten).
  o.data_parallel.fsdp_peft_wrap = false;
  o.data_parallel.fsdp_use_orig_params = false;
  CHECK_THROWS_WITH(build_training_steps(m, o), Catch::Contains("uniform requires_grad"));
}

TEST_CASE("qlora with FSDP1: the packed weight, stored as bf16, is sharded like any bf16 tensor",
          "[quick][graph]") {
  // bitsandbytes' quantize_4bit: out = torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1)). q_proj of
  // the small Llama is 64 x 64 = 4,096 elements -> (4,096 + 1) // 4 = 1,024 bf16 elements, 2,048 B, which
  // FSDP1's construction moves to the GPU and flattens with the layer's bf16 norms into one FlatParameter
  // (the shard is that FlatParameter's, not the weight's own).
  const ModelConfig m = test::tiny_model("llama-2-7b");
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.lora.rank = 4;
  o.bnb.format = BnbFormat::kNf4;
  o.bnb.quant_storage = DType::kBFloat16;
  o.bnb.prepare_kbit_training = false;
  o.data_parallel.world_size = 4;
  o.data_parallel.scheme = "fsdp-full-shard";
  o.data_parallel.fsdp_peft_wrap = true;
  const OpGraph g = build_training_steps(m, o);
  CHECK(test::sizes_named(g, "model.layers.0.self_attn.q_proj.weight.to(device)") ==
        std::vector<Bytes>{2048});
  // Stored as uint8 beside bf16 norms, one FlatParameter would mix dtypes: FSDP refuses.
  o.bnb.quant_storage = DType::kUInt8;
  CHECK_THROWS_WITH(build_training_steps(m, o), Catch::Contains("uniform dtype"));
}
