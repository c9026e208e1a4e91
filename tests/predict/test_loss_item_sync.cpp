// --loss-item (TrainingOptions::loss_item_sync): the training loop reads the loss on the host. `loss.item()`
// is aten::_local_scalar_dense: a copy to the host on the current stream and cudaStreamSynchronize
// (aten/src/ATen/native/cuda/CUDAScalar.cpp), so the host issues nothing more until the device has run every
// op before it on the compute stream; FSDP1's _post_backward_final_callback (torch/distributed/fsdp/
// _runtime_utils.py) first made the compute stream wait for the post-backward stream. The caching
// allocator's next malloc then finds the events of every block freed with record_stream complete and
// returns those blocks to their pools (CUDACachingAllocator.cpp malloc -> process_events; spec ST3).
// fsdp_qlora's train.py reads `loss.item()` after each loss.backward(); torchtune's recipes read
// `running_loss.item()` after the optimizer step (recipes/full_finetune_single_device.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "sim/replay/trace_replay.h"
#include "traces/snapshot.h"

using namespace vramsim;

namespace {

// TinyLlama-1.1B over 8 ranks in bf16, as tests/predict/test_fsdp_streams.cpp sizes it: a decoder layer's
// unsharded flat parameter is 88,088,576 B (a 43 x 2 MiB segment), the root's 262,148,096 B (126 x 2 MiB).
constexpr std::int64_t kLayerSegment = 43 * 2'097'152;
constexpr std::int64_t kRootSegment = 126 * 2'097'152;

RequestArgs tinyllama_fsdp1_over_8(int steps, const std::string& loss_item) {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.capacity = "1TiB";  // never the limit: every segment the run wants is cudaMalloc'd
  a.batch = 1;
  a.seq = 128;
  a.precision = "bf16";
  a.optimizer = "adamw";
  a.steps = steps;
  a.world_size = 8;
  a.fsdp = "full-shard";
  a.host_op_us = 0;  // the host issues everything at time 0: only a synchronize makes it wait
  a.loss_item = loss_item;
  return a;
}

std::vector<std::int64_t> segments_on(const Snapshot& trace, StreamId stream) {
  const ReplayResult r = replay_snapshot(trace, ReplayOptions{});
  std::vector<std::int64_t> out;
  for (const SnapshotSegment& s : r.final_segments) {
    if (s.stream == stream) {
      out.push_back(static_cast<std::int64_t>(s.total_size_bytes));
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

TEST_CASE("loss.item() sync: after a synchronize the next step's all-gathers reuse the step before's blocks",
          "[quick][predict]") {
  // One step holds the root's unshard-stream segment and three layers' (test_fsdp_streams.cpp: two
  // all-gathers in flight, the backward prefetch needs a third). Reading the loss on the host after
  // backward (or after the optimizer step) waits for the device: every buffer of step 1 is free when step
  // 2 starts, step 2 asks the unshard stream for the same sizes in the same order, and the best fit hands
  // each the block it had: three steps hold exactly one step's segments.
  const std::vector<std::int64_t> one_step{kRootSegment, kLayerSegment, kLayerSegment, kLayerSegment};
  for (const char* where : {"after-backward", "after-step"}) {
    INFO("--loss-item " << where);
    Snapshot trace;
    predict(make_request(tinyllama_fsdp1_over_8(3, where)), &trace);
    CHECK(segments_on(trace, 1) == one_step);
  }
  // Without it the host runs into step 2 while the device is still in step 1's backward: the root's
  // buffer, freed with record_stream at the end of that backward, is still pending when step 2's first
  // all-gather asks for the root's size, so that one gets a new segment (at least one more than one step's).
  Snapshot trace;
  predict(make_request(tinyllama_fsdp1_over_8(3, "none")), &trace);
  const std::vector<std::int64_t> segments = segments_on(trace, 1);
  CHECK(segments.size() > one_step.size());
  CHECK(std::count(segments.begin(), segments.end(), kRootSegment) >= 2);
}

TEST_CASE("loss.item() sync: one synchronize per micro-batch after backward, one per step after the step",
          "[quick][predict]") {
  // The op graph: `loss.item` on the compute stream, then a no-kernel op whose host waits for it.
  for (const auto& [where, expected] : {std::pair{"after-backward", 2 * 3}, std::pair{"after-step", 2}}) {
    INFO("--loss-item " << where);
    RequestArgs a = tinyllama_fsdp1_over_8(2, where);
    a.grad_accumulation = 3;
    const PredictRequest r = make_request(a);
    const OpGraph g = build_training_steps(r.model, r.options);
    int items = 0;
    for (OpId id = 0; id < static_cast<OpId>(g.op_count()); ++id) {
      const Op& op = g.op(id);
      if (op.name == "loss.item.synchronize") {
        REQUIRE(op.host_waits_for != kNoOp);
        CHECK(g.op(op.host_waits_for).name == "loss.item");
        CHECK(g.op(op.host_waits_for).stream == 0);
        ++items;
      }
    }
    CHECK(items == expected);
  }
}

TEST_CASE("loss.item() sync and dp degree: errors name the option", "[quick][predict]") {
  RequestArgs a = tinyllama_fsdp1_over_8(1, "sometimes");
  CHECK_THROWS_WITH(make_request(a),
                    "--loss-item: unknown value 'sometimes' (known: none, after-backward, after-step)");
  a = tinyllama_fsdp1_over_8(1, "after-backward");
  a.inference = true;
  CHECK_THROWS_WITH(make_request(a),
                    "--loss-item: the loop reads a training loss; there is none with "
                    "--forward-only, --inference or --generate");
  a = tinyllama_fsdp1_over_8(1, "after-backward");
  a.fsdp.clear();
  a.world_size = 2;
  a.pp = 2;
  CHECK_THROWS_WITH(make_request(a),
                    "--loss-item with --pp: not modelled (vramsim): only the last stage holds the loss");
  a = tinyllama_fsdp1_over_8(1, "none");
  a.dp = 4;  // 4 x --tp 1 x --pp 1 x --cp 1 = 4, not the 8 of --gpus
  CHECK_THROWS_WITH(make_request(a), "--dp 4 x --cp 1 x --tp 1 x --pp 1 is 4 GPUs, but --gpus is 8");
  a.dp = 0;
  CHECK_THROWS_WITH(make_request(a), "--dp: 0 is not in 1..1048576 (or --cp 1 not in 1..4096)");
}

TEST_CASE("dp degree: the GPUs are dp x cp x tp x pp (Megatron's and torchtitan's ParallelDims)",
          "[quick][predict]") {
  // Megatron-LM's initialize_model_parallel: data_parallel_size = world_size / (tp x pp x cp); torchtitan's
  // ParallelDims._validate: dp_replicate x dp_shard x cp x tp x pp == world_size. vramsim's data-parallel
  // group is the ranks holding the same part of the model: world / (tp x pp) = dp x cp.
  RequestArgs a = tinyllama_fsdp1_over_8(1, "none");
  a.world_size = 1;  // not given: from --dp
  a.fsdp = "full-shard";
  a.dp = 4;
  a.tp = 2;
  CHECK(make_request(a).options.data_parallel.world_size == 4);  // 8 GPUs, 4 replicas of a TP-2 model
  a.world_size = 8;                                              // given and agreeing
  CHECK(make_request(a).options.data_parallel.world_size == 4);
  a.tp = 1;
  a.world_size = 1;
  a.dp = 2;
  a.cp = 4;  // FSDP shards over dp_shard x cp = 8 ranks
  CHECK(make_request(a).options.data_parallel.world_size == 8);
}
