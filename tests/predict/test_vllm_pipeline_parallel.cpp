// vLLM's pipeline parallelism and engine replicas in serving (sim/inference/vllm_pipeline_stages.h,
// sim/serving/vllm_v1_sizing.cpp, sim/serving/non_torch_memory.h): every expected value is worked by hand
// below from vLLM's source (file and function named at each check). Public start-up logs at PP 2, 3 and 4
// are compared in docs/serving.md with their errors, not asserted here.
#include <catch2/catch.hpp>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_pipeline_stages.h"
#include "sim/inference/vllm_v1_startup.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/non_torch_memory.h"

using namespace vramsim;

namespace {

using test::v1_of;

// vLLM's --pipeline-parallel-size pp, one engine replica: world size pp.
RequestArgs served(const char* model, int pp) {
  RequestArgs a = test::served_on_h100(model);
  a.pp = pp;
  a.world_size = pp;
  return a;
}

std::vector<std::int64_t> layers_of(std::int64_t layers, int pp, const std::string& partition = "") {
  std::vector<std::int64_t> out;
  for (const VllmPipelineStage& s : vllm_pipeline_stages(layers, pp, partition)) {
    out.push_back(s.layers());
  }
  return out;
}

}  // namespace

TEST_CASE("vllm pp: get_pp_indices' split and VLLM_PP_LAYER_PARTITION", "[quick][predict]") {
  // vllm/distributed/utils.py get_pp_indices: 32 // 2 = 16 each.
  CHECK(layers_of(32, 2) == std::vector<std::int64_t>{16, 16});
  // 36 layers over 3 (Qwen3-8B): 12 each, no remainder.
  CHECK(layers_of(36, 3) == std::vector<std::int64_t>{12, 12, 12});
  // 32 over 3: 10 each, remainder 2: `for i in range(2, 4): partitions[-i] += 1` -> the stage before the
  // last and the one before it: 11, 11, 10.
  CHECK(layers_of(32, 3) == std::vector<std::int64_t>{11, 11, 10});
  // 80 over 3: 26 each, remainder 2: 27, 27, 26. 5 over 4: 1 each, remainder 1: partitions[-2]: 1, 1, 2, 1.
  CHECK(layers_of(80, 3) == std::vector<std::int64_t>{27, 27, 26});
  CHECK(layers_of(5, 4) == std::vector<std::int64_t>{1, 1, 2, 1});
  // 30 over 4: 7 each, remainder 2: partitions[-2], partitions[-3]: 7, 8, 8, 7.
  CHECK(layers_of(30, 4) == std::vector<std::int64_t>{7, 8, 8, 7});
  const std::vector<VllmPipelineStage> st = vllm_pipeline_stages(32, 3, "");
  CHECK(st[1].start_layer == 11);
  CHECK(st[1].end_layer == 22);
  CHECK(st[0].first);
  CHECK_FALSE(st[0].last);
  CHECK(st[2].last);
  // VLLM_PP_LAYER_PARTITION replaces the split, with vLLM's own refusals.
  CHECK(layers_of(32, 2, "10,22") == std::vector<std::int64_t>{10, 22});
  CHECK_THROWS_WITH(layers_of(32, 2, "10,20"),
                    "--vllm-pp-layer-partition: sum(partitions)=30 does not match num_hidden_layers=32.");
  CHECK_THROWS_WITH(layers_of(32, 2, "32"),
                    "--vllm-pp-layer-partition: len(partitions)=1 does not match pp_size=2.");
  CHECK_THROWS_WITH(layers_of(32, 2, "16,x"), "--vllm-pp-layer-partition: Invalid partition string: 16,x");
  CHECK_THROWS_WITH(layers_of(32, 2, "16,"), "--vllm-pp-layer-partition: Invalid partition string: 16,");
  CHECK_THROWS_AS(layers_of(32, 2, "0,32"), InputError);  // a stage without layers: not modelled
  CHECK_THROWS_AS(layers_of(3, 4), InputError);
}

