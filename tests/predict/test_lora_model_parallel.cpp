// PEFT with Megatron model parallelism: pipeline stages adapt their own layers, whichever tuner; tensor
// parallelism as PEFT adapts Megatron's parallel linears (peft/tuners/lora/tp_layer.py LoraParallelLinear,
// LoraConfig.megatron_config): "when the target layer parallel_linear is RowParallelLinear ... we need to
// split the lora matrix A into rows, and the lora_B at this time should be a complete linear layer; In the
// same way, when the target layer is ColumnParallelLinear, we perform column segmentation on lora_B, while
// lora_A is still a complete linear layer." Counts by hand.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

RequestArgs lora_on_tp(int tp, const std::string& targets) {
  RequestArgs a;
  a.model = "llama-2-7b";
  a.gpu = "h100";
  a.precision = "bf16";
  a.batch = 1;
  a.seq = 1024;
  a.checkpointing = "full";
  a.lora_rank = 16;
  a.lora_targets = targets;
  a.tp = tp;
  a.world_size = tp;
  a.steps = 1;
  return a;
}

// TinyLlama's LoRA step (PEFT's q_proj and v_proj, r 16) on 2 pipeline stages, two steps.
RequestArgs tinyllama_on_two_stages() {
  RequestArgs a = lora_on_tp(1, "");
  a.model = "tinyllama-1.1b";
  a.seq = 256;
  a.steps = 2;
  a.pp = 2;
  a.world_size = 2;
  return a;
}

}  // namespace

TEST_CASE("LoRA under tensor parallelism: PEFT's LoraParallelLinear adapters on the rank's slice",
          "[quick][predict][lora-tp]") {
  // Llama-2-7B (hidden 4,096, MLP 11,008, 32 layers) at TP 2, r = 16, every linear but the output layer:
  //   q, k, v (ColumnParallelLinear, 2,048 of the 4,096 outputs a rank): lora_A whole 16 x 4,096 = 65,536,
  //     lora_B split 2,048 x 16 = 32,768 -> 98,304 each, 294,912;
  //   o_proj (RowParallelLinear, 2,048 of the inputs): lora_A split 16 x 2,048 = 32,768, lora_B whole
  //     4,096 x 16 = 65,536 -> 98,304;
  //   gate, up (column, 5,504 outputs): 65,536 + 5,504 x 16 = 88,064 -> 153,600 each, 307,200;
  //   down (row, 5,504 inputs): 16 x 5,504 = 88,064 + 65,536 -> 153,600.
  // 854,016 a layer, 27,328,512 for the 32 layers.
  const Prediction all = predict(make_request(lora_on_tp(2, "all-linear")));
  CHECK(all.trainable_parameters == 27328512);
  // PEFT's default targets for llama, q_proj and v_proj: 2 x 98,304 x 32 = 6,291,456.
  const Prediction qv = predict(make_request(lora_on_tp(2, "")));
  CHECK(qv.trainable_parameters == 6291456);
  // At TP 1 the same adapters are 2 x (65,536 + 65,536) x 32 = 8,388,608: lora_A whole either way.
  CHECK(predict(make_request(lora_on_tp(1, ""))).trainable_parameters == 8388608);
  // Megatron keeps fp32 master weights of bf16 parameters (the default under --tp), but PEFT's adapters are
  // fp32 already (autocast_adapter_dtype) and Float16OptimizerWithFloat16Params steps an fp32 parameter as
  // it is: AdamW's two fp32 moments only, 8 B x 6,291,456 = 50,331,648 B, in the second step's bill.
  RequestArgs two_steps = lora_on_tp(2, "");
  two_steps.steps = 2;
  CHECK(predict(make_request(two_steps)).bill.optimizer_states == 50331648);
}

TEST_CASE("LoRA on pipeline stages: each stage adapts the linears of its own layers",
          "[quick][predict][lora-tp]") {
  // TinyLlama (22 layers, hidden 2,048, 4 key/value heads of 64) on 2 stages of 11 layers (Megatron's even
  // split); PEFT's default targets q_proj and v_proj, r = 16: q 16 x 2,048 + 2,048 x 16 = 65,536, v 16 x
  // 2,048
  // + 256 x 16 = 36,864, 102,400 a layer. The report is stage 1's (its peak reserved is the higher); its
  // 11 layers' adapters are stepped with two fp32 moments (fp32 adapters, no master copy): 11 x 102,400 x 8
  // B.
  RequestArgs a = tinyllama_on_two_stages();
  CHECK(predict(make_request(a)).bill.optimizer_states == 11 * 102400 * 8);
  // and at TP 2 too: q 16 x 2,048 + 1,024 x 16 = 49,152, v 16 x 2,048 + 128 x 16 = 34,816 a layer
  a.tp = 2;
  a.world_size = 4;
  CHECK(predict(make_request(a)).bill.optimizer_states == 11 * (49152 + 34816) * 8);
}

