// torch.nn.parallel.DistributedDataParallel (torch/nn/parallel/distributed.py, the C++ Reducer):
//   * at construction the Reducer assigns parameters to buckets in reverse registration order
//     (dist._compute_bucket_assignment_by_size with limits [_DEFAULT_FIRST_BUCKET_BYTES = 1 MiB,
//     bucket_cap_mb = 25 MiB]: a bucket closes once its size reaches the limit) and allocates one flat
//     gradient buffer per bucket, of the gradients' dtype, kept for the life of the model;
//   * with gradient_as_bucket_view=False (the default) .grad tensors are separate from the buckets: each
//     gradient is copied into its bucket and the bucket all-reduced in place, so a DDP rank holds its
//     gradients twice;
//   * with gradient_as_bucket_view=True each .grad becomes a view of its bucket: the Reducer's autograd hook
//     on the gradient accumulator (mark_variable_ready_dense) copies a freshly made gradient into the bucket
//     view and sets .grad to the view, so the fresh tensor goes at once; a gradient that already is the view
//     (zero_grad(set_to_none=False)) is accumulated into in place. The buckets are then the gradients;
//   * the parameter broadcast at construction flattens parameters into coalesced buffers (buckets closed once
//     they reach 250 MiB), two at a time, and frees them: a transient at setup (broadcast() below).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "sim/parallel/data_parallel.h"

namespace vramsim {
namespace {

constexpr Bytes kBroadcastBucketBytes = 250 * kMiB;  // _sync_module_states: broadcast_bucket_size

class Ddp final : public DataParallelScheme {
 public:
  explicit Ddp(const DataParallelOptions& o) : m_options(o) {}
  std::string_view name() const override { return "ddp"; }

  void construct(EagerTape& tape, const std::vector<ParameterUnit>& units) override {
    std::vector<VarId> order;  // model.parameters() order
    for (const ParameterUnit& u : units) {
      order.insert(order.end(), u.params.begin(), u.params.end());
    }
    broadcast(tape, order);
    // The Reducer buckets the parameters that require grad (frozen ones, a LoRA base, have no gradient).
    std::erase_if(order, [&tape](VarId p) { return !tape.requires_grad(p); });
    std::reverse(order.begin(), order.end());
    tape.begin_op("DistributedDataParallel.reducer.buckets", "empty");
    Bytes limit = m_options.ddp_first_bucket_bytes;
    Bytes bucket = 0;
    int index = 0;
    DType dtype = DType::kFloat32;
    std::vector<VarId> members;  // of the bucket being filled
    const auto close = [&] {
      if (bucket > 0) {
        const TensorId b =
            tape.allocate(fmt::format("ddp.bucket.{}", index++), bucket, dtype,
                          m_options.ddp_gradient_as_bucket_view ? TensorCategory::kGradient
                                                                : TensorCategory::kCommunication);
        for (VarId p : members) {
          m_bucket_of[p] = b;
        }
      }
      bucket = 0;
      members.clear();
    };
    for (VarId p : order) {
      dtype = tape.dtype(p);
      bucket += tensor_bytes(tape.shape(p), dtype);
      members.push_back(p);
      if (bucket >= limit) {
        close();
        limit = m_options.ddp_bucket_cap_bytes;
      }
    }
    close();
    if (m_options.ddp_gradient_as_bucket_view) {
      tape.set_post_accumulate_grad_hook([this, &tape](VarId p) { to_bucket_view(tape, p); });
    }
  }

 private:
  // _sync_module_states -> broadcast_coalesced (torch/csrc/distributed/c10d/comm.cpp): the parameters are
  // bucketed by compute_bucket_assignment_by_size with the one limit broadcast_bucket_size (a bucket closes
  // once its size reaches the limit, so it holds the tensor that crossed it); each bucket is flattened into
  // one buffer (flatten_dense_tensors: a one-tensor bucket is a view, no copy) and broadcast, and at most two
  // are in flight: the oldest is finished (copied back, freed) before a third is made.
  static void broadcast(EagerTape& tape, const std::vector<VarId>& params) {
    std::vector<TensorId> in_flight;
    int index = 0;
    const auto finish_oldest = [&] {  // unflatten, copy back into the parameters, free the buffer
      if (in_flight.front() != kNoTensor) {
        tape.begin_op("DistributedDataParallel._sync_module_states.finish", "copy_");
        tape.release(in_flight.front());
      }
      in_flight.erase(in_flight.begin());
    };
    Bytes bucket = 0;
    int tensors = 0;
    const auto launch = [&] {
      if (in_flight.size() >= 2) {
        finish_oldest();
      }
      tape.begin_op(fmt::format("DistributedDataParallel._sync_module_states.bucket{}", index++),
                    "broadcast_coalesced");
      in_flight.push_back(tensors > 1 ? tape.allocate("ddp.broadcast_buffer", bucket, DType::kUInt8,
                                                      TensorCategory::kCommunication)
                                      : kNoTensor);
      bucket = 0;
      tensors = 0;
    };
    for (VarId p : params) {
      bucket += tensor_bytes(tape.shape(p), tape.dtype(p));
      ++tensors;
      if (bucket >= kBroadcastBucketBytes) {
        launch();
      }
    }
    if (tensors > 0) {
      launch();
    }
    while (!in_flight.empty()) {
      finish_oldest();
    }
  }

  // mark_variable_ready_dense with gradient_as_bucket_view: bucket_view.copy_(grad); grad = bucket_view.
  void to_bucket_view(EagerTape& tape, VarId p) {
    const auto it = m_bucket_of.find(p);
    const TensorId grad = tape.grad(p);
    if (it == m_bucket_of.end() || grad == kNoTensor || grad == it->second) {
      return;  // not bucketed, or already the view
    }
    tape.begin_op("DistributedDataParallel.reducer.copy_grad_to_bucket." + tape.name(p), "copy_");
    tape.use(grad);
    tape.use(it->second);
    tape.release(tape.detach_grad(p));
    tape.retain(it->second);
    tape.attach_grad(p, it->second);
  }

  const DataParallelOptions& m_options;
  std::map<VarId, TensorId> m_bucket_of;  // each bucketed parameter's bucket
};

}  // namespace

std::unique_ptr<DataParallelScheme> make_ddp(const DataParallelOptions& options) {
  return std::make_unique<Ddp>(options);
}

}  // namespace vramsim