TEST_CASE("vllm pp: a later stage's profile run holds the received tensors, only the last samples",
          "[quick][predict]") {
  // Llama-3.1-8B at 8,192 tokens (the shapes of test_vllm_v1_startup.cpp's profile case).
  VllmProfileShapes s;
  s.tokens = 8192;
  s.requests = 1024;
  s.hidden = 4096;
  s.q_heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.intermediate = 14336;
  s.vocab_rows = 128256;
  s.vocab = 128256;
  // The first stage of two: the dummy forward only (profile_run: `if get_pp_group().is_last_rank:` the
  // sampler), 55,296 columns x 8,192 x 2 B = 905,969,664 B.
  s.last_stage = false;
  VllmProfilePeak p = vllm_v1_profile_peak(s);
  CHECK(p.forward_bytes == 905969664);
  CHECK(p.sampler_bytes == 0);
  CHECK(p.intermediate_bytes == 0);
  CHECK(p.peak_bytes == 905969664);
  // The last stage: make_empty_intermediate_tensors(batch_size=max_num_tokens): hidden_states and residual,
  // 2 x 8,192 x 4,096 x 2 B = 134,217,728 B, held throughout; at the MLP's widest point it holds the buffer
  // and a new hidden state where the first stage holds hidden state and residual: + 8,192 x 4,096 x 2 =
  // 67,108,864 B -> 973,078,528 B. Sampler: 1,914,175,488 B + the buffer = 2,048,393,216 B.
  s.first_stage = false;
  s.last_stage = true;
  p = vllm_v1_profile_peak(s);
  CHECK(p.intermediate_bytes == 134217728);
  CHECK(p.forward_bytes == 973078528);
  CHECK(p.sampler_bytes == 2048393216);
  CHECK(p.peak_bytes == 2048393216);
  // A middle stage: the buffer and the forward, no sampler.
  s.last_stage = false;
  p = vllm_v1_profile_peak(s);
  CHECK(p.peak_bytes == 973078528);
}

TEST_CASE("vllm pp: Llama-3.1-8B over two H100s, stage by stage, and the engine's smallest block count",
          "[quick][predict]") {
  const Prediction p = predict(make_request(served("llama-3.1-8b", 2)));
  const Prediction::Generation::Paged::V1& v = v1_of(p);
  REQUIRE(v.stages.size() == 2);
  CHECK(v.pipeline_parallel == 2);
  // Stage 0 (layers 0-15): the embedding 128,256 x 4,096 = 525,336,576 (128,256 = 64 x 2,004: no padding) and
  // 16 layers of 218,112,000 (q, o 16,777,216; k, v 4,194,304; gate, up, down 58,720,256; two norms 8,192) =
  // 3,489,792,000: 4,015,128,576 x 2 B = 8,030,257,152 B + get_rope's cos_sin_cache 131,072 x 128 x 2 B =
  // 33,554,432 B: 8,063,811,584 B (7.51 GiB, as vLLM 0.19 logs at PP 2).
  CHECK(v.stages[0].start_layer == 0);
  CHECK(v.stages[0].end_layer == 16);
  CHECK(v.stages[0].weights_bytes == 8063811584);
  // Stage 1 (layers 16-31): 16 layers, the final norm 4,096 and lm_head 525,336,576: 4,015,132,672 x 2 B +
  // the rotary cache = 8,063,819,776 B.
  CHECK(v.stages[1].weights_bytes == 8063819776);
  // Torch peak increase: stage 0 the forward 905,969,664 + the 32 MiB cuBLAS workspace; stage 1 the
  // sampler with the received buffer 2,048,393,216 + 33,554,432.
  CHECK(v.stages[0].torch_peak_increase_bytes == 905969664 + 33554432);
  CHECK(v.stages[1].torch_peak_increase_bytes == 2048393216 + 33554432);
  // Non-torch: the PP group's pynccl ring (24 x 12 MiB (10 MiB received + 2 MiB sent a channel, NCCL p2p.cc))
  // is connected before the snapshot: no increase.
  CHECK(v.stages[0].non_torch_increase_bytes == 0);
  CHECK(v.before_snapshot_bytes == 301989888);
  // Available = 85,045,477,376 x 0.9 (floor: 76,540,929,638) - weights - torch peak increase.
  const std::int64_t available0 = 76540929638 - 8063811584 - (905969664 + 33554432);
  const std::int64_t available1 = 76540929638 - 8063819776 - (2048393216 + 33554432);
  CHECK(v.stages[0].available_bytes == available0);
  CHECK(v.stages[1].available_bytes == available1);
  // get_kv_cache_config_from_groups: available // 65,536 // 16 layers of the stage.
  CHECK(v.stages[0].num_blocks == available0 / 65536 / 16);
  CHECK(v.stages[1].num_blocks == available1 / 65536 / 16);
  // get_kv_cache_configs: every stage keeps the smallest count; the lines are stage 1's.
  CHECK(v.stage == 1);
  CHECK(p.generation->paged->num_gpu_blocks == available1 / 65536 / 16);
  CHECK(v.kv_cache_tokens == available1 / 65536 / 16 * 16);
  CHECK(p.generation->paged->block_bytes == 65536 * 16);
  CHECK(v.intermediate_bytes == 134217728);
  CHECK(p.generation->paged->refusal.empty());
}

