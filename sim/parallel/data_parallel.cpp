#include "sim/parallel/data_parallel.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

struct NoDataParallel final : DataParallelScheme {
  std::string_view name() const override { return "none"; }
};

const std::vector<std::string>& names() {
  static const std::vector<std::string> kNames = {"none",
                                                  "ddp",
                                                  "zero1",
                                                  "zero2",
                                                  "zero3",
                                                  "fsdp-full-shard",
                                                  "fsdp-shard-grad-op",
                                                  "fsdp-no-shard",
                                                  "fsdp-hybrid-shard",
                                                  "fsdp2-full-shard",
                                                  "fsdp2-shard-grad-op",
                                                  "fsdp2-hybrid-shard"};
  return kNames;
}

}  // namespace

std::vector<std::string> data_parallel_names() { return names(); }

std::unique_ptr<DataParallelScheme> make_data_parallel(const DataParallelOptions& o,
                                                       std::string_view option) {
  const std::string& s = o.scheme;
  if (s == "none") {
    return std::make_unique<NoDataParallel>();
  }
  if (s == "ddp") {
    return make_ddp(o);
  }
  if (s == "zero1" || s == "zero2" || s == "zero3") {
    return make_deepspeed_zero(o, s.back() - '0');
  }
  for (const std::string& n : names()) {
    if (n == s && s.rfind("fsdp-", 0) == 0) {
      return make_fsdp(o, std::string_view(s).substr(5));
    }
    if (n == s && s.rfind("fsdp2-", 0) == 0) {
      return make_fsdp2(o, std::string_view(s).substr(6));
    }
  }
  throw InputError(
      fmt::format("{}: unknown data-parallel scheme '{}' (known: {})", option, s, fmt::join(names(), ", ")));
}

void DataParallelScheme::set_expert_parameters(const std::set<VarId>& experts, int ep, int /*borrowed_tp*/) {
  if (experts.empty()) {
    return;
  }
  throw InputError(fmt::format(
      "--ep {}: expert parallelism with data parallelism {} is not modelled (vramsim: torchtitan's MoE runs "
      "it over FSDP2, --fsdp2; Megatron-Core's over DDP, --moe-impl megatron)",
      ep, name()));
}

int GradientShards::world_of(VarId p) const {
  const auto it = m_world_of.find(p);
  return it == m_world_of.end() ? m_world : it->second;
}

std::string unit_name(const ParameterUnit& unit) {
  return unit.layer < 0 ? std::string("root") : fmt::format("layers.{}", unit.layer);
}

DType sharded_parameter_dtype(const EagerTape& tape, VarId p, bool fp32_shards) {
  const DType d = tape.dtype(p);
  const bool half = d == DType::kBFloat16 || d == DType::kFloat16;
  return fp32_shards && half ? DType::kFloat32 : d;
}

std::int64_t shard_numel(std::int64_t numel, int world_size) {
  return world_size <= 1 ? numel : (numel + world_size - 1) / world_size;
}

std::int64_t padded_flat_numel(const EagerTape& tape, const ParameterUnit& unit, int world_size) {
  std::int64_t total = 0;
  for (VarId p : unit.params) {
    total += numel(tape.shape(p));
  }
  return shard_numel(total, world_size) * world_size;
}

std::vector<VarId> zero_redundancy_partition(const EagerTape& tape, const std::vector<VarId>& params,
                                             int world_size, int rank, ZeroPartitionKey key) {
  const auto sort_key = [&](VarId p) -> std::int64_t {
    const Shape& s = tape.shape(p);
    return key == ZeroPartitionKey::kNumel ? numel(s) : (s.empty() ? 1 : s.front());
  };
  std::vector<VarId> sorted = params;
  std::stable_sort(sorted.begin(), sorted.end(), [&](VarId a, VarId b) { return sort_key(a) > sort_key(b); });
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(std::max(world_size, 1)), 0);
  std::vector<VarId> mine;
  for (VarId p : sorted) {
    const auto smallest = std::min_element(sizes.begin(), sizes.end());  // the first of equal minima
    *smallest += numel(tape.shape(p));
    if (smallest - sizes.begin() == rank) {
      mine.push_back(p);
    }
  }
  return mine;
}

