#include "sim/graph/data_parallel.h"

#include <algorithm>

#include <fmt/format.h>

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
                                                  "fsdp-hybrid-shard"};
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
  if (s.rfind("fsdp-", 0) == 0) {
    for (const std::string& n : names()) {
      if (n == s) {
        return make_fsdp(o, std::string_view(s).substr(5));
      }
    }
  }
  throw InputError(
      fmt::format("{}: unknown data-parallel scheme '{}' (known: {})", option, s, fmt::join(names(), ", ")));
}

std::string unit_name(const ParameterUnit& unit) {
  return unit.layer < 0 ? std::string("root") : fmt::format("layers.{}", unit.layer);
}

std::int64_t shard_numel(std::int64_t numel, int world_size) {
  return world_size <= 1 ? numel : (numel + world_size - 1) / world_size;
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
  tape.begin_op(std::string(op_name), "reduce_scatter_tensor");
  for (VarId p : unit.params) {
    const auto aside = m_aside.find(p);
    const TensorId g = tape.grad(p);
    const auto known = m_shard.find(p);
    if (g == kNoTensor || (known != m_shard.end() && known->second == g)) {
      if (g == kNoTensor && aside != m_aside.end()) {  // no gradient reached it this time
        tape.attach_grad(p, aside->second);
        m_aside.erase(aside);
      }
      continue;
    }
    const TensorId full = tape.detach_grad(p);
    tape.use(full);
    if (m_to_host) {  // reduced into the bucket, copied to the host's fp32 gradient partition
      tape.release(full);
      continue;
    }
    TensorId shard = kNoTensor;
    if (aside != m_aside.end()) {
      shard = aside->second;
      m_aside.erase(aside);
      tape.use(shard);  // shard += the reduced gradient
    } else {
      const Bytes bytes =
          storage_bytes(shard_numel(numel(tape.shape(p)), m_world), tape.dtype(p), tape.shape(p));
      shard = tape.allocate(tape.name(p) + ".grad_shard", bytes, tape.dtype(p), TensorCategory::kGradient);
    }
    tape.release(full);
    tape.attach_grad(p, shard);
    m_shard[p] = shard;
  }
}

}  // namespace vramsim
