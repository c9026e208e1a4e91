// DDP's find_unused_parameters=True and static_graph=True (--find-unused-parameters, --static-graph) are
// accepted and allocate nothing vramsim models (sim/predict/request_args.cpp says why, from
// torch/csrc/distributed/c10d/reducer.cpp):
// - find_unused_parameters: after each forward, Reducer::prepare_for_backward runs search_unused_parameters,
//   a walk of the autograd graph on the host, and marks the parameters it does not reach ready at once; their
//   slots in the same buckets are zero-filled (mark_variable_ready's zero_ on the bucket view). The buckets,
//   the .grad tensors and the all-reduces are the ones DDP makes without it; its one device allocation, the
//   int32 local_used_map (4 B per parameter tensor) is not modelled.
// - static_graph: the first iteration's all-reduces are delayed to the end of backward (delay_all_reduce),
//   over the same buckets and .grad tensors; later iterations are the default's.
// So with either flag, or both, the allocator sees exactly the requests the plain DDP step makes: this test
// fails if a change wires either flag to an allocation without a mechanism from reducer.cpp.
#include <catch2/catch.hpp>

#include "sim/predict/step_prediction.h"
#include "traces/snapshot.h"

using namespace vramsim;

namespace {

// Two DDP ranks of TinyLlama-1.1B at batch 1 x 128 in fp32, two steps.
RequestArgs ddp_args() {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.world_size = 2;
  a.steps = 2;
  return a;
}

// The generated allocator trace (every alloc, free and segment event, with its size, stream and time).
Snapshot trace(const RequestArgs& a) {
  Snapshot s;
  (void)predict(make_request(a), &s);
  return s;
}

}  // namespace

TEST_CASE("DDP find_unused_parameters and static_graph: the same allocator requests as plain DDP",
          "[predict][ddp]") {
  const Snapshot plain = trace(ddp_args());
  REQUIRE_FALSE(plain.device_traces.empty());
  REQUIRE(plain.device_traces[0].events.size() > 100);

  RequestArgs unused = ddp_args();
  unused.find_unused_parameters = true;
  CHECK(trace(unused) == plain);

  RequestArgs fixed = ddp_args();
  fixed.static_graph = true;
  CHECK(trace(fixed) == plain);

  RequestArgs both = ddp_args();
  both.find_unused_parameters = true;
  both.static_graph = true;
  CHECK(trace(both) == plain);

  // The comparison can tell DDP options apart: gradient_as_bucket_view, which does change what is allocated
  // (the .grad tensors become views of the buckets), gives another trace.
  RequestArgs view = ddp_args();
  view.gradient_as_bucket_view = true;
  CHECK_FALSE(trace(view) == plain);
}

TEST_CASE("DDP find_unused_parameters and static_graph: DDP's options only", "[predict][ddp]") {
  RequestArgs a = ddp_args();
  a.world_size = 1;
  a.find_unused_parameters = true;
  CHECK_THROWS_WITH(make_request(a),
                    "--find-unused-parameters: DDP's option (--gpus N without --zero or --fsdp)");
  a.find_unused_parameters = false;
  a.static_graph = true;
  CHECK_THROWS_WITH(make_request(a), "--static-graph: DDP's option (--gpus N without --zero or --fsdp)");
}
