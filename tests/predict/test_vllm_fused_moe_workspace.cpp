// vLLM's fused-MoE workspace in the V1 profile run (sim/inference/vllm_fused_moe_workspace.h): the bytes are
// worked by hand from vLLM's TritonExperts.workspace_shapes (model_executor/layers/fused_moe/experts/
// triton_moe.py), FusedMoEKernelModularImpl._allocate_buffers (fused_moe/modular_kernel.py) and
// WorkspaceManager.get_simultaneous (v1/worker/workspace.py). Public start-up logs of MoE models are compared
// in docs/serving.md with their errors, not asserted here.
#include <catch2/catch.hpp>

#include "predict/serving_request.h"
#include "sim/inference/vllm_fused_moe_workspace.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

TEST_CASE("vllm fused moe: Qwen3-30B-A3B's workspace at 8,192 tokens", "[quick][predict]") {
  // M = 8,192 tokens, K = 2,048 (hidden), moe_intermediate 768 -> N = 1,536 (w13), top-8, bf16.
  // workspace13 (M, topk, max(N/2, K)) = 8,192 x 8 x max(768, 2,048) = 134,217,728 elements = 268,435,456 B;
  // the output (M, K) = 16,777,216 elements fits in it.
  // workspace2 (M, topk, max(N, K)) = 8,192 x 8 x max(1,536, 2,048) = 134,217,728 elements = 268,435,456 B.
  // get_simultaneous: both already multiples of 256: 536,870,912 B (512 MiB).
  const VllmFusedMoeWorkspace w = vllm_fused_moe_workspace({8192, 2048, 768, 8, true, 2});
  CHECK(w.workspace13_bytes == 268435456);
  CHECK(w.workspace2_bytes == 268435456);
  CHECK(w.total_bytes == 536870912);
}

TEST_CASE("vllm fused moe: an expert wider than the hidden size, and the 256-byte rounding",
          "[quick][predict]") {
  // Mixtral-8x7B at TP 2: K = 4,096, 14,336 / 2 = 7,168 a rank -> N = 14,336, top-2, M = 8,192, bf16.
  // workspace13: 8,192 x 2 x max(7,168, 4,096) = 117,440,512 elements = 234,881,024 B.
  // workspace2: 8,192 x 2 x max(14,336, 4,096) = 234,881,024 elements = 469,762,048 B. Total 704,643,072 B.
  const VllmFusedMoeWorkspace m = vllm_fused_moe_workspace({8192, 4096, 7168, 2, true, 2});
  CHECK(m.workspace13_bytes == 234881024);
  CHECK(m.workspace2_bytes == 469762048);
  CHECK(m.total_bytes == 704643072);
  // Three tokens, K = 5, intermediate 3 (N = 6), top-1, two bytes: workspace13 3 x 1 x max(3, 5) = 15
  // elements = 30 B, workspace2 3 x 1 x max(6, 5) = 18 elements = 36 B; each rounded up to 256: 512 B.
  const VllmFusedMoeWorkspace t = vllm_fused_moe_workspace({3, 5, 3, 1, true, 2});
  CHECK(t.workspace13_bytes == 30);
  CHECK(t.workspace2_bytes == 36);
  CHECK(t.total_bytes == 512);
  // Not gated (no act-and-mul): the activation keeps N = 3: workspace13 3 x max(3, 5) = 15, workspace2
  // 3 x max(3, 5) = 15 elements.
  const VllmFusedMoeWorkspace u = vllm_fused_moe_workspace({3, 5, 3, 1, false, 2});
  CHECK(u.workspace2_bytes == 30);
}

TEST_CASE("vllm fused moe: the workspace stays through the sampler in the torch peak", "[quick][predict]") {
  // Qwen3-30B-A3B on an H100 (8,192 tokens, 1,024 sequences). The sampler's phase (vllm_v1_startup.h):
  // hidden states 8,192 x 2,048 x 2 = 33,554,432; the 1,024 gathered rows 1,024 x 2,048 x 2 = 4,194,304;
  // their logits 1,024 x 151,936 x 2 = 311,164,928; float32 logits, probabilities and the exponential draw
  // 1,024 x 151,936 x 12 = 1,866,989,568: 2,215,903,232 B. The WorkspaceManager keeps the MoE layers'
  // 536,870,912 B (above) through it, beside Hopper's 32 MiB cuBLAS workspace.
  const Prediction p = predict(make_request(test::served_on_h100("qwen3-30b-a3b")));
  const Prediction::Generation::Paged::V1& v = test::v1_of(p);
  CHECK(v.sampler_peak_bytes == 2215903232);
  CHECK(v.fused_moe_workspace_bytes == 536870912);
  CHECK(v.torch_peak_increase_bytes == 2215903232 + 33554432 + 536870912);

  // Mixtral-8x7B at TP 2: each rank's experts are 7,168 wide (FusedMoE's intermediate_size_per_partition).
  RequestArgs a = test::served_on_h100("mixtral-8x7b");
  a.tp = 2;
  a.world_size = 2;
  CHECK(test::v1_of(predict(make_request(a))).fused_moe_workspace_bytes == 704643072);

  // A dense model has none.
  CHECK(test::v1_of(predict(make_request(test::served_on_h100()))).fused_moe_workspace_bytes == 0);
}
