// DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py; Rajbhandari et al. 2020):
//   stage 1  optimizer states and the fp32 master weights partitioned: 1/world of each on a rank;
//   stage 2  + gradients: reduced as backward produces them, only the rank's partition kept;
//   stage 3  + parameters: each rank keeps its partition; a module's parameters are all-gathered before
//            its forward and its backward and released after, except parameters of at most
//            stage3_param_persistence_threshold (1e5) elements, which stay whole.
// Stages 1 and 2 with contiguous_gradients (the default) allocate the gradient bucket in backward():
// torch.empty(reduce_bucket_size) of the model's dtype (5e8 elements: 1 GB in bf16), two with overlap_comm,
// released by the epilogue after backward.
// offload_optimizer {device: cpu} (ZeRO-Offload, stages 2 and 3): states and fp32 master weights on the host,
// updated there by DeepSpeedCPUAdam; each reduced gradient partition is copied to the host's fp32 buffer, so
// the GPU keeps no gradient partition. offload_param (stage 3, ZeRO-Infinity): the parameter partitions too.
// Stage 3 gathers and releases parameters as DeepSpeed's PartitionedParameterCoordinator does, around each
// op and backward node that reads them (zero3_param_coordinator.h): per submodule, with the prefetch bucket,
// max_live_parameters and max_reuse_distance from the second step (the first records the trace).
// The step (stage_1_and_2.py step(), stage3.py _prepare_fp32_grad_for_sub_group): the rank's gradient
// partition is flattened (torch.cat of the partition's gradients, in their dtype) and converted
// `.to(torch.float32)`, the bf16 flat is dropped, the parameters' gradients are set to None, the inner
// optimizer steps the fp32 partition with that flat fp32 gradient, and `.grad = None` drops it. Stage 1 first
// frees the gradients of the parameters outside the partition (free_grad_in_param_list). One parameter group
// (model.parameters()); stage 3's sub_group_size (1e9 partition elements) splits it only beyond that.
// Stages 1 and 2 pad the flat group to a multiple of 2 x world (nccl_start_alignment_factor); stage 3
// partitions each parameter (ceil(numel / world)). With offload_optimizer the flat fp32 gradient is on the
// host (single_partition_of_fp32_groups' .grad) and none of this is on the GPU.
// Not modelled: stage 3's gradient partitions kept in one persistent flat buffer (here: per parameter, freed
// at the step).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "sim/parallel/data_parallel.h"
#include "sim/parallel/zero3_param_coordinator.h"

namespace vramsim {
namespace {

constexpr std::int64_t kParamPersistenceThreshold = 100'000;  // stage3_param_persistence_threshold

Zero3Config zero3_config(const DataParallelOptions& o) {
  Zero3Config c;
  c.prefetch_bucket_numel = o.stage3_prefetch_bucket_size;
  c.max_live_numel = o.stage3_max_live_parameters;
  c.max_reuse_distance_numel = o.stage3_max_reuse_distance;
  c.persistence_threshold_numel = kParamPersistenceThreshold;
  return c;
}

class DeepSpeedZero final : public DataParallelScheme {
 public:
  DeepSpeedZero(const DataParallelOptions& o, int stage)
      : m_options(o),
        m_stage(stage),
        m_name(fmt::format("zero{}", stage)),
        m_grads(o.world_size, o.offload_optimizer) {}
  std::string_view name() const override { return m_name; }
  // offload_param: the partitions live on the host; persistent (small) parameters stay on the GPU.
  std::int64_t resident_parameter_numel(std::int64_t numel) const override {
    if (m_stage != 3 || numel <= kParamPersistenceThreshold) {
      return numel;
    }
    return m_options.offload_params ? 0 : shard_numel(numel, m_options.world_size);
  }
  int optimizer_state_shards() const override { return m_options.world_size; }
  bool optimizer_on_host() const override { return m_options.offload_optimizer; }
  // offload_optimizer: the fp32 partition (single_partition_of_fp32_groups / fp32_partitioned_groups_flat,
  // made with .float() whatever the model's dtype) and its pinned fp32 .grad; offload_param: the partitions
  // of the non-persistent parameters in their dtype.
  void add_host_model_states(const EagerTape& tape, const std::vector<VarId>& params,
                             HostMemory& host) const override {
    const int world = m_options.world_size;
    for (VarId p : params) {
      const std::int64_t n = numel(tape.shape(p));
      const auto part_bytes = [&](DType d) { return storage_bytes(shard_numel(n, world), d, tape.shape(p)); };
      if (m_options.offload_optimizer && tape.requires_grad(p)) {
        host.master_weights += part_bytes(DType::kFloat32);
        host.gradients += part_bytes(DType::kFloat32);
      }
      if (m_options.offload_params && m_stage == 3 && n > kParamPersistenceThreshold) {
        host.parameters += part_bytes(tape.dtype(p));
      }
    }
  }

