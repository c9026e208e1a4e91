// torch.nn.parallel.DistributedDataParallel (torch/nn/parallel/distributed.py, the C++ Reducer):
//   * at construction the Reducer assigns parameters to buckets in reverse registration order
//     (dist._compute_bucket_assignment_by_size with limits [_DEFAULT_FIRST_BUCKET_BYTES = 1 MiB,
//     bucket_cap_mb = 25 MiB]: a bucket closes once its size reaches the limit) and allocates one flat
//     gradient buffer per bucket, of the gradients' dtype, kept for the life of the model;
//   * with gradient_as_bucket_view=False (the default) .grad tensors are separate from the buckets: each
//     gradient is copied into its bucket and the bucket all-reduced in place, so a DDP rank holds its
//     gradients twice;
//   * the parameter broadcast at construction flattens parameters into coalesced buffers (up to 250 MiB) and
//     frees them: a transient at setup.
#include <algorithm>

#include <fmt/format.h>

#include "sim/graph/data_parallel.h"

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
    std::reverse(order.begin(), order.end());
    tape.begin_op("DistributedDataParallel.reducer.buckets", "empty");
    Bytes limit = m_options.ddp_first_bucket_bytes;
    Bytes bucket = 0;
    int index = 0;
    DType dtype = DType::kFloat32;
    const auto close = [&] {
      if (bucket > 0) {
        tape.allocate(fmt::format("ddp.bucket.{}", index++), bucket, dtype, TensorCategory::kCommunication);
      }
      bucket = 0;
    };
    for (VarId p : order) {
      dtype = tape.dtype(p);
      bucket += tensor_bytes(tape.shape(p), dtype);
      if (bucket >= limit) {
        close();
        limit = m_options.ddp_bucket_cap_bytes;
      }
    }
    close();
  }

 private:
  // _sync_module_states -> _broadcast_coalesced: parameters flattened into buffers of up to 250 MiB, one at
  // a time (each freed after its broadcast).
  static void broadcast(EagerTape& tape, const std::vector<VarId>& params) {
    tape.begin_op("DistributedDataParallel._sync_module_states", "broadcast_coalesced");
    Bytes chunk = 0;
    const auto flush = [&] {
      if (chunk > 0) {
        tape.release(
            tape.allocate("ddp.broadcast_buffer", chunk, DType::kUInt8, TensorCategory::kCommunication));
      }
      chunk = 0;
    };
    for (VarId p : params) {
      const Bytes bytes = tensor_bytes(tape.shape(p), tape.dtype(p));
      if (chunk > 0 && chunk + bytes > kBroadcastBucketBytes) {
        flush();
      }
      chunk += bytes;
    }
    flush();
  }

  const DataParallelOptions& m_options;
};

}  // namespace

std::unique_ptr<DataParallelScheme> make_ddp(const DataParallelOptions& options) {
  return std::make_unique<Ddp>(options);
}

}  // namespace vramsim
