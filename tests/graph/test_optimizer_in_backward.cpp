// --optimizer-in-backward: torchtune's optimizer_in_bwd (torchtune/training/memory.py
// create_optim_in_bwd_wrapper / register_optim_in_bwd_hooks): one optimizer per parameter, stepped and
// zero_grad()'ed (set_to_none) from the parameter's post-accumulate-grad hook, so a gradient is freed as soon
// as it is produced and never all of them live at once.
#include <catch2/catch.hpp>

#include <algorithm>

#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/data_parallel.h"

using namespace vramsim;

namespace {

ModelConfig small_llama() {
  ModelConfig m = model_preset("llama-2-7b");
  m.n_layers = 2;
  return m;
}

TrainingOptions options(bool in_backward) {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 64;
  o.steps = 2;
  o.precision = Precision::kBf16;
  o.optimizer = OptimizerKind::kAdamW;
  o.cublas_workspace_bytes = 0;
  o.optimizer_in_backward = in_backward;
  return o;
}

// The most gradient bytes alive at once over the run, and the optimizer-state bytes alive at its end.
std::pair<std::int64_t, std::int64_t> gradients_and_states(const OpGraph& g) {
  const AllocationSchedule s = build_allocation_schedule(g);
  std::int64_t live = 0;
  std::int64_t peak = 0;
  std::int64_t states = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const Tensor& t = g.tensor(s.event_tensor[i]);
    const std::int64_t sign = s.events[i].action == TraceAction::kAlloc           ? 1
                              : s.events[i].action == TraceAction::kFreeCompleted ? -1
                                                                                  : 0;
    if (t.category == TensorCategory::kGradient) {
      live += sign * static_cast<std::int64_t>(t.size_bytes);
      peak = std::max(peak, live);
    } else if (t.category == TensorCategory::kOptimizerState) {
      states += sign * static_cast<std::int64_t>(t.size_bytes);
    }
  }
  return {peak, states};
}

}  // namespace

TEST_CASE("optimizer in backward: one gradient alive at a time, the same optimizer states",
          "[quick][graph]") {
  const ModelConfig m = small_llama();
  std::int64_t largest = 0;
  std::int64_t all = 0;
  for (const ParameterShape& p : m.parameter_shapes()) {
    largest = std::max(largest, 2 * p.numel());  // bf16 gradients
    all += 2 * p.numel();
  }
  // By hand: embed_tokens and lm_head are the largest, 32000 x 4096 x 2 B.
  REQUIRE(largest == 32000LL * 4096 * 2);
  const auto [plain_peak, plain_states] = gradients_and_states(build_training_steps(m, options(false)));
  const auto [hook_peak, hook_states] = gradients_and_states(build_training_steps(m, options(true)));
  CHECK(plain_peak == all);            // optimizer.step() after backward: every gradient at once
  CHECK(hook_peak == largest);         // each gradient stepped and freed before the next one is made
  CHECK(hook_states == plain_states);  // AdamW's exp_avg, exp_avg_sq and bf16's fp32 masters all the same
  CHECK(hook_states == 12 * all / 2);  // 4 + 4 + 4 bytes per parameter
}

// A weight several nodes read (tied embeddings: the lookup and every chunk of torchtune's chunked output)
// has one AccumulateGrad node; the autograd engine sums the incoming gradients in that node's input buffer
// (torch/csrc/autograd/input_buffer.cpp, InputBuffer::add) and runs it once, when the last of them has
// arrived (the lookup's backward, last). So the post-accumulate-grad hook, and with it torchtune's
// per-parameter optimizer step, runs once per step for the tied weight, and its buffered gradient lives
// through the whole backward.
TEST_CASE("optimizer in backward: a tied weight is stepped once, after its last gradient", "[quick][graph]") {
  ModelConfig m = model_preset("llama-3.2-1b");  // tie_word_embeddings: vocab 128256, hidden 2048
  m.n_layers = 1;
  REQUIRE(m.tied_embeddings);
  TrainingOptions o = options(true);
  o.loss = LossKind::kChunkedCrossEntropy;
  o.loss_chunks = 2;
  const OpGraph g = build_training_steps(m, o);
  int embed_steps = 0;
  for (OpId id = 0; id < g.op_count(); ++id) {
    embed_steps += g.op(id).name == "optimizer_in_bwd.zero_grad.model.embed_tokens.weight" ? 1 : 0;
  }
  CHECK(embed_steps == o.steps);  // once per step, not once per chunk and once for the lookup (3 per step)
  // By hand: while the second output chunk's backward makes its weight gradient, the first chunk's sits in
  // the input buffer: two bf16 vocab x hidden gradients (128256 x 2048 x 2 B each) alive at once, where
  // stepping per chunk would free each before the next is made.
  const Bytes embedding_grad = 128256LL * 2048 * 2;
  const AllocationSchedule s = build_allocation_schedule(g);
  int live = 0;
  int most = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const Tensor& t = g.tensor(s.event_tensor[i]);
    const bool vocab_grad = t.size_bytes == embedding_grad && (t.category == TensorCategory::kGradient ||
                                                               t.category == TensorCategory::kTemporary);
    if (vocab_grad && s.events[i].action == TraceAction::kAlloc) {
      most = std::max(most, ++live);
    } else if (vocab_grad && s.events[i].action == TraceAction::kFreeCompleted) {
      --live;
    }
  }
  CHECK(most == 2);
}