  // The gradient bucket has the model's dtype (DeepSpeedZeroOptimizer's self.dtype: its bit16 groups).
  void construct(EagerTape& tape, const std::vector<ParameterUnit>& units) override {
    for (const ParameterUnit& u : units) {
      if (!u.params.empty()) {
        m_bucket_dtype = tape.dtype(u.params.front());
        break;
      }
    }
    if (m_stage == 3) {
      m_coordinator.emplace(zero3_config(m_options), m_options.world_size);
      tape.set_parameter_use_hooks(
          [this, &tape](const std::vector<VarId>& params, bool forward) {
            m_coordinator->fetch_sub_module(tape, params, forward);
          },
          [this, &tape](const std::vector<VarId>& params, bool) {
            m_coordinator->release_sub_module(tape, params);
          });
    }
  }
  void begin_backward(EagerTape& tape) override {
    if (m_stage == 3 || !m_options.contiguous_gradients) {
      return;
    }
    tape.begin_op("DeepSpeedZeroOptimizer.backward.ipg_buffer", "empty");
    const DType dtype = m_bucket_dtype;
    const Bytes bytes = static_cast<Bytes>(m_options.reduce_bucket_elements) * dtype_size_bytes(dtype);
    for (int i = 0; i < (m_options.overlap_comm ? 2 : 1); ++i) {
      m_ipg.push_back(
          tape.allocate(fmt::format("zero.ipg_buffer.{}", i), bytes, dtype, TensorCategory::kCommunication));
    }
  }
  void pre_backward(EagerTape& tape, const ParameterUnit& unit) override {
    if (m_stage >= 2) {
      m_grads.before_unit_backward(tape, unit);
    }
  }
  void post_backward(EagerTape& tape, const ParameterUnit& unit) override {
    if (m_stage >= 2 && unit.layer >= 0) {
      m_grads.reduce_scatter(tape, unit, fmt::format("layers.{}.zero.reduce_scatter", unit.layer));
    }
  }
  TensorId flat_fp32_gradient(EagerTape& tape, const std::vector<VarId>& trainable) override;
  void after_optimizer_step(EagerTape& tape) override {
    if (m_flat_grad != kNoTensor) {
      tape.begin_op("DeepSpeedZeroOptimizer.step.fp32_grad_to_none", "release");
      tape.release(m_flat_grad);
      m_flat_grad = kNoTensor;
    }
  }
  void end_backward(EagerTape& tape, const ParameterUnit& root) override {
    if (m_stage >= 2) {
      m_grads.reduce_scatter(tape, root, "zero.reduce_scatter.root");
    }
    if (m_coordinator) {  // the optimizer's backward(): release_and_reset_all, reset_step
      m_coordinator->reset_step(tape);
    }
    tape.begin_op("DeepSpeedZeroOptimizer.epilogue", "release");
    for (TensorId t : m_ipg) {
      tape.release(t);
    }
    m_ipg.clear();
  }

 private:
  const DataParallelOptions& m_options;
  int m_stage;
  std::string m_name;
  GradientShards m_grads;
  DType m_bucket_dtype = DType::kFloat32;
  std::vector<TensorId> m_ipg;
  std::optional<PartitionedParameterCoordinator> m_coordinator;  // stage 3
  TensorId m_flat_grad = kNoTensor;                              // the step's flat fp32 gradient partition
};

TensorId DeepSpeedZero::flat_fp32_gradient(EagerTape& tape, const std::vector<VarId>& trainable) {
  if (m_options.offload_optimizer || trainable.empty()) {
    return kNoTensor;
  }
  const int world = m_options.world_size;
  // Each numel is at most kMaxTensorBytes (2^50), so sums over the parameters cannot overflow.
  std::int64_t total = 0;
  std::int64_t partition = 0;  // stage 3: per-parameter partitions
  for (VarId p : trainable) {
    total += numel(tape.shape(p));
    partition += shard_numel(numel(tape.shape(p)), world);
  }
  if (m_stage < 3) {  // flatten_dense_tensors_aligned(group, 2 * world), then 1/world of it
    partition = shard_numel(total, 2 * world) * 2;
  }
  const DType grad_dtype = tape.dtype(trainable.front());
  if (m_stage == 1) {
    // free_grad_in_param_list(params_not_in_partition): rank 0's partition is the group's first elements.
    tape.begin_op("DeepSpeedZeroOptimizer.step.free_grads_not_in_partition", "set_to_none");
    std::int64_t offset = 0;
    for (VarId p : trainable) {
      if (offset >= partition) {
        tape.set_grad_to_none(p);
      }
      offset += numel(tape.shape(p));
    }
  }
  tape.begin_op("DeepSpeedZeroOptimizer.step.flatten", "cat");
  for (VarId p : trainable) {
    if (tape.grad(p) != kNoTensor) {
      tape.use(tape.grad(p));
    }
  }
  const Shape shape{partition};
  // Both flats are the rank's gradient (the bill's gradients), in the gradients' dtype and then in fp32.
  const TensorId flat = tape.allocate("zero.single_grad_partition", tensor_bytes(shape, grad_dtype),
                                      grad_dtype, TensorCategory::kGradient);
  m_flat_grad = flat;
  if (grad_dtype != DType::kFloat32) {  // .to(torch.float32) copies; the bf16 flat has no other reference
    tape.begin_op("DeepSpeedZeroOptimizer.step.single_grad_partition.to_fp32", "_to_copy");
    m_flat_grad = tape.allocate("zero.single_grad_partition.fp32", tensor_bytes(shape, DType::kFloat32),
                                DType::kFloat32, TensorCategory::kGradient);
    tape.release(flat);
  }
  tape.begin_op("DeepSpeedZeroOptimizer.step.free_grad_in_param_list", "set_to_none");
  for (VarId p : trainable) {
    tape.set_grad_to_none(p);
  }
  return m_flat_grad;
}

}  // namespace

std::unique_ptr<DataParallelScheme> make_deepspeed_zero(const DataParallelOptions& options, int stage) {
  return std::make_unique<DeepSpeedZero>(options, stage);
}

}  // namespace vramsim