TEST_CASE("PEFT's other linear tuners on pipeline stages: each stage adapts its own layers",
          "[quick][predict][lora-tp]") {
  // TinyLlama (22 layers, hidden 2,048, MLP 5,632, 4 key/value heads of 64: k and v give 256 outputs) on 2
  // stages of 11 layers; stage 0 (layers 0-10 and the frozen embedding) is the one reported. Every
  // adapter is fp32 (autocast_adapter_dtype) and stepped by AdamW with two fp32 moments, 8 B a trainable
  // parameter in the second step's bill; a layer's count from each tuner's update_layer:
  RequestArgs a = tinyllama_on_two_stages();
  a.pp_stage = 0;
  a.lora_rank = 8;
  const auto stage_states = [](RequestArgs r) { return predict(make_request(r)).bill.optimizer_states; };
  // IA3 (peft/tuners/ia3/layer.py), llama's targets k_proj, v_proj, down_proj with down_proj feedforward:
  // (out, 1) for k and v, (1, in) for down_proj: 256 + 256 + 5,632 = 6,144 a layer.
  a.peft_method = "ia3";
  CHECK(stage_states(a) == 11 * 6144 * 8);
  // LoHa r 8 on q_proj and v_proj (peft/tuners/loha/layer.py: hada_w1_a (out, r), hada_w1_b (r, in),
  // hada_w2_a, hada_w2_b the same): 2 x 8 x (2,048 + 2,048) = 65,536 and 2 x 8 x (256 + 2,048) = 36,864.
  a.peft_method = "loha";
  CHECK(stage_states(a) == 11 * (65536 + 36864) * 8);
  // VeRA r 256 (peft/tuners/vera/layer.py): trainable vera_lambda_b (out) and vera_lambda_d (r); the
  // shared projections vera_A / vera_B are frozen buffers: 2,048 + 256 and 256 + 256.
  a.peft_method = "vera";
  a.lora_rank = 256;
  CHECK(stage_states(a) == 11 * (2304 + 512) * 8);
  // OFT, block size 16 (peft/tuners/oft/layer.py): in / 16 = 128 blocks of 16 x 15 / 2 = 120 free
  // entries for q and for v: 2 x 15,360.
  a.peft_method = "oft";
  a.lora_rank = 0;  // OFTConfig takes r or oft_block_size, not both
  a.oft_block_size = 16;
  CHECK(stage_states(a) == 11 * 30720 * 8);
  // BOFT, block size 4, one butterfly factor (peft/tuners/boft/layer.py: boft_R (1, in / 4, 4, 4),
  // boft_s (out, 1)): q 8,192 + 2,048, v 8,192 + 256.
  a.peft_method = "boft";
  a.oft_block_size = 0;
  a.boft_block_size = 4;
  CHECK(stage_states(a) == 11 * (10240 + 8448) * 8);
}

TEST_CASE("LoRA under tensor parallelism: what PEFT refuses and what is not modelled",
          "[quick][predict][lora-tp]") {
  RequestArgs a = lora_on_tp(2, "");
  a.use_dora = true;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    Catch::Contains("LoraParallelLinear does not support DoRA yet, please set it to False"));
  a.use_dora = false;
  // The other tuners' dispatch takes torch.nn.Linear, not Megatron's ColumnParallelLinear: PEFT raises.
  a.peft_method = "ia3";
  CHECK_THROWS_WITH(
      predict(make_request(a)),
      Catch::Contains("PEFT refuses Megatron's parallel linears (\"Target module {target} is not "
                      "supported. Currently, only the following modules are supported"));
  a.peft_method = "lokr";
  CHECK_THROWS_WITH(predict(make_request(a)),
                    Catch::Contains("currently only adapters for Conv2d, Conv1d, Linear are supported"));
  a.peft_method = "prompt-tuning";
  a.num_virtual_tokens = 8;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    "--peft-method prompt-tuning with --tp is not modelled (vramsim)");
}