// Gradient bytes alive when step 1's backward has ended (where the next phase marker begins).
std::int64_t gradient_bytes_after_first_backward(const OpGraph& g) {
  const AllocationSchedule s = build_allocation_schedule(g);
  std::size_t end = s.events.size();
  for (std::size_t k = 0; k + 1 < s.phases.size(); ++k) {
    if (s.phases[k].step == 1 && s.phases[k].phase == Phase::kBackward) {
      end = s.phases[k + 1].event_index;
    }
  }
  std::int64_t live = 0;
  for (std::size_t i = 0; i < end; ++i) {
    const Tensor& t = g.tensor(s.event_tensor[i]);
    const std::int64_t sign = s.events[i].action == TraceAction::kAlloc           ? 1
                              : s.events[i].action == TraceAction::kFreeCompleted ? -1
                                                                                  : 0;
    live += t.category == TensorCategory::kGradient ? sign * static_cast<std::int64_t>(t.size_bytes) : 0;
  }
  return live;
}

// torchtune's full_finetune_distributed runs optimizer_in_bwd over FSDP2: register_optim_in_bwd_hooks puts
// the hook on model.parameters(), the sharded DTensor parameters, and FSDP2's foreach_reduce
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) calls a sharded parameter's
// _post_accumulate_grad_hooks right after assigning its sharded gradient (a view of reduce_output), inside
// `with device_handle.stream(post_reduce_stream)`. So every trainable parameter is stepped during backward on
// the reduce-scatter stream, and no gradient shard is left when backward ends.
TEST_CASE("optimizer in backward over FSDP2: stepped from foreach_reduce, no gradient shard left",
          "[quick][graph]") {
  const ModelConfig m = small_llama();
  std::int64_t all = 0;
  for (const ParameterShape& p : m.parameter_shapes()) {
    all += 2 * p.numel();  // bf16; every llama-2-7b dimension is even, so the two shards are halves
  }
  const auto over_fsdp2 = [&](bool in_backward) {
    TrainingOptions o = options(in_backward);
    o.data_parallel.scheme = "fsdp2-full-shard";
    o.data_parallel.world_size = 2;
    o.master_weights = MasterWeights::kNone;  // torchtune: the model loaded in bf16, no MixedPrecisionPolicy
    validate(o);
    return build_training_steps(m, o);
  };
  const OpGraph plain = over_fsdp2(false);
  const OpGraph hook = over_fsdp2(true);
  // optimizer.step() after backward: each parameter's half of its gradient, the unsharded ones gone at
  // copy-in.
  CHECK(gradient_bytes_after_first_backward(plain) == all / 2);
  CHECK(gradient_bytes_after_first_backward(hook) == 0);
  int stepped = 0;
  for (OpId id = 0; id < hook.op_count(); ++id) {
    const Op& op = hook.op(id);
    if (op.step == 1 && op.name.starts_with("optimizer_in_bwd.zero_grad.")) {
      ++stepped;
      CHECK(op.phase == Phase::kBackward);
      CHECK(op.stream == GradientShards::kReduceScatterStream);
    }
  }
  CHECK(stepped == static_cast<int>(m.parameter_shapes().size()));  // every parameter once
}

TEST_CASE("optimizer in backward is refused with gradient accumulation, DDP, FSDP1 and FSDP2's offload",
          "[quick][graph]") {
  TrainingOptions o = options(true);
  o.grad_accumulation = 2;
  CHECK_THROWS_AS(validate(o), InputError);
  o.grad_accumulation = 1;
  o.data_parallel.world_size = 2;
  for (const char* scheme : {"ddp", "zero2", "fsdp-full-shard"}) {
    o.data_parallel.scheme = scheme;
    CHECK_THROWS_AS(validate(o), InputError);
  }
  o.data_parallel.scheme = "fsdp2-full-shard";
  CHECK_NOTHROW(validate(o));
  o.data_parallel.offload_params = true;
  o.data_parallel.offload_optimizer = true;
  CHECK_THROWS_AS(validate(o), InputError);
}
