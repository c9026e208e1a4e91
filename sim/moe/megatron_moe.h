// Megatron-Core's mixture-of-experts layer inside a transformers decoder layer (--moe-impl megatron): see
// megatron_moe.cpp for the statements it follows and expert_parallel.h for the routing model and --ep.
#pragma once

#include "sim/graph/eager_tape.h"

namespace vramsim {

struct EmitContext;  // transformer_parts.h

// MoELayer.forward on x [b, s, d] -> [b, s, d] for decoder layer `layer`; x is not dropped.
VarId megatron_moe(EmitContext& ctx, int layer, VarId x);

}  // namespace vramsim
