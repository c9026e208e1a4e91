// A workload: what a program asks of its allocator, in order, with what made each request. The one road
// from a workload to the allocator model — `predict`'s generated steps (workload_from_schedule,
// sim/graph/tensor_lifetime.h), `trace`'s traced script (workload_from_trace,
// sim/replay/request_sequence_from_trace.h), `compare` and `sweep`'s runs — is run_policy()
// (sim/simulate/policy_run.h) over its requests. Recordings and `--trace-out` files are edges: they are read
// into, or written from, a workload; the allocator never sees the recording format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/alloc/request_sequence.h"

namespace vramsim {

// What made a request: indices into Workload::strings (0 = "", none), and the decoder layer (-1: outside
// the layers). For an allocation the op is its producer; for a free, the op after which it was freed.
struct RequestLabel {
  std::uint32_t op_tag = 0;
  std::uint32_t category_tag = 0;  // the tensor's category (parameter, activation, ...)
  std::uint32_t phase_tag = 0;     // the training phase ("forward", ...)
  std::int32_t layer = -1;
};

// From request `request_index` on, the run is in `phase` of training step `step` (0 = setup). The phases
// predict and trace use: setup, forward, loss, after_forward (an inference forward returned), backward,
// post_backward, optimizer, after_optimizer, zero_grad.
struct RunMarker {
  std::size_t request_index = 0;
  int step = 0;
  std::string phase;
};

struct Workload {
  std::string source;  // what ran, for messages
  RequestSequence requests;
  std::vector<RequestLabel> labels;      // one per request (requests.ops())
  std::vector<std::string> strings{""};  // tag texts; [0] = ""
  std::vector<RunMarker> markers;        // ascending request_index; may be empty

  const std::string& tag(std::uint32_t index) const {
    static const std::string kNone;
    return index < strings.size() ? strings[index] : kNone;
  }
};

}  // namespace vramsim
