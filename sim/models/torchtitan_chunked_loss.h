// torchtitan's chunked_cross_entropy_loss (--loss torchtitan-chunked-ce): pytorch/torchtitan#996,
// e23bb707d "chunked cross entropy loss to reduce peak memory", torchtitan/components/loss.py:
//
//   def chunked_cross_entropy_loss(logits, labels, num_output_chunks=8):
//       labels = [target_chunk for target_chunk in labels.chunk(num_output_chunks, dim=1)]
//       logits = [logit_chunk for logit_chunk in logits.chunk(num_output_chunks, dim=1)]
//       total_loss = 0.0
//       for logits_chunk, labels_chunk in zip(logits, labels):
//           total_loss += cross_entropy_loss(logits_chunk, labels_chunk)
//       return total_loss / num_output_chunks
//
// with cross_entropy_loss(pred, labels) = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)).
//
// Unlike torchtune's CEWithChunkedOutputLoss (--loss chunked-ce), the chunks are taken AFTER the output
// projection: the model returns the whole logits and the training loop holds them (`pred`) until its
// `del pred` (--free-logits-before-backward). What the chunking changes is the loss itself:
//   * forward: one chunk's fp32 upcast at a time (b x s/k x V x 4 bytes) instead of the whole one; every
//     chunk's fp32 log-probabilities are still saved by log_softmax for backward (b x s x V x 4 in all);
//   * backward: each chunk's nll_loss and log_softmax gradients are one chunk large (the plain loss: the
//     whole logits in fp32, twice), and each chunk's saved log-probabilities go as its node runs;
//   * logits.chunk() is one autograd node (SplitBackward0) for all chunks: the engine holds every chunk's
//     gradient (logits dtype) in its input buffer until the last one arrives, then split_backward cats them
//     into the logits' gradient (torch/csrc/autograd/FunctionsManual.cpp split_with_sizes_backward:
//     undefined chunks become zeros, then at::cat), so the k chunk gradients and the whole one are alive
//     together for a moment: twice the logits' bytes.
// With batch > 1 a chunk along dim 1 is not contiguous and flatten(0, 1) copies it (reshape: clone +
// _unsafe_view), a temporary freed by the upcast's return; labels.flatten(0, 1) copies the labels' chunk,
// which nll_loss saves.
#pragma once

#include "sim/models/transformer_parts.h"

namespace vramsim {

// Records chunked_cross_entropy_loss(logits, labels) with options.loss_chunks chunks. `logits` are the
// model's output (b, s, V) (the caller keeps its reference: the loop's `pred`), `labels` the batch's labels
// (b, s) as the data loader shifted them. Returns the loss (one reference).
VarId torchtitan_chunked_loss(EmitContext& c, VarId logits, VarId labels);

}  // namespace vramsim