void GradientShards::before_unit_backward(EagerTape& tape, const ParameterUnit& unit) {
  for (VarId p : unit.params) {
    const auto it = m_shard.find(p);
    if (it != m_shard.end() && tape.grad(p) == it->second) {
      m_aside[p] = tape.detach_grad(p);
    }
  }
}

void GradientShards::reduce_scatter(EagerTape& tape, const ParameterUnit& unit, std::string_view op_name) {
  std::vector<VarId> fresh;  // parameters with a full gradient from this backward
  for (VarId p : unit.params) {
    const TensorId g = tape.grad(p);
    const auto known = m_shard.find(p);
    if (g != kNoTensor && (known == m_shard.end() || known->second != g)) {
      fresh.push_back(p);
      continue;
    }
    const auto aside = m_aside.find(p);
    if (g == kNoTensor && aside != m_aside.end()) {  // no gradient reached it this time
      tape.attach_grad(p, aside->second);
      m_aside.erase(aside);
    }
  }
  const bool fsdp2 = m_path != ReduceScatterPath::kComputeStream;
  const bool copy_in_on_rs_stream = m_path == ReduceScatterPath::kFsdp2CopyInOnReduceScatterStream;
  if (fsdp2 && fresh.empty()) {
    return;  // post_backward: `if len(fsdp_params_with_grad) == 0: return`
  }
  if (fsdp2) {
    // FSDPParamGroup.post_backward (_fsdp_param_group.py, since pytorch/pytorch#129721): the compute stream
    // waits for the previous reduce-scatter's event and drops comm_ctx.reduce_scatter_state before
    // foreach_reduce allocates this unit's input, so one input is alive at a time.
    free_held_input(tape);
  }
  if (copy_in_on_rs_stream) {
    tape.set_stream(kReduceScatterStream);
  }
  const TensorId input = fsdp2 ? copy_in(tape, unit, fresh, op_name) : kNoTensor;
  if (fsdp2) {
    tape.set_stream(kReduceScatterStream);
  }
  const OpId rs = tape.begin_op(std::string(op_name), "reduce_scatter_tensor");
  Bytes reduced = 0, sent = 0;  // sent: what leaves the rank, (world - 1) / world of each group's gradients
  std::map<int, Bytes> by_world;
  for (VarId p : fresh) {
    by_world[world_of(p)] += tensor_bytes(tape.shape(p), m_reduce_dtype.value_or(tape.dtype(p)));
  }
  for (const auto& [world, bytes] : by_world) {
    reduced += bytes;
    sent += bytes - bytes / static_cast<Bytes>(world);
  }
  SIM_ASSERT(sent <= reduced);
  if (fsdp2) {
    tape.use(input);
    reduce_output(tape, unit, fresh, op_name);
    tape.set_comm_bytes(sent);
    tape.set_stream(0);
    if (copy_in_on_rs_stream) {
      tape.release(input);
    } else {  // comm_ctx.reduce_scatter_state: kept until the next post_backward or the end of backward
      m_held_input = input;
      m_held_after = rs;
    }
    return;
  }
  for (VarId p : fresh) {  // DeepSpeed: the gradients reduced in place, the partition kept
    const TensorId full = tape.detach_grad(p);
    tape.use(full);
    tape.release(full);
    if (m_to_host) {  // reduced into the bucket, copied to the host's fp32 gradient partition
      continue;
    }
    TensorId shard = kNoTensor;
    const auto aside = m_aside.find(p);
    if (aside != m_aside.end()) {
      shard = aside->second;
      m_aside.erase(aside);
      tape.use(shard);  // shard += the reduced gradient
    } else {
      const Bytes bytes =
          storage_bytes(shard_numel(numel(tape.shape(p)), world_of(p)), tape.dtype(p), tape.shape(p));
      shard = tape.allocate(tape.name(p) + ".grad_shard", bytes, tape.dtype(p), TensorCategory::kGradient);
    }
    tape.attach_grad(p, shard);
    m_shard[p] = shard;
  }
}

