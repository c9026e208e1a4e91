#include "sim/inference/vllm_fused_moe_workspace.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/core/checked_size.h"

namespace vramsim {
namespace {

Bytes mul(Bytes a, Bytes b) { return size_mul(a, b, "vLLM fused-MoE workspace"); }

// WorkspaceManager.get_simultaneous: round_up(actual, 256) for each part.
Bytes round_up_256(Bytes n) {
  constexpr Bytes kAlign = 256;
  return mul((n + kAlign - 1) / kAlign, kAlign);
}

}  // namespace

VllmFusedMoeWorkspace vllm_fused_moe_workspace(const VllmFusedMoeShapes& s) {
  SIM_ASSERT(s.tokens >= 0 && s.hidden >= 0 && s.intermediate >= 0 && s.top_k >= 0);
  const auto k = static_cast<Bytes>(s.hidden);
  // N: w13's rows on this rank; the activation's output is N / 2 when gated (act_and_mul), N otherwise.
  const Bytes n = static_cast<Bytes>(s.intermediate) * (s.gated ? 2 : 1);
  const Bytes activation_out = s.gated ? n / 2 : n;
  const Bytes rows = mul(static_cast<Bytes>(s.tokens), static_cast<Bytes>(s.top_k));
  VllmFusedMoeWorkspace w;
  // workspace13 (M, topk, max(N/2, K)) is at least the output (M, K) whenever topk >= 1, so the common buffer
  // max(prod(workspace13), prod(output)) is workspace13's.
  const Bytes ws13_elements =
      std::max(mul(rows, std::max(activation_out, k)), mul(static_cast<Bytes>(s.tokens), k));
  w.workspace13_bytes = mul(ws13_elements, s.activation_bytes);
  w.workspace2_bytes = mul(mul(rows, std::max(n, k)), s.activation_bytes);
  w.total_bytes = round_up_256(w.workspace13_bytes) + round_up_256(w.workspace2_bytes);
  return w;
}

}  // namespace vramsim
