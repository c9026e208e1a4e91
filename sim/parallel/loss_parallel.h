// torch.distributed.tensor.parallel.loss_parallel() (torch/distributed/tensor/parallel/loss.py, PyTorch 2.4
// to 2.6): F.cross_entropy over logits that stay sharded on the vocabulary. torchtitan turns it on whenever
// tensor parallelism is on (ParallelDims.loss_parallel_enabled = tp_enabled and not
// training.disable_loss_parallel; train.py runs the loss and loss.backward() inside
// train_context(loss_parallel)), with the output projection's ColwiseParallel(output_layouts=Shard(-1),
// use_local_output=False) (parallelize_llama.py apply_tp).
//
// DTensor dispatches aten._log_softmax, nll_loss_forward and nll_loss_backward to handlers that run their
// decomposition on the local shard (rows x vocab / tp), with all-reduces of per-row statistics, instead of
// the fused CUDA kernels. Autograd sits above DTensor, so what it saves is what it saves for the fused
// kernels (log_softmax's result); the difference is what the handlers allocate:
//   forward  _log_softmax: x_max = amax(x) (rows x 1), shifted = x - x_max, torch.sum(torch.exp(shifted)) (a
//            full-size exp, freed once summed), result = shifted - log(sumexp). At most the input, `shifted`
//            and one more full-size tensor are alive (the fused kernel: the input and its output).
//   backward _nll_loss_and_log_softmax_backward (fused for both nodes): grad_input = zeros_like(x), the
//            target's entries set, then (grad_input + torch.exp(x)) * grad_output: three full-size tensors
//            besides the saved result (the fused kernels: nll_loss_backward's gradient, then
//            _log_softmax_backward_data's). _log_softmax_backward_handler returns
//            grad_output.to(input_dtype), the same tensor for fp32 logits: no allocation.
// Not modelled: the masked target (rows x 1 int64) and the gathered rows (rows x 1 fp32) of nll_loss, a few
// hundred KiB.
#pragma once

#include <string>

#include "sim/graph/eager_tape.h"

namespace vramsim {

class TorchOps;

// F.cross_entropy(logits_float, labels) under loss_parallel(): `logits_float` is this rank's shard of the
// upcast logits (..., vocab / tp), `labels` the token labels. Records the ops on ops' tape; returns the loss
// (a new variable holding one reference). The caller keeps its reference to `logits_float`.
VarId loss_parallel_cross_entropy(TorchOps& ops, const std::string& name, VarId logits_float, VarId labels);

}  // namespace vramsim
