// build_allocation_schedule() and workload_from_schedule() were rewritten for speed (issue 40: flat per-op
// lists instead of a vector per op, tag lookup by view, a table instead of a hash map per tensor). The
// allocator must see exactly the same requests, so this file keeps the direct versions as they were before
// (copied from sim/graph/tensor_lifetime.cpp at commit 055b331) and compares them with the library's, on the
// untimed schedule and on the engine's (the one predict hands the allocator), over a grid of configurations:
// parallel layouts (DDP, ZeRO-1..3, FSDP2, tensor and pipeline parallel), LoRA and QLoRA (bitsandbytes 4-bit
// base weights), offload, torch.compile, mixed and pure precision, checkpointing, and generation. Any
// difference in an event, a tag, a phase marker, a live-bytes figure or a request fails. The eighth pass's
// shortcuts are compared the same way: the timed schedule from the streams the timeline found per event
// against the one from the graph's lookups, and the string tables moved against those copied.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/core/error.h"
#include "sim/engine/roofline.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/plan/plan.h"
#include "sim/predict/step_prediction.h"
#include "sim/predict/step_timeline.h"

namespace vramsim {
namespace {

// The direct version of build_allocation_schedule (before issue 40).
AllocationSchedule direct_schedule(const OpGraph& graph) {
  AllocationSchedule out;
  std::unordered_map<std::string, std::uint32_t> index;
  for (std::uint32_t i = 0; i < out.strings.size(); ++i) {
    index.emplace(out.strings[i], i);
  }
  const auto intern = [&](std::string_view s) {
    auto it = index.find(std::string(s));
    if (it != index.end()) {
      return it->second;
    }
    out.strings.emplace_back(s);
    const auto id = static_cast<std::uint32_t>(out.strings.size() - 1);
    index.emplace(out.strings.back(), id);
    return id;
  };
  const std::size_t n_ops = graph.op_count();
  std::vector<std::vector<TensorId>> allocs(n_ops);
  std::vector<std::vector<TensorId>> frees(n_ops);
  for (const Tensor& t : graph.tensors()) {
    if (t.size_bytes == 0) {
      continue;
    }
    allocs[t.producer].push_back(t.id);
    if (!t.persistent) {
      frees[t.last_consumer()].push_back(t.id);
    }
  }
  constexpr int kCategories = static_cast<int>(TensorCategory::kKvCache) + 1;
  std::uint32_t category_tags[kCategories];
  for (int c = 0; c < kCategories; ++c) {
    category_tags[c] = intern(category_name(static_cast<TensorCategory>(c)));
  }
  constexpr int kPhases = static_cast<int>(Phase::kZeroGrad) + 1;
  std::uint32_t phase_tags[kPhases];
  for (int p = 0; p < kPhases; ++p) {
    phase_tags[p] = intern(phase_name(static_cast<Phase>(p)));
  }
  std::int64_t live = 0;
  const auto emit = [&](TraceAction action, const Tensor& t, std::uint32_t op_tag, std::uint32_t phase_tag,
                        std::int32_t layer) {
    TraceEvent e;
    e.action = action;
    e.addr = synthetic_address(t.id);
    e.size_bytes = t.size_bytes;
    e.op_tag = op_tag;
    e.category_tag = category_tags[static_cast<int>(t.category)];
    e.phase_tag = phase_tag;
    e.layer = layer;
    out.events.push_back(e);
    out.event_tensor.push_back(t.id);
    if (action == TraceAction::kAlloc) {
      live += static_cast<std::int64_t>(t.size_bytes);
    } else if (action == TraceAction::kFreeCompleted) {
      live -= static_cast<std::int64_t>(t.size_bytes);
    }
    out.live_bytes_after.push_back(live);
    if (live > out.peak_live_bytes) {
      out.peak_live_bytes = live;
      out.peak_event_index = out.events.size() - 1;
    }
  };
  for (OpId id = 0; id < n_ops; ++id) {
    const Op& op = graph.op(id);
    if (out.phases.empty() || out.phases.back().step != op.step || out.phases.back().phase != op.phase ||
        out.phases.back().micro_batch != op.micro_batch) {
      out.phases.push_back(PhaseMarker{op.step, op.micro_batch, op.phase, out.events.size()});
    }
    if (allocs[id].empty() && frees[id].empty()) {
      continue;
    }
    const std::uint32_t op_tag = intern(op.name);
    const std::uint32_t phase_tag = phase_tags[static_cast<int>(op.phase)];
    const std::int32_t layer = op.layer >= 0 ? static_cast<std::int32_t>(op.layer) : kNoLayer;
    for (TensorId t : allocs[id]) {
      emit(TraceAction::kAlloc, graph.tensor(t), op_tag, phase_tag, layer);
    }
    for (TensorId t : frees[id]) {
      emit(TraceAction::kFreeRequested, graph.tensor(t), op_tag, phase_tag, layer);
      emit(TraceAction::kFreeCompleted, graph.tensor(t), op_tag, phase_tag, layer);
    }
  }
  return out;
}

// The direct version of workload_from_schedule's requests (before issue 40).
RequestSequence direct_requests(const AllocationSchedule& schedule) {
  RequestSequence requests;
  std::unordered_map<TensorId, std::size_t> alloc_id;
  for (std::size_t i = 0; i < schedule.events.size(); ++i) {
    const TraceEvent& e = schedule.events[i];
    const TensorId t = schedule.event_tensor[i];
    if (e.action == TraceAction::kAlloc) {
      alloc_id[t] = requests.add_alloc(e.size_bytes, e.stream, e.time_ns);
    } else if (e.action == TraceAction::kFreeRequested) {
      requests.add_free(alloc_id.at(t), e.time_ns);
    } else {
      const std::size_t free_index = requests.free_op_index(alloc_id.at(t));
      if (requests.ops().size() > free_index + 1) {
        requests.set_streams_done_before(alloc_id.at(t), requests.ops().size());
      }
    }
  }
  return requests;
}

void check_same_schedule(const AllocationSchedule& fast, const AllocationSchedule& direct) {
  REQUIRE(fast.events.size() == direct.events.size());
  for (std::size_t i = 0; i < fast.events.size(); ++i) {
    INFO("event " << i);
    REQUIRE(fast.events[i] == direct.events[i]);
  }
  CHECK(fast.strings == direct.strings);
  CHECK(fast.event_tensor == direct.event_tensor);
  CHECK(fast.live_bytes_after == direct.live_bytes_after);
  CHECK(fast.peak_live_bytes == direct.peak_live_bytes);
  CHECK(fast.peak_event_index == direct.peak_event_index);
  REQUIRE(fast.phases.size() == direct.phases.size());
  for (std::size_t i = 0; i < fast.phases.size(); ++i) {
    CHECK(fast.phases[i].step == direct.phases[i].step);
    CHECK(fast.phases[i].micro_batch == direct.phases[i].micro_batch);
    CHECK(fast.phases[i].phase == direct.phases[i].phase);
    CHECK(fast.phases[i].event_index == direct.phases[i].event_index);
  }
}

void check_same_requests(const RequestSequence& fast, const RequestSequence& direct) {
  REQUIRE(fast.ops().size() == direct.ops().size());
  for (std::size_t i = 0; i < fast.ops().size(); ++i) {
    INFO("request " << i);
    const RequestOp& a = fast.ops()[i];
    const RequestOp& b = direct.ops()[i];
    REQUIRE(a.kind == b.kind);
    REQUIRE(a.alloc_id == b.alloc_id);
    REQUIRE(a.size_bytes == b.size_bytes);
    REQUIRE(a.stream == b.stream);
    REQUIRE(a.time_ns == b.time_ns);
    REQUIRE(a.streams_done_before == b.streams_done_before);
  }
}

// The configurations of `plan` for Llama-3.2-1B on 8 GPUs (every lever), a sample of each kind, plus
// generation.
std::vector<RequestArgs> grid() {
  PlanRequest r;
  r.model = "llama-3.2-1b";
  r.gpu = "h100";
  r.gpus = 8;
  r.global_batch = 16;
  r.seq = 256;
  r.allow = {"lora", "qlora", "offload", "compile"};
  std::vector<PlanConfig> configs;
  const auto add = [&](auto&& edit) {
    PlanConfig c;
    c.grad_accumulation = 2;
    edit(c);
    configs.push_back(c);
  };
  add([](PlanConfig&) {});                                           // DDP, amp-bf16
  add([](PlanConfig& c) { c.zero = 1, c.precision = "bf16"; });      // ZeRO-1, pure bf16
  add([](PlanConfig& c) { c.zero = 2, c.checkpointing = "full"; });  // ZeRO-2
  add([](PlanConfig& c) { c.zero = 3, c.checkpointing = "selective-op"; });
  add([](PlanConfig& c) { c.fsdp = "fsdp2", c.optimizer = "adamw-8bit"; });
  add([](PlanConfig& c) { c.tp = 2; });  // Megatron TP + sequence parallelism
  add([](PlanConfig& c) { c.tp = 8, c.pp = 1; });
  add([](PlanConfig& c) { c.tp = 2, c.pp = 2, c.zero = 1; });  // pipeline
  add([](PlanConfig& c) { c.adapters = "lora"; });
  add([](PlanConfig& c) { c.adapters = "qlora", c.checkpointing = "full"; });
  add([](PlanConfig& c) { c.zero = 2, c.offload = "optimizer"; });
  add([](PlanConfig& c) { c.offload = "activations"; });
  add([](PlanConfig& c) { c.compile = true; });
  std::vector<RequestArgs> out;
  for (const PlanConfig& c : configs) {
    RequestArgs a = predict_args(r, c);
    a.steps = 2;
    out.push_back(a);
  }
  RequestArgs gen;
  gen.model = "llama-3.2-1b";
  gen.gpu = "h100";
  gen.batch = 2;
  gen.seq = 64;
  gen.precision = "bf16";
  gen.inference = true;
  gen.generate = 8;
  out.push_back(gen);
  return out;
}

}  // namespace

TEST_CASE("schedule fast path: the same events and requests as the direct construction on a grid",
          "[graph][predict]") {
  int compared = 0;
  std::set<StreamId> streams_seen;
  for (const RequestArgs& a : grid()) {
    INFO("model " << a.model << " tp " << a.tp << " pp " << a.pp << " lora " << a.lora_rank << " compile '"
                  << a.compile_mode << "' generate " << a.generate << " checkpointing " << a.checkpointing);
    PredictRequest request;
    try {
      request = make_request(a);
    } catch (const InputError& e) {
      FAIL("the grid holds a configuration predict refuses: " << e.what());
    }
    const OpGraph graph = build_training_steps(request.model, request.options);
    const AllocationSchedule fast = build_allocation_schedule(graph);
    const AllocationSchedule direct = direct_schedule(graph);
    REQUIRE(!fast.events.empty());
    check_same_schedule(fast, direct);
    check_same_requests(workload_from_schedule(fast, "test").requests, direct_requests(direct));
    // What predict hands the allocator: the schedule in the engine's order, with streams and record_stream.
    const Roofline roofline = Roofline::for_gpu(request.gpu, request.roofline);
    const Timeline timeline = simulate_timeline(graph, fast, &roofline, request.host);
    const AllocationSchedule timed = timed_schedule(graph, fast, timeline);
    check_same_requests(workload_from_schedule(timed, "test").requests, direct_requests(timed));
    // Issue 40's shortcuts against the roads they replace: the streams the timeline found per event against
    // the graph's lookup (a timeline without them), and the string tables moved instead of copied.
    REQUIRE(timeline.event_stream.size() == fast.events.size());
    Timeline looked_up = timeline;
    looked_up.event_stream.clear();
    check_same_schedule(timed, timed_schedule(graph, fast, looked_up));
    for (const TraceEvent& e : timed.events) {
      streams_seen.insert(e.stream);
    }
    AllocationSchedule moved_from = fast;
    check_same_schedule(timed, timed_schedule(graph, std::move(moved_from), timeline));
    AllocationSchedule timed_copy = timed;
    const Workload copied = workload_from_schedule(timed, "test");
    const Workload moved = workload_from_schedule(std::move(timed_copy), "test");
    CHECK(moved.strings == copied.strings);
    CHECK(moved.labels.size() == copied.labels.size());
    check_same_requests(moved.requests, copied.requests);
    ++compared;
  }
  CHECK(compared == 14);
  CHECK(streams_seen.size() > 1);  // the grid's layouts put work on side streams: the comparison saw them
}

}  // namespace vramsim
