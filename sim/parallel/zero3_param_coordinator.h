// DeepSpeed ZeRO-3's PartitionedParameterCoordinator
// (deepspeed/runtime/zero/partitioned_param_coordinator.py): which partitioned parameters are gathered
// (all-gathered into whole tensors) when. DeepSpeed's hooks call it around each submodule that owns
// parameters; here around each op and backward node that reads parameters (EagerTape's parameter-use hooks),
// which for a Transformer is the same modules (each Linear, Embedding, norm).
//
//   fetch_sub_module    gathers the module's parameters that are not available. From the second step (a
//                       complete trace: the first step records the order of the modules), it first pops the
//                       module's parameters off the step's parameter queue, then prefetches the next ones in
//                       the trace that are not available, up to min(stage3_max_live_parameters - elements
//                       available, stage3_prefetch_bucket_size) elements.
//   release_sub_module  releases the module's parameters (not the persistent ones): all of them while the
//                       trace is recorded; with a complete trace, not those the modules within
//                       stage3_max_reuse_distance elements later in the trace use again, nor those a prefetch
//                       has marked for a later module (__params_to_release).
//   reset_step          the end of a micro-step's backward: what is still gathered is released
//                       (release_and_reset_all), and the next step replays the trace.
//
// An all-gather of one parameter allocates its padded whole tensor at once (ceil(numel / world) x world
// elements). One of several (a prefetch, or a module with more than one) all-gathers into one flat buffer of
// all their padded partitions (all_gather_coalesced); the first module that waits on it gives each of its
// parameters a tensor of its own (torch.cat of its parts: numel elements) and the flat buffer goes.
// Parameters of at most stage3_param_persistence_threshold elements stay whole and are never gathered.
// Sizes are elements (ds_numel), as DeepSpeed counts them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "sim/graph/eager_tape.h"

namespace vramsim {

struct Zero3Config {
  std::int64_t prefetch_bucket_numel = 50'000'000;        // stage3_prefetch_bucket_size
  std::int64_t max_live_numel = 1'000'000'000;            // stage3_max_live_parameters
  std::int64_t max_reuse_distance_numel = 1'000'000'000;  // stage3_max_reuse_distance
  std::int64_t persistence_threshold_numel = 100'000;     // stage3_param_persistence_threshold
};

class PartitionedParameterCoordinator {
 public:
  PartitionedParameterCoordinator(const Zero3Config& config, int world_size)
      : m_config(config), m_world(world_size) {}

  // A parameter of this many elements stays whole on every rank.
  bool persistent(std::int64_t numel) const { return numel <= m_config.persistence_threshold_numel; }

  void fetch_sub_module(EagerTape& tape, const std::vector<VarId>& params, bool forward);
  void release_sub_module(EagerTape& tape, const std::vector<VarId>& params);
  void reset_step(EagerTape& tape);

  bool complete_trace() const { return m_complete; }
  std::int64_t available_numel() const { return m_available_numel; }

 private:
  struct Module {
    std::vector<VarId> params;
    std::int64_t numel = 0;  // of all its parameters, persistent ones included
  };
  struct ParamInTrace {  // __ParamInTrace
    VarId param = 0;
    std::size_t step_id = 0;  // step_id_last_used_at: the position of the module that uses it
  };
  bool partitioned(const EagerTape& tape, VarId p) const { return !persistent(numel(tape.shape(p))); }
  struct CoalescedHandle {  // AllGatherCoalescedHandle
    TensorId flat = kNoTensor;
    std::vector<VarId> params;
  };
  bool not_available(VarId p) const { return m_gathered.count(p) == 0 && m_inflight.count(p) == 0; }
  void all_gather(EagerTape& tape, const std::vector<VarId>& params, const std::string& op_name);
  void wait(EagerTape& tape, VarId p);  // materializes p's coalesced all-gather, if in flight
  void release(EagerTape& tape, VarId p);

  Zero3Config m_config;
  int m_world = 1;
  std::map<VarId, std::size_t> m_inflight;  // __inflight_param_registry: index into m_handles
  std::vector<CoalescedHandle> m_handles;
  bool m_complete = false;
  std::vector<Module> m_trace;              // __submodule_order: the modules of a step, in the order fetched
  std::vector<ParamInTrace> m_param_order;  // __param_order: each module's parameters, sorted, in trace order
  std::size_t m_step_id = 0;                // __step_id: the modules fetched so far this step
  std::deque<ParamInTrace> m_param_queue;   // __param_queue: what is left of the order, for prefetching
  std::map<VarId, std::int64_t> m_fetched_for;  // __most_recent_step_id_param_fetched_for (absent: never)
  std::map<VarId, TensorId> m_gathered;         // parameters available, with their gathered tensor
  std::int64_t m_available_numel = 0;           // __n_available_params
};

}  // namespace vramsim