TEST_CASE("vllm pp: a tied head puts the embedding on the last stage too", "[quick][predict]") {
  // Qwen3-4B ties lm_head to embed_tokens: the last stage builds VocabParallelEmbedding too
  // (`config.tie_word_embeddings and get_pp_group().is_last_rank`). 36 layers: 18 a stage; the stages
  // differ only by the final norm's 2,560 x 2 B.
  const Prediction p = predict(make_request(served("qwen3-4b", 2)));
  const Prediction::Generation::Paged::V1& v = v1_of(p);
  REQUIRE(v.stages.size() == 2);
  CHECK(v.stages[1].weights_bytes - v.stages[0].weights_bytes == 5120);
  // Untied (Qwen3-8B, 36 layers over 3): the first and last stages differ by lm_head (151,936 x 4,096 x 2)
  // and the final norm (4,096 x 2) against the embedding (151,936 x 4,096 x 2): 8,192 B; the middle stage
  // has neither table: 151,936 x 4,096 x 2 = 1,244,659,712 B less than the first.
  const Prediction q = predict(make_request(served("qwen3-8b", 3)));
  const Prediction::Generation::Paged::V1& w = v1_of(q);
  REQUIRE(w.stages.size() == 3);
  CHECK(w.stages[2].weights_bytes - w.stages[0].weights_bytes == 8192);
  CHECK(w.stages[0].weights_bytes - w.stages[1].weights_bytes == 1244659712);
}

