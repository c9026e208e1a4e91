// Megatron-LM tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022, Table 2): what one rank of a
// tensor-parallel group of `tp` GPUs holds. Attention heads and the MLP's hidden units are split across the
// ranks (ColumnParallelLinear for q/k/v and the MLP's up/gate projections, RowParallelLinear for the output
// and down projections, whose outputs are all-reduced in place), and the vocabulary of the embedding and
// the output layer (VocabParallelEmbedding, the vocab-parallel cross-entropy) too; LayerNorms, residuals and
// dropouts outside the attention core and the MLP stay whole on every rank. So one rank runs the model with
// n_heads / tp heads, d_ff / tp hidden units and vocab / tp (padded as make_vocab_size_divisible_by = 128
// pads it) output rows, and the same d_model: its activations come out as the paper's
// s*b*h*(10 + 24/t + 5*a*s/(h*t)).
// Grouped-query attention with fewer key/value heads than ranks replicates them (each rank keeps one).
#pragma once

#include "sim/models/model_config.h"

namespace vramsim {

// Throws InputError("--tp: ...") when `tp` does not divide the heads or the MLP.
ModelConfig tensor_parallel_rank(const ModelConfig& model, int tp);

}  // namespace vramsim
