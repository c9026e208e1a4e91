// Precision regimes as people run them (training_options.h: MasterWeights): a model loaded in bf16 and
// trained with torch.optim keeps bf16 optimizer states and no master copy; DeepSpeed, FSDP and Megatron keep
// fp32 master weights and fp32 states. Expected bytes are worked by hand from the libraries' code:
//   torch/optim/adamw.py _init_group: exp_avg = torch.zeros_like(p), exp_avg_sq = torch.zeros_like(p)
//     (the parameter's dtype: 2 + 2 bytes per bf16 parameter);
//   the fp32 path: a fp32 master copy (4 bytes) and two fp32 moments (4 + 4 bytes) per parameter.
#include <catch2/catch.hpp>

#include <string>

#include "run_cli.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kGpt2Params = 124'439'808;  // tied embeddings (test_step_prediction.cpp)

RequestArgs gpt2_bf16() {
  RequestArgs a;
  a.model = "gpt2";
  a.gpu = "h100";
  a.batch = 1;
  a.seq = 128;
  a.precision = "bf16";
  a.optimizer = "adamw";
  a.steps = 2;
  return a;
}

// The bill at the start of step 2's optimizer phase: parameters, gradients and every state made in step 1.
MemoryBill before_step2_optimizer(const PredictRequest& r) {
  const OpGraph g = build_training_steps(r.model, r.options);
  const AllocationSchedule s = build_allocation_schedule(g);
  const auto begin = s.phase_begin(2, Phase::kOptimizer);
  REQUIRE(begin);
  return live_bill(g, s, begin->event_index);
}

}  // namespace

TEST_CASE("precision bf16 on one GPU: torch.optim keeps bf16 moments and no master copy",
          "[quick][predict]") {
  const PredictRequest r = make_request(gpt2_bf16());
  CHECK(r.options.master_weights == MasterWeights::kNone);
  const MemoryBill b = before_step2_optimizer(r);
  CHECK(b.parameters == 2 * kGpt2Params);
  CHECK(b.gradients == 2 * kGpt2Params);
  CHECK(b.optimizer_states == 2 * 2 * kGpt2Params);  // exp_avg + exp_avg_sq, bf16
  CHECK(predict(r).precision_regime ==
        "bf16 parameters, gradients and optimizer states; no master copy (--master-weights none)");
}

TEST_CASE("precision bf16 with --master-weights fp32: an fp32 master copy and fp32 moments",
          "[quick][predict]") {
  RequestArgs a = gpt2_bf16();
  a.master_weights = "fp32";
  const PredictRequest r = make_request(a);
  const MemoryBill b = before_step2_optimizer(r);
  CHECK(b.parameters == 2 * kGpt2Params);
  CHECK(b.gradients == 2 * kGpt2Params);
  CHECK(b.optimizer_states == (4 + 2 * 4) * kGpt2Params);  // master + exp_avg + exp_avg_sq, fp32
}

TEST_CASE("predict: --master-weights defaults to what each framework does", "[quick][predict]") {
  // DeepSpeed's bf16 ZeRO optimizers keep fp32 partitions (stage_1_and_2.py single_partition_of_fp32_groups,
  // stage3.py fp32_partitioned_groups_flat); FSDP's MixedPrecision keeps fp32 sharded parameters; Megatron's
  // --bf16 steps fp32 main parameters (Float16OptimizerWithFloat16Params); DDP runs torch.optim as it is.
  const auto regime = [](const std::string& extra) {
    RequestArgs a = gpt2_bf16();
    a.world_size = 8;
    if (extra == "zero2") {
      a.zero = 2;
    } else if (extra == "fsdp") {
      a.fsdp = "full-shard";
    } else if (extra == "fsdp2") {
      a.fsdp2 = true;
    } else if (extra == "tp") {
      a.tp = 2;
    }
    return make_request(a, false).options.master_weights;
  };
  CHECK(regime("ddp") == MasterWeights::kNone);
  CHECK(regime("zero2") == MasterWeights::kFp32);
  CHECK(regime("fsdp") == MasterWeights::kFp32);
  CHECK(regime("fsdp2") == MasterWeights::kFp32);
  CHECK(regime("tp") == MasterWeights::kFp32);
}

TEST_CASE("FSDP's default regime: fp32 shards, fp32 gradient shards and fp32 moments, no master copy",
          "[quick][predict]") {
  // --precision bf16 under FSDP1 full-shard over 4 ranks, --master-weights fp32 (the default): a model built
  // in fp32 wrapped with MixedPrecision(param_dtype=bf16). _flat_param.py keeps the FlatParameter's shard in
  // the module's dtype (fp32), _runtime_utils.py _cast_grad_to_param_dtype casts the reduced gradient shard
  // to it, and torch.optim.AdamW steps that shard: zeros_like(p) moments, fp32. GPT-2's 12 layers of
  // 7,087,872 elements and its root (wte 50,257 x 768, wpe 1,024 x 768, ln_f 2 x 768: 39,385,344) all
  // divide by 4: 31,109,952 elements per rank, 4 + 4 + 8 bytes each. Earlier builds kept bf16 shards and
  // gradients (2 + 2 bytes) beside an fp32 master copy in the optimizer states (4 + 8 bytes).
  RequestArgs a = gpt2_bf16();
  a.world_size = 4;
  a.fsdp = "full-shard";
  const PredictRequest r = make_request(a);
  CHECK(r.options.master_weights == MasterWeights::kFp32);
  constexpr std::int64_t kShard = kGpt2Params / 4;
  const MemoryBill b = before_step2_optimizer(r);
  CHECK(b.parameters == 4 * kShard);
  CHECK(b.gradients == 4 * kShard);
  CHECK(b.optimizer_states == 8 * kShard);
  CHECK(predict(r).precision_regime.starts_with("FSDP mixed precision on a model built in fp32"));
}