void GradientShards::reduce_output(EagerTape& tape, const ParameterUnit& unit,
                                   const std::vector<VarId>& fresh, std::string_view op_name) {
  if (fresh.empty()) {
    return;
  }
  // Each numel is at most 2^50 elements, so the sum over a unit's parameters cannot overflow.
  std::int64_t elements = 0;
  for (VarId p : fresh) {
    elements += shard_numel(numel(tape.shape(p)), world_of(p));
  }
  // foreach_reduce's orig_dtype is the sharded parameter's (FSDPParam.orig_dtype): fp32 under mixed
  // precision on a model built in fp32, whatever dtype the unsharded gradient had.
  const DType grad_dtype = sharded_parameter_dtype(tape, fresh.front(), m_fp32_shards);
  const DType reduce_dtype = m_reduce_dtype.value_or(tape.dtype(fresh.front()));
  const Shape flat{elements};
  TensorId out = tape.allocate(unit_name(unit) + ".reduce_output", tensor_bytes(flat, reduce_dtype),
                               reduce_dtype, TensorCategory::kGradient);
  if (reduce_dtype != grad_dtype) {  // _to_dtype_if_needed(reduce_output, orig_dtype)
    tape.begin_op(std::string(op_name) + ".reduce_output.to_orig_dtype", "_to_copy");
    tape.use(out);
    const TensorId cast =
        tape.allocate(unit_name(unit) + ".reduce_output.orig_dtype", tensor_bytes(flat, grad_dtype),
                      grad_dtype, TensorCategory::kGradient);
    tape.release(out);
    out = cast;
  }
  if (m_to_host) {
    // FSDP2's CPUOffloadPolicy (_fsdp_collectives.py foreach_reduce): new_sharded_grad.to("cpu",
    // non_blocking=True), the host's sharded_param.grad; the GPU's reduce_output goes with its last
    // reference, ordered on the reduce-scatter stream after the copy.
    tape.begin_op(std::string(op_name) + ".to_cpu", "_to_copy");
    tape.use(out);
    tape.release(out);
    return;
  }
  for (VarId p : fresh) {
    const auto aside = m_aside.find(p);
    if (aside != m_aside.end()) {  // sharded_param.grad += new_sharded_grad
      tape.use(aside->second);
      tape.attach_grad(p, aside->second);
      m_shard[p] = aside->second;
      m_aside.erase(aside);
    } else {  // sharded_param.grad = a view of reduce_output
      tape.retain(out);
      tape.attach_grad(p, out);
      m_shard[p] = out;
    }
  }
  if (m_hook) {  // each sharded parameter's hooks, in the same loop as its gradient, while reduce_output
                 // lives
    for (VarId p : fresh) {
      m_hook(p);
    }
  }
  tape.release(out);  // the views keep it
}

TensorId GradientShards::copy_in(EagerTape& tape, const ParameterUnit& unit, const std::vector<VarId>& fresh,
                                 std::string_view op_name) {
  tape.begin_op(std::string(op_name) + ".copy_in", "foreach_reduce_scatter_copy_in");
  Bytes bytes = 0;
  DType dtype = DType::kFloat32;
  for (VarId p : fresh) {  // the padded unsharded gradients, cast to reduce_dtype by the copy
    dtype = m_reduce_dtype.value_or(tape.dtype(p));
    bytes +=
        storage_bytes(shard_numel(numel(tape.shape(p)), world_of(p)) * world_of(p), dtype, tape.shape(p));
    tape.use(tape.grad(p));
  }
  const TensorId input =
      tape.allocate(unit_name(unit) + ".reduce_scatter_input", bytes, dtype, TensorCategory::kCommunication);
  for (VarId p : fresh) {  // unsharded_grads.clear(): they go once the copy-in is issued
    tape.release(tape.detach_grad(p));
  }
  return input;
}

void GradientShards::free_held_input(EagerTape& tape) {
  if (m_held_input == kNoTensor) {
    return;
  }
  // The compute stream waits for the reduce-scatter's event, then the reference goes (stream-ordered).
  tape.begin_op("fsdp.reduce_scatter_state.free", "wait_event");
  tape.stream_wait_for(m_held_after);
  tape.release(m_held_input);
  m_held_input = kNoTensor;
  m_held_after = kNoOp;
}

void GradientShards::finish_backward(EagerTape& tape) { free_held_input(tape); }

}  // namespace vramsim
