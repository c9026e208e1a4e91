// torchtitan's mixture-of-experts layer inside a decoder layer (--moe-impl torchtitan): see
// torchtitan_moe.cpp for the statements it follows, expert_parallel.h for the routing model and --ep, and
// fsdp2.cpp for how FSDP2 shards the routed experts under expert parallelism.
#pragma once

#include <cstdint>

#include "sim/graph/eager_tape.h"

namespace vramsim {

struct EmitContext;  // transformer_parts.h

// torchtitan's TOKEN_GROUP_ALIGN_SIZE_M (torchtitan/models/moe/utils.py): each local expert's row group is
// padded to a multiple of it for torch._grouped_mm (8 for bf16; float8 and mxfp8 raise it, not modelled).
constexpr std::int64_t kTorchtitanTokenGroupAlign = 8;

// _permute's padded_max_len: round_up(received + local_experts x align, align), the rows the grouped GEMMs
// run on.
std::int64_t torchtitan_padded_rows(std::int64_t received_rows, std::int64_t local_experts);

// MoE.forward on x [b, s, d] -> [b, s, d] for decoder layer `layer`; x is not dropped.
VarId torchtitan_moe(EmitContext& ctx, int layer, VarId x);

}  // namespace vramsim