TEST_CASE("vllm pp and dp: the process groups' communication buffers", "[quick][predict]") {
  // cuda_communicator.py: custom all-reduce and symmetric memory for the TP group only; a PyNcclCommunicator
  // for every group of more than one rank, connected by its warm-up all_reduce (24 channels x 10 MiB on
  // H100 SXM). torch's TP-group ring only where the logits all_gather runs: the last stage.
  std::vector<NonTorchLine> first = vllm_non_torch_lines(VllmParallelGroups{2, 2, 1, false}, "h100-80gb");
  std::vector<NonTorchLine> last = vllm_non_torch_lines(VllmParallelGroups{2, 2, 1, true}, "h100-80gb");
  REQUIRE(first.size() == 4);  // custom all-reduce, symmetric memory, pynccl TP ring, pynccl PP ring
  REQUIRE(last.size() == 5);
  CHECK(first[3].name == "NCCL ring (pynccl, pp group)");
  CHECK(first[3].size_bytes == 301989888);
  CHECK_FALSE(first[3].after_snapshot);
  CHECK(non_torch_increase_bytes(first) == 0);
  CHECK(non_torch_increase_bytes(last) == 301989888);
  // Engine replicas (--world-size 2 at TP 1): the DP group's ring, before the snapshot, nothing else.
  const std::vector<NonTorchLine> dp = vllm_non_torch_lines(VllmParallelGroups{1, 1, 2, true}, "h100-80gb");
  REQUIRE(dp.size() == 1);
  CHECK(dp[0].name == "NCCL ring (pynccl, dp group)");
  CHECK(dp[0].size_bytes == 301989888);
  // GPUs whose NCCL channel count is not public: no ring lines (not sized).
  CHECK(vllm_non_torch_lines(VllmParallelGroups{1, 2, 2, true}, "a100-80gb").empty());
  // At the predict level: two replicas of Llama-3.1-8B keep each replica's start-up (the same blocks as one)
  // and add the DP ring outside the budget.
  RequestArgs a = served("llama-3.1-8b", 1);
  const Prediction one = predict(make_request(a));
  a.world_size = 2;
  const Prediction two = predict(make_request(a));
  CHECK(v1_of(two).data_parallel == 2);
  CHECK(two.generation->paged->num_gpu_blocks == one.generation->paged->num_gpu_blocks);
  CHECK(v1_of(two).before_snapshot_bytes == 301989888);
  CHECK(v1_of(two).process_total_bytes - v1_of(one).process_total_bytes == 301989888);
}

TEST_CASE("vllm pp: refusals", "[quick][predict]") {
  RequestArgs a = served("llama-3.1-8b", 2);
  a.vllm_version = "v0";
  CHECK_THROWS_WITH(make_request(a), "--pp: vLLM's pipeline stages are modelled for --vllm-version v1 only");
  a = served("llama-3.1-8b", 1);
  a.vllm_pp_layer_partition = "16,16";
  CHECK_THROWS_WITH(make_request(a),
                    "--vllm-pp-layer-partition: vLLM's VLLM_PP_LAYER_PARTITION, for --pp N --kv-cache paged");
  a = served("llama-3.1-8b", 2);
  a.vllm_pp_layer_partition = "8,24";
  const Prediction::Generation::Paged::V1& v = v1_of(predict(make_request(a)));
  CHECK(v.stages[1].start_layer == 8);
  CHECK(v.stage == 1);  // 24 layers and the sampler: fewer blocks
}

TEST_CASE("vllm: --precision fp16 is vLLM's --dtype float16, two-byte elements as bf16", "[quick][predict]") {
  // ModelConfig dtype torch.float16: weights, activations and the "auto" KV cache in two-byte elements, as
  // torch.bfloat16 (llm-d-planner's vLLM 0.19 report logs 14.99 GiB of weights and 58.11 GiB of available
  // KV memory for both dtypes, Llama-3.1-8B at 0.95).
  RequestArgs a = served("llama-3.1-8b", 1);
  const Prediction bf16 = predict(make_request(a));
  a.precision = "fp16";
  const Prediction fp16 = predict(make_request(a));
  CHECK(v1_of(fp16).dtype == "float16");
  CHECK(v1_of(bf16).dtype.empty());
  // 8,030,261,248 parameters x 2 B + the rotary cache 33,554,432 B.
  CHECK(v1_of(fp16).weights_bytes == 16094076928);
  CHECK(fp16.generation->paged->num_gpu_blocks == bf16.generation->paged->num_gpu_blocks);
  // Outside vLLM serving a model held in float16 is refused.
  a.kv_cache = "dynamic";
  CHECK_THROWS_WITH(
      make_request(a),
      "--precision: fp16 (a model held in float16) is modelled for vLLM serving (--generate N "
      "--kv-cache paged) only; training and transformers generation take fp32, amp-fp16, amp-bf16 "
      "or bf16");
}
