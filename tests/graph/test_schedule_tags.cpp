// The layer and phase tags of generated schedules: every event names the phase of its op (the producer for an
// allocation, the last consumer for a free), forward allocations of layer k come from that layer's ops, the
// backward pass frees and allocates per layer, and the tags survive the trace formats.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"
#include "traces/pickle/pickle_reader.h"
#include "traces/trace_io.h"

using namespace vramsim;

TEST_CASE("schedules: every event carries its op's phase and layer", "[quick][graph]") {
  const ModelConfig model = test::tiny_model("gpt2");
  const TrainingOptions options = test::small_options();  // 2 steps
  REQUIRE(options.steps == 2);
  const OpGraph g = build_training_steps(model, options);
  const AllocationSchedule s = build_allocation_schedule(g);
  REQUIRE_FALSE(s.events.empty());

  std::set<std::string> phases_seen;
  std::vector<int> forward_allocs(static_cast<std::size_t>(model.n_layers), 0);
  std::vector<int> backward_allocs(static_cast<std::size_t>(model.n_layers), 0);
  std::vector<int> backward_frees(static_cast<std::size_t>(model.n_layers), 0);
  std::size_t marker = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const TraceEvent& e = s.events[i];
    const Tensor& t = g.tensor(s.event_tensor[i]);
    const bool alloc = e.action == TraceAction::kAlloc;
    const Op& op = g.op(alloc ? t.producer : t.last_consumer());
    INFO("event " << i << " op " << op.name);
    REQUIRE(e.phase_tag != kNoTag);
    REQUIRE(e.phase_tag < s.strings.size());
    const std::string& phase = s.strings[e.phase_tag];
    REQUIRE(phase == phase_name(op.phase));
    REQUIRE(e.layer == op.layer);
    REQUIRE(s.strings.at(e.op_tag) == op.name);
    phases_seen.insert(phase);

    // The phase markers agree: event i lies in the last marker that starts at or before it.
    while (marker + 1 < s.phases.size() && s.phases[marker + 1].event_index <= i) {
      ++marker;
    }
    REQUIRE(phase_name(s.phases.at(marker).phase) == phase);

    if (e.layer == kNoLayer) {
      continue;
    }
    REQUIRE(e.layer >= 0);
    REQUIRE(e.layer < model.n_layers);
    const auto k = static_cast<std::size_t>(e.layer);
    if (op.phase == Phase::kForward && alloc) {
      // gpt2 names its layer ops like the module tree, under "layers.<k>." (parameters are
      // "transformer.h.<k>." but are allocated in setup by model.to(device), outside any layer).
      REQUIRE(op.name.starts_with("layers." + std::to_string(k) + "."));
      ++forward_allocs[k];
    } else if (op.phase == Phase::kBackward) {
      ++(alloc ? backward_allocs[k] : backward_frees[k]);
    }
  }
  CHECK(phases_seen ==
        std::set<std::string>{"setup", "forward", "loss", "backward", "optimizer", "zero_grad"});
  for (std::size_t k = 0; k < forward_allocs.size(); ++k) {
    INFO("layer " << k);
    CHECK(forward_allocs[k] > 0);
    CHECK(backward_allocs[k] > 0);
    CHECK(backward_frees[k] > 0);
  }
}

TEST_CASE("schedules: forward ops named after layer k are tagged with layer k", "[quick][graph]") {
  const OpGraph g = build_training_steps(test::tiny_model("gpt2"), test::small_options());
  const AllocationSchedule s = build_allocation_schedule(g);
  int checked = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const TraceEvent& e = s.events[i];
    const std::string& op = s.strings.at(e.op_tag);
    for (int k = 0; k < 2; ++k) {
      if (op.starts_with("layers." + std::to_string(k) + ".")) {
        INFO(op);
        CHECK(e.layer == k);
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("schedules: layer and phase tags survive vtrace, JSON and pickle", "[quick][graph]") {
  const AllocationSchedule s =
      build_allocation_schedule(build_training_steps(test::tiny_model("gpt2"), test::small_options()));
  const Snapshot snap = schedule_to_snapshot(s, "gpt2 tiny 2 steps (generated)");
  REQUIRE(snap.device_traces.at(0).events == s.events);

  const Snapshot from_vtrace = read_vtrace(write_vtrace(snap), snap.source);
  CHECK(from_vtrace == snap);

  // JSON and pickle rebuild the string table in reading order; compare the tag texts.
  const auto same_tags = [&snap](const Snapshot& back) {
    const std::vector<TraceEvent>& a = snap.device_traces[0].events;
    const std::vector<TraceEvent>& b = back.device_traces.at(0).events;
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      REQUIRE(back.strings.at(b[i].phase_tag) == snap.strings[a[i].phase_tag]);
      REQUIRE(back.strings.at(b[i].op_tag) == snap.strings[a[i].op_tag]);
      REQUIRE(back.strings.at(b[i].category_tag) == snap.strings[a[i].category_tag]);
      REQUIRE(b[i].layer == a[i].layer);
    }
  };
  same_tags(snapshot_from_json(snapshot_to_json(snap), snap.source));
  same_tags(snapshot_from_pickle(write_pickle(snapshot_to_json(snap)), snap.source));
}
