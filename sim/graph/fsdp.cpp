// PyTorch FSDP (torch.distributed.fsdp, FSDP1) with each decoder layer wrapped (transformer_auto_wrap_policy)
// and the rest of the model in the root unit. Each unit's parameters are one FlatParameter, padded to a
// multiple of the world size and sharded: a rank keeps 1/world of it.
//   full-shard    (FULL_SHARD)    all-gather the unit's flat parameter into an unsharded buffer before its
//                                 forward, free it after (reshard); gather again before its backward, free
//                                 after; gradients reduce-scattered after the unit's backward, the shard
//                                 kept.
//   shard-grad-op (SHARD_GRAD_OP) the same, but the unsharded buffer lives from the forward to the end of
//                                 the unit's backward (no reshard after forward).
//   no-shard      (NO_SHARD)      parameters and gradients whole; gradients all-reduced in place.
//   hybrid-shard  (HYBRID_SHARD)  full-shard within a node (gpus_per_node ranks), replicated across nodes:
//                                 a rank keeps 1/min(world, gpus_per_node) of each unit.
// The root unit is not resharded after forward (its parameters are needed first in backward): its buffer
// lives from the start of forward to the end of backward. Optimizer states follow the sharded parameters.
// CPUOffload(offload_params=True): the flat parameter's shard and the reduced gradient shard live on the
// host, where the optimizer steps; the GPU holds a unit's unsharded parameters while it runs. Not modelled:
// the unsharded flat gradient (autograd here makes one gradient per original parameter, the same bytes),
// limit_all_gathers and the record_stream() that keeps gathered buffers reserved longer on the all-gather
// stream (see the README's list of what the data-parallel model leaves out).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "sim/graph/data_parallel.h"

namespace vramsim {
namespace {

class Fsdp final : public DataParallelScheme {
 public:
  Fsdp(const DataParallelOptions& o, std::string_view strategy)
      : m_name(fmt::format("fsdp-{}", strategy)),
        m_shard(strategy != "no-shard"),
        m_reshard_after_forward(strategy == "full-shard" || strategy == "hybrid-shard"),
        m_shard_ranks(strategy == "hybrid-shard" ? std::min(o.world_size, o.gpus_per_node) : o.world_size),
        m_offload(o.offload_params),
        m_grads(m_shard_ranks, o.offload_params) {}
  std::string_view name() const override { return m_name; }
  // CPUOffload(offload_params=True): the flat parameter's shard lives on the host.
  std::int64_t resident_parameter_numel(std::int64_t numel) const override {
    if (m_offload) {
      return 0;
    }
    return m_shard ? shard_numel(numel, m_shard_ranks) : numel;
  }
  int optimizer_state_shards() const override { return m_shard ? m_shard_ranks : 1; }
  bool optimizer_on_host() const override { return m_offload; }

  void pre_forward(EagerTape& tape, const ParameterUnit& unit) override { unshard(tape, unit, "forward"); }
  void post_forward(EagerTape& tape, const ParameterUnit& unit) override {
    if (m_reshard_after_forward && unit.layer >= 0) {
      reshard(tape, unit);
    }
  }
  void pre_backward(EagerTape& tape, const ParameterUnit& unit) override {
    unshard(tape, unit, "backward");
    if (m_shard) {
      m_grads.before_unit_backward(tape, unit);
    }
  }
  void post_backward(EagerTape& tape, const ParameterUnit& unit) override {
    if (unit.layer < 0) {
      return;  // the root finishes at the end of backward
    }
    if (m_shard) {
      m_grads.reduce_scatter(tape, unit, fmt::format("layers.{}.fsdp.reduce_scatter", unit.layer));
    }
    reshard(tape, unit);
  }
  void end_backward(EagerTape& tape, const ParameterUnit& root) override {
    if (m_shard) {
      m_grads.reduce_scatter(tape, root, "root.fsdp.reduce_scatter");
    }
    reshard(tape, root);
  }

 private:
  void unshard(EagerTape& tape, const ParameterUnit& unit, std::string_view when) {
    if (!m_shard || unit.params.empty() || m_unsharded.count(unit.layer) != 0) {
      return;
    }
    std::int64_t flat = 0;
    for (VarId p : unit.params) {
      flat += numel(tape.shape(p));
    }
    flat = shard_numel(flat, m_shard_ranks) * m_shard_ranks;  // padded to a multiple of the shard group
    const DType dtype = tape.dtype(unit.params.front());
    tape.begin_op(fmt::format("{}.fsdp.all_gather.{}", unit_name(unit), when), "all_gather_into_tensor");
    m_unsharded[unit.layer] = tape.allocate(unit_name(unit) + ".flat_param.unsharded",
                                            static_cast<Bytes>(flat) * dtype_size_bytes(dtype), dtype,
                                            TensorCategory::kCommunication);
  }
  void reshard(EagerTape& tape, const ParameterUnit& unit) {
    auto it = m_unsharded.find(unit.layer);
    if (it == m_unsharded.end()) {
      return;
    }
    tape.begin_op(unit_name(unit) + ".fsdp.reshard", "free_storage");
    tape.release(it->second);
    m_unsharded.erase(it);
  }

  std::string m_name;
  bool m_shard;
  bool m_reshard_after_forward;
  int m_shard_ranks;  // the ranks one unit is sharded over
  bool m_offload;
  GradientShards m_grads;
  std::map<int, TensorId> m_unsharded;
};

}  // namespace

std::unique_ptr<DataParallelScheme> make_fsdp(const DataParallelOptions& options, std::string_view strategy) {
  return std::make_unique<Fsdp>(options, strategy);
}

}  // namespace vramsim
