// FSDP1 and FSDP2 on their streams (sim/parallel/fsdp.cpp, fsdp2.cpp): which all-gather buffers the caching
// allocator must hold at once, derived by hand from the libraries' algorithms, checked on the segments the
// predicted trace cudaMallocs on each stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "sim/replay/trace_replay.h"
#include "traces/snapshot.h"

using namespace vramsim;

namespace {

// TinyLlama-1.1B (hidden 2048, 22 layers, 32 heads, 4 KV heads, MLP 5632, vocab 32000, untied head) over 8
// ranks in bf16. Every parameter's dim 0 divides by 8, so nothing is padded:
//   one decoder layer: q, o 2048 x 2048 (4,194,304 each), k, v 256 x 2048 (524,288 each), gate, up, down
//     2048 x 5632 (11,534,336 each), two norms 2048: 44,044,288 elements = 88,088,576 B in bf16;
//   the root (embeddings 32000 x 2048, final norm 2048, lm_head 32000 x 2048): 131,074,048 elements =
//     262,148,096 B.
// A block over 10 MiB gets a segment rounded up to 2 MiB (spec: kRoundLarge):
constexpr std::int64_t kLayerSegment = 43 * 2'097'152;  // 88,088,576 B -> 42.004 x 2 MiB -> 90,177,536
constexpr std::int64_t kRootSegment = 126 * 2'097'152;  // 262,148,096 B -> 125.002 x 2 MiB -> 264,241,152
// FSDP2 under bf16 mixed precision (--master-weights fp32: fp32 shards) first casts a unit's shards into one
// flat bf16 buffer on the copy-in stream (_get_param_all_gather_inputs): the root's is 262,148,096 / 8 =
// 32,768,512 B -> 15.6 x 2 MiB -> 16 x 2 MiB; a layer's, 11,011,072 B, then fits in that segment's free
// block.
constexpr std::int64_t kRootCopyInSegment = 16 * 2'097'152;
constexpr int kLayers = 22;

RequestArgs tinyllama_over_8(bool fsdp2) {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.capacity = "1TiB";  // never the limit: every segment the run wants is cudaMalloc'd
  a.batch = 1;
  a.seq = 128;
  a.precision = "bf16";
  a.optimizer = "adamw";
  a.steps = 1;
  a.world_size = 8;
  a.fsdp = "full-shard";
  a.fsdp2 = fsdp2;
  return a;
}

// The sizes of the segments the allocator model cudaMalloc'd on `stream`, largest first: the predicted
// schedule replayed on a device that never runs out (no segment is released).
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

TEST_CASE(
    "FSDP2: the copy-in stream holds the root's all-gather output and one layer's, whatever the host does",
    "[quick][predict]") {
  // _fsdp_param_group.py: unshard() allocates the unit's all-gather output on the copy-in stream (3); in
  // forward, wait_for_unshard keeps it (all_gather_state) until the next unit's wait_for_unshard, after that
  // unit's output is allocated, then drops it in stream order; the root's post-forward drops the last; in
  // backward it is dropped right after the copy-out. So at most two outputs are alive: the root's, then one
  // layer's beside it (a new segment); every later output fits a block freed on the same stream (the root's
  // block is split for a layer; the layer's block is the best fit for the next). Before each output the
  // unit's bf16 copy-in buffer is allocated there and dropped after it: the root's, first, gets a segment of
  // its own that every layer's then reuses. No record_stream: the host's
  // lead does not matter.
  for (double host_us : {0.0, 10.0, 1e5}) {
    INFO("--host-op-us " << host_us);
    RequestArgs a = tinyllama_over_8(true);
    a.host_op_us = host_us;
    Snapshot trace;
    predict(make_request(a), &trace);
    CHECK(segments_on(trace, 3) ==
          std::vector<std::int64_t>{kRootSegment, kLayerSegment, kRootCopyInSegment});
    CHECK(segments_on(trace, 1).empty());  // FSDP1's unshard stream is not used
  }
}

TEST_CASE("FSDP1: record_stream'd all-gather buffers, with and without limit_all_gathers (host never waits)",
          "[quick][predict]") {
  // --host-op-us 0: the host issues everything at time 0, so a record_stream'd free (spec ST3) completes
  // only after the host has waited for the device. The unsharded flat parameters are allocated on the
  // unshard stream (1); reshard frees them with record_stream(compute stream); the root is not resharded
  // after forward (its block stays allocated until the end of backward).
  SECTION("limit_all_gathers=False: no host wait, no free completes: every all-gather gets a new segment") {
    // Forward: the root and 22 layers; backward: the 22 layers again (the root's buffer is still there).
    RequestArgs a = tinyllama_over_8(false);
    a.host_op_us = 0;
    a.no_limit_all_gathers = true;
    Snapshot trace;
    predict(make_request(a), &trace);
    std::vector<std::int64_t> expected{kRootSegment};
    expected.insert(expected.end(), 2 * kLayers, kLayerSegment);
    CHECK(segments_on(trace, 1) == expected);
  }
  SECTION("limit_all_gathers=True: two in flight; backward prefetch needs a fourth buffer") {
    // _FreeEventQueue: before an all-gather, with two reshard events queued, the host synchronizes on the
    // oldest. Forward: layer 0 and layer 1 get segments (one event queued at layer 1); layer k >= 2 waits
    // for layer k-2's reshard, whose block is then free: forward holds the root's and two layers' segments.
    // Backward, BACKWARD_PRE: layer 21's all-gather waits for layer 20's forward reshard and takes its
    // block; the prefetch of layer 20 then finds one event queued (layer 21's), does not wait, and layer
    // 21's block is still pending (the device is past layer 20, not 21): a third layer segment. From then
    // on each all-gather waits for the reshard two back and reuses its block.
    RequestArgs a = tinyllama_over_8(false);
    a.host_op_us = 0;
    Snapshot trace;
    predict(make_request(a), &trace);
    CHECK(segments_on(trace, 1) ==
          std::vector<std::int64_t>{kRootSegment, kLayerSegment, kLayerSegment, kLayerSegment});
  }
}

TEST_CASE("FSDP options: errors name the option", "[quick][predict]") {
  RequestArgs a = tinyllama_over_8(true);
  a.no_limit_all_gathers = true;
  CHECK_THROWS_WITH(make_request(a), "--no-limit-all-gathers: FSDP1's option (--fsdp without --fsdp2)");
  a = tinyllama_over_8(true);
  a.fsdp = "no-shard";
  CHECK_THROWS_WITH(make_request(a),
                    "--fsdp2: fully_shard has no no-shard strategy (use DDP: leave out --fsdp2)");
  a = tinyllama_over_8(false);
  a.reduce_dtype = "fp64";
  CHECK_THROWS_WITH(make_request(a), "--reduce-dtype: unknown value 'fp64' (known: fp32, bf16, fp16)");
  a.fsdp.clear();
  a.reduce_dtype = "fp32";
  CHECK_THROWS_WITH(make_request(a),
                    "--reduce-dtype: FSDP's MixedPrecision reduce_dtype (use it with --fsdp)");
}

TEST_CASE(
    "FSDP2 reduce-scatter input: where it is allocated and how long it lives, current vs the 2024 FSDP2",
    "[quick][predict]") {
  // foreach_reduce with reduce_dtype fp32: one layer's input is the padded unsharded gradients in fp32,
  // 44,044,288 x 4 = 176,177,152 B (nothing to pad over 8 ranks). Current PyTorch (since
  // pytorch/pytorch#129721) allocates it on the compute stream and keeps it (comm_ctx.reduce_scatter_state)
  // until the next unit's FSDPParamGroup.post_backward, which waits on its event and sets the state to None
  // before foreach_reduce allocates the next input (_fsdp_param_group.py): one alive at a time, the previous
  // freed before the next is allocated. The 2024 FSDP2 allocated it on the reduce-scatter stream and
  // dropped it when foreach_reduce_scatter returned: one at a time too.
  constexpr std::int64_t kLayerInput = 176'177'152;
  for (const char* copy_in : {"compute", "reduce-scatter"}) {
    INFO("--fsdp2-copy-in " << copy_in);
    RequestArgs a = tinyllama_over_8(true);
    a.reduce_dtype = "fp32";
    a.fsdp2_copy_in = copy_in;
    Snapshot trace;
    predict(make_request(a), &trace);
    std::map<Bytes, StreamId> alive;  // layer inputs by address
    std::size_t inputs = 0;
    std::size_t most_alive = 0;
    std::vector<StreamId> streams;
    for (const TraceEvent& e : trace.device_traces.at(0).events) {
      if (e.action == TraceAction::kAlloc && static_cast<std::int64_t>(e.size_bytes) == kLayerInput) {
        alive[e.addr] = e.stream;
        streams.push_back(e.stream);
        ++inputs;
        most_alive = std::max(most_alive, alive.size());
      } else if (e.action == TraceAction::kFreeRequested) {
        alive.erase(e.addr);
      }
    }
    CHECK(inputs == kLayers);  // one per decoder layer per backward
    const bool current = std::string(copy_in) == "compute";
    CHECK(most_alive == 1U);
    CHECK(streams == std::vector<StreamId>(kLayers, current ? StreamId{0} : StreamId{2}));
    CHECK(alive.empty());  // the last one goes at the end of backward
    // The segments that hold the inputs, each a cudaMalloc of the block rounded up to 2 MiB (spec: requests
    // over 10 MiB): the first layer's input gets one of 84.008 -> 85 x 2 MiB = 178,257,920 B that every later
    // layer's input reuses (one alive at a time, on one stream); the root's input (embeddings, final norm,
    // lm_head: 131,074,048 x 4 = 524,296,192 B, 250.004 -> 251 x 2 MiB) finds the layers' block too small
    // and gets its own. Nothing else on these streams is as large (the root's bf16 all-gather output,
    // 262,148,096 B, is on the copy-in stream; the unsharded parameters, gradients and states are one
    // tensor per parameter, at most 131,072,000 B), so a second input alive at once, or an input on the
    // other stream, changes these lists.
    const std::vector<std::int64_t> inputs_segments{251 * 2'097'152, 85 * 2'097'152};
    const auto large = [&](StreamId stream) {
      std::vector<std::int64_t> out = segments_on(trace, stream);
      out.erase(std::remove_if(out.begin(), out.end(), [](std::int64_t b) { return b < 150 * 1'048'576; }),
                out.end());
      return out;
    };
    CHECK(large(current ? 0 : 2) == inputs_segments);
    CHECK(large(current ? 2 : 0).empty());
  }
}

TEST_CASE("FSDP2 as torchtitan applies it: the last decoder layer is not resharded after forward",
          "[quick][predict]") {
  // torchtitan's apply_fsdp (torchtitan/parallelisms/parallelize_llama.py at 9dec370, and the FSDP2
  // parallelize_llama.py of pull request 165, 83c879f): reshard_after_forward = layer_id < n_layers - 1, so
  // the last block's unsharded bf16 parameters (one TinyLlama layer: 44,044,288 elements x 2 B = 88,088,576
  // B, nothing padded over 8 ranks) stay from its forward until its backward.
  constexpr std::int64_t kLayerUnsharded = 88'088'576;
  const auto run = [](const char* last_layer, Snapshot* trace) {
    RequestArgs a = tinyllama_over_8(true);
    a.fsdp2_last_layer = last_layer;
    return predict(make_request(a), trace);
  };
  Snapshot resharded_trace;
  Snapshot kept_trace;
  const Prediction resharded = run("reshard", &resharded_trace);
  const Prediction kept = run("keep", &kept_trace);
  // Where the forward ends (the loss about to start), exactly that layer's parameters more are alive
  // (requested bytes: the allocated ones also carry where the blocks fell).
  REQUIRE(resharded.phases_requested.after_forward.has_value());
  REQUIRE(kept.phases_requested.after_forward.has_value());
  CHECK(*kept.phases_requested.after_forward - *resharded.phases_requested.after_forward == kLayerUnsharded);
  // The backward frees them again: after it, both runs hold the same.
  CHECK(kept.phases_requested.after_backward == resharded.phases_requested.after_backward);
  // Each all-gather allocates the unit's flat output (the same 88,088,576 B): fully_shard's default gathers
  // every layer in forward and again in backward (2 x 22); torchtitan's last layer is still gathered when its
  // backward starts, so its pre_backward issues none (2 x 22 - 1).
  const auto gathers = [](const Snapshot& trace) {
    std::size_t n = 0;
    for (const TraceEvent& e : trace.device_traces.at(0).events) {
      n += e.action == TraceAction::kAlloc && static_cast<std::int64_t>(e.size_bytes) == kLayerUnsharded &&
           e.stream == StreamId{3};  // the all-gather copy-in stream
    }
    return n;
  };
  CHECK(gathers(resharded_trace) == 2U * kLayers);
  CHECK(gathers(kept_trace) == 2U * kLayers - 1U);
  // And the one all-gather saved is the last layer's: the trace names each allocation's op
  // (layers.<l>.fsdp.all_gather_copy_in), and every other layer is gathered twice, layer 21 once.
  const auto gathers_by_layer = [](const Snapshot& trace) {
    std::map<std::string, int> n;
    for (const TraceEvent& e : trace.device_traces.at(0).events) {
      if (e.action == TraceAction::kAlloc && static_cast<std::int64_t>(e.size_bytes) == kLayerUnsharded &&
          e.stream == StreamId{3} && e.op_tag != kNoTag) {
        ++n[trace.strings.at(e.op_tag)];
      }
    }
    return n;
  };
  const auto gather_op = [](int layer) {
    return "layers." + std::to_string(layer) + ".fsdp.all_gather_copy_in";
  };
  std::map<std::string, int> expected;
  for (int l = 0; l < kLayers; ++l) {
    expected[gather_op(l)] = 2;
  }
  CHECK(gathers_by_layer(resharded_trace) == expected);
  expected[gather_op(kLayers - 1)] = 1;
  CHECK(gathers_by_layer(kept_trace) == expected);
}

TEST_CASE("fsdp2 last-layer flag: errors name the option", "[quick][predict]") {
  RequestArgs a = tinyllama_over_8(true);
  a.fsdp2_last_layer = "sometimes";
  CHECK_THROWS_WITH(make_request(a), "--fsdp2-last-layer: unknown value 'sometimes' (known: reshard, keep)");
  a = tinyllama_over_8(false);
  a.fsdp2_last_layer = "keep";
  CHECK_THROWS_WITH(make_request(a), "--fsdp2-last-layer: FSDP2's option (use it with --fsdp2)");
  a = tinyllama_over_8(true);
  a.fsdp2_last_layer = "keep";
  a.pp = 2;
  CHECK_THROWS_WITH(make_request(a),
                    "--fsdp2-last-layer keep: torchtitan's rule without pipeline parallelism (under --pp it "
                    "keeps every block: --fsdp shard-grad-op)");
}
