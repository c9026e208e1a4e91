#include "sim/parallel/zero3_param_coordinator.h"

#include <algorithm>
#include <set>

#include "sim/parallel/data_parallel.h"

namespace vramsim {

void PartitionedParameterCoordinator::all_gather(EagerTape& tape, const std::vector<VarId>& params,
                                                 const std::string& op_name) {
  std::vector<VarId> partitioned_params;  // the not-available ones, in ds_id order
  for (VarId p : params) {
    if (partitioned(tape, p) && not_available(p)) {
      partitioned_params.push_back(p);
    }
  }
  std::sort(partitioned_params.begin(), partitioned_params.end());
  if (partitioned_params.empty()) {
    return;
  }
  tape.begin_op(op_name, "all_gather_into_tensor");
  std::int64_t padded = 0;  // Each numel is at most 2^50 elements: no sum here can overflow.
  for (VarId p : partitioned_params) {
    const std::int64_t n = numel(tape.shape(p));
    m_available_numel += n;
    padded += shard_numel(n, m_world) * m_world;
  }
  const DType dtype = tape.dtype(partitioned_params.front());
  if (partitioned_params.size() == 1) {  // the parameter's own padded buffer, available when it lands
    const VarId p = partitioned_params.front();
    m_gathered[p] = tape.allocate(tape.name(p) + ".gathered", storage_bytes(padded, dtype, tape.shape(p)),
                                  dtype, TensorCategory::kCommunication);
    return;
  }
  CoalescedHandle handle;
  handle.flat =
      tape.allocate(tape.name(partitioned_params.front()) + ".all_gather_coalesced",
                    storage_bytes(padded, dtype, Shape{padded}), dtype, TensorCategory::kCommunication);
  handle.params = partitioned_params;
  for (VarId p : partitioned_params) {
    m_inflight[p] = m_handles.size();
  }
  m_handles.push_back(std::move(handle));
}

void PartitionedParameterCoordinator::wait(EagerTape& tape, VarId p) {
  const auto it = m_inflight.find(p);
  if (it == m_inflight.end()) {
    return;
  }
  CoalescedHandle& handle = m_handles[it->second];
  tape.begin_op(tape.name(p) + ".zero3.all_gather_coalesced.wait", "cat");
  for (VarId q : handle.params) {
    m_gathered[q] = tape.allocate(tape.name(q) + ".gathered", tensor_bytes(tape.shape(q), tape.dtype(q)),
                                  tape.dtype(q), TensorCategory::kCommunication);
    m_inflight.erase(q);
  }
  tape.release(handle.flat);
  handle = CoalescedHandle{};
}

void PartitionedParameterCoordinator::release(EagerTape& tape, VarId p) {
  const auto it = m_gathered.find(p);
  if (it == m_gathered.end()) {
    return;
  }
  tape.release(it->second);
  m_available_numel -= numel(tape.shape(p));
  m_gathered.erase(it);
}

void PartitionedParameterCoordinator::fetch_sub_module(EagerTape& tape, const std::vector<VarId>& params,
                                                       bool forward) {
  const std::string when = forward ? "forward" : "backward";
  if (!m_complete) {  // record_module
    Module m{params, 0};
    for (VarId p : params) {
      m.numel += numel(tape.shape(p));
    }
    m_trace.push_back(std::move(m));
  }
  all_gather(tape, params, tape.name(params.front()) + ".zero3.all_gather." + when);
  for (VarId p : params) {
    wait(tape, p);
  }
  if (m_complete) {
    // Pop this module's parameters off the queue (those no earlier prefetch popped for this position).
    const auto fetched_for = [&](VarId p) {
      const auto it = m_fetched_for.find(p);
      return it == m_fetched_for.end() ? std::int64_t{-1} : it->second;
    };
    std::size_t not_already_fetched = 0;
    for (VarId p : params) {
      not_already_fetched += fetched_for(p) < static_cast<std::int64_t>(m_step_id) ? 1 : 0;
    }
    for (std::size_t popped = 0; popped < not_already_fetched && !m_param_queue.empty(); ++popped) {
      m_fetched_for[m_param_queue.front().param] = static_cast<std::int64_t>(m_param_queue.front().step_id);
      m_param_queue.pop_front();
    }
    // Prefetch the next parameters in the trace that are not available.
    if (m_config.prefetch_bucket_numel > 0) {
      const std::int64_t budget =
          std::min(m_config.max_live_numel - m_available_numel, m_config.prefetch_bucket_numel);
      std::vector<VarId> prefetch;
      std::int64_t prefetching = 0;
      while (!m_param_queue.empty() && prefetching < budget) {
        const ParamInTrace next = m_param_queue.front();
        m_param_queue.pop_front();
        const bool wanted = partitioned(tape, next.param) && not_available(next.param) &&
                            std::find(prefetch.begin(), prefetch.end(), next.param) == prefetch.end();
        m_fetched_for[next.param] =
            std::max(fetched_for(next.param), static_cast<std::int64_t>(next.step_id));
        if (wanted) {
          prefetch.push_back(next.param);
          prefetching += numel(tape.shape(next.param));
        }
      }
      if (!prefetch.empty()) {
        all_gather(tape, prefetch, tape.name(prefetch.front()) + ".zero3.prefetch." + when);
      }
    }
  }
  ++m_step_id;
}

void PartitionedParameterCoordinator::release_sub_module(EagerTape& tape, const std::vector<VarId>& params) {
  std::set<VarId> to_release;
  for (VarId p : params) {
    if (partitioned(tape, p)) {
      to_release.insert(p);
    }
  }
  if (m_complete) {  // __params_to_release(submodule, step_id): step_id is past this module
    for (VarId p : params) {
      const auto it = m_fetched_for.find(p);
      if (it != m_fetched_for.end() && it->second > static_cast<std::int64_t>(m_step_id)) {
        to_release.erase(p);  // a prefetch popped a later use of it
      }
    }
    std::int64_t traversed = 0;
    for (std::size_t i = m_step_id; i < m_trace.size() && traversed < m_config.max_reuse_distance_numel;
         ++i) {
      for (VarId p : m_trace[i].params) {
        to_release.erase(p);
      }
      traversed += m_trace[i].numel;
    }
  }
  bool begun = false;
  for (VarId p : params) {  // in the module's order
    if (to_release.count(p) == 0 || m_gathered.count(p) == 0) {
      continue;
    }
    if (!begun) {
      tape.begin_op(tape.name(params.front()) + ".zero3.release", "release");
      begun = true;
    }
    release(tape, p);
  }
}

void PartitionedParameterCoordinator::reset_step(EagerTape& tape) {
  while (!m_inflight.empty()) {  // every prefetch is for a module of this step; none is left unless the
    wait(tape, m_inflight.begin()->first);  // trace changed
  }
  if (!m_gathered.empty()) {  // release_and_reset_all
    tape.begin_op("zero3.release_and_reset_all", "release");
    while (!m_gathered.empty()) {
      release(tape, m_gathered.begin()->first);
    }
  }
  if (!m_complete) {  // construct_parameter_trace_from_module_trace
    m_complete = true;
    for (std::size_t i = 0; i < m_trace.size(); ++i) {
      std::vector<VarId> sorted = m_trace[i].params;  // sorted by ds_id: creation order
      std::sort(sorted.begin(), sorted.end());
      for (VarId p : sorted) {
        m_param_order.push_back(ParamInTrace{p, i});
      }
    }
  }
  m_param_queue.assign(m_param_order.begin(), m_param_order.end());
  m_fetched_for.clear();
  m_step_id = 0;
  m_available_numel = 0;
}

}  // namespace vramsim