TEST_CASE("predict: --master-weights only with --precision bf16, known values only", "[quick][predict]") {
  RequestArgs a = gpt2_bf16();
  a.precision = "amp-bf16";
  a.master_weights = "none";
  CHECK_THROWS_WITH(make_request(a),
                    Catch::Contains("--master-weights: the optimizer's copy of bf16 parameters"));
  a = gpt2_bf16();
  a.master_weights = "fp16";
  CHECK_THROWS_WITH(make_request(a), "--master-weights: unknown value 'fp16' (known: fp32, none)");
}

TEST_CASE("bitsandbytes optimizers keep no master copy under either setting", "[quick][predict]") {
  // bitsandbytes' Optimizer8bit steps the bf16 parameter in place from uint8 states (+ an fp32 absmax per
  // 256 values): no fp32 copy of the weights, whatever --master-weights says.
  RequestArgs a = gpt2_bf16();
  a.optimizer = "adamw-8bit";
  a.master_weights = "fp32";
  const PredictRequest r = make_request(a);
  CHECK(!steps_fp32_master(r.options));
  const MemoryBill b = before_step2_optimizer(r);
  CHECK(b.optimizer_states < 3 * kGpt2Params);  // two uint8 moments and their absmax: about 2.03 B each
}

TEST_CASE("predict: --free-logits-before-backward drops the model's output before loss.backward()",
          "[quick][predict]") {
  // torchtitan's train step: `pred = model(inputs); loss = loss_fn(pred, labels); del pred; loss.backward()`.
  // Hugging Face's loop keeps outputs.logits. At the start of backward the difference is the logits tensor,
  // (batch, seq, vocab) in bf16: 2 x 64 x 1024 x 2 bytes for the test Llama.
  RequestArgs a;
  a.model = test::test_data("tiny-llama.config.json").string();
  a.gpu = "h100";
  a.batch = 2;
  a.seq = 64;
  a.precision = "bf16";
  a.steps = 1;
  const auto live_at_backward = [](const PredictRequest& r) {
    const OpGraph g = build_training_steps(r.model, r.options);
    const AllocationSchedule s = build_allocation_schedule(g);
    const auto begin = s.phase_begin(1, Phase::kBackward);
    REQUIRE(begin);
    const MemoryBill b = live_bill(g, s, begin->event_index);
    return b.parameters + b.gradients + b.optimizer_states + b.activations + b.temporaries + b.inputs;
  };
  const std::int64_t kept = live_at_backward(make_request(a));
  a.free_logits = true;
  const std::int64_t freed = live_at_backward(make_request(a));
  CHECK(kept - freed == 2 * 64 * 1024 * 2);
}

TEST_CASE("DeepSpeed casts PEFT's fp32 adapters to the model's bf16, and ZeRO keeps their fp32 masters",
          "[quick][predict][zero]") {
  // deepspeed/runtime/engine.py _configure_distributed_model: `elif self.bfloat16_enabled():
  // self.module.bfloat16()` runs when the engine wraps the PEFT model, after get_peft_model's
  // autocast_adapter_dtype made the adapters fp32. TinyLlama (22 layers, hidden 2,048, 4 key/value heads of
  // 64), PEFT's q_proj and v_proj at r 16: q 16 x 2,048 + 2,048 x 16 = 65,536, v 16 x 2,048 + 256 x 16 =
  // 36,864; 22 x 102,400 = 2,252,800 trainable parameters (divisible by ZeRO's 2 x world alignment).
  // ZeRO-1 on 2 GPUs partitions the fp32 master (4 B) and the two fp32 moments (4 + 4 B):
  //   12 x 2,252,800 / 2 = 13,516,800 B a rank, where fp32 adapters would need no master: 9,011,200 B.
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.batch = 1;
  a.seq = 256;
  a.precision = "bf16";
  a.lora_rank = 16;
  a.world_size = 2;
  a.zero = 1;
  a.steps = 2;
  const Prediction p = predict(make_request(a));
  CHECK(p.trainable_parameters == 2252800);
  CHECK(p.bill.optimizer_states == 13516800);
  // Without DeepSpeed (DDP) the adapters stay fp32: the 4 B parameters and 8 B of moments, no master.
  a.zero = 0;
  CHECK(predict(make_request(a)).bill.optimizer_states == 8 * 2252800);
}
