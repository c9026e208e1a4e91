// The replay backends, by name, and the two that are plain host code over an IReplayDevice (real or fake).
// For each: its device, what an allocation is, and what reserved_bytes() counts.
//   cuda-malloc  CUDA device. A cudaMalloc of the requested size; a free is a cudaFree.
//                Reserved: the sum of the live cudaMalloc sizes.
//   async-pool   CUDA device. cudaMallocFromPoolAsync on a private pool whose release threshold is UINT64_MAX
//                (as PyTorch's backend:cudaMallocAsync); cudaFreeAsync on the allocation's stream.
//                Reserved: the pool's ReservedMemCurrent.
//   model        CUDA device. A simulator policy (--policy, --alloc-conf) decides; its device calls
//                (cudaMalloc, cudaFree, reserve, map, unmap) are real. Reserved: the policy's segments.
//   fake         FakeDevice (host bookkeeping, FAKE: no GPU). As cuda-malloc.
//   fake-model   FakeDevice (host bookkeeping, FAKE: no GPU). As model.
// async-pool is CUDA code through and through (kernels/replay_cuda_async_pool.cu); the others are
// DirectMallocBackend and ModelBackend below: the fake backends run the very host code the real ones run.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/replay/replay_backend.h"
#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/i_allocator_policy.h"
#include "sim/alloc/request_sequence.h"

namespace vramsim::hw {

struct BackendInfo {
  std::string_view name;
  std::string_view summary;
  bool fake = false;
  bool takes_policy = false;  // --policy / --alloc-conf apply
};
const std::vector<BackendInfo>& backend_table();
// Throws InputError("--backend: unknown backend 'x' (known: ...)").
const BackendInfo& find_backend(std::string_view name);

struct BackendRequest {
  std::string backend = "cuda-malloc";
  int device = 0;  // CUDA device index
  std::vector<StreamId> streams;
  std::string policy = "pytorch";  // model / fake-model: registry name (sim/alloc/registry.h)
  CachingConfig config;            // model / fake-model: the policy's settings
  RequestSequence sequence;        // model / fake-model: the whole run, for policies that plan offline
  Bytes fake_granularity_bytes = 2 * kMiB;
};

// Throws InputError for an unknown backend or policy, NoCudaDevice (from `cuda`) when a real backend cannot
// find a GPU.
std::unique_ptr<IReplayBackend> make_backend(const BackendRequest& request, const CudaHooks& cuda);

// One device call per allocation and per free (backends cuda-malloc and fake). An allocation the device
// refuses throws std::runtime_error("out of device memory: cudaMalloc(n) failed ...").
class DirectMallocBackend final : public IReplayBackend {
 public:
  DirectMallocBackend(std::string name, std::unique_ptr<IReplayDevice> device);
  std::string_view name() const override { return m_name; }
  std::string_view reserved_meaning() const override { return "sum of the live cudaMalloc sizes"; }
  bool is_fake() const override { return m_device->is_fake(); }
  Bytes alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) override;
  std::uint64_t verify(Bytes addr) override;
  void free(Bytes addr) override;
  void empty_cache() override {}
  Bytes reserved_bytes() const override { return m_reserved_bytes; }
  std::uint64_t segment_events() const override { return m_segment_events; }
  std::int64_t mem_in_use_bytes() override { return m_device->mem_in_use_bytes(); }
  void sync() override { m_device->sync(); }
  void start_clock() override { m_device->start_clock(); }
  double stop_clock_ms() override { return m_device->stop_clock_ms(); }

 private:
  struct Live {
    Bytes size_bytes;
    StreamId stream;
    std::uint32_t seed;
  };
  std::string m_name;
  std::unique_ptr<IReplayDevice> m_device;
  std::unordered_map<Bytes, Live> m_live;
  Bytes m_reserved_bytes = 0;
  std::uint64_t m_segment_events = 0;
};

// A simulator policy over a device (backends model and fake-model): the policy decides where each block goes
// and when to cudaMalloc / map / release; the device carries those calls out, so a block's address is a real
// segment base + the policy's offset. A request the policy cannot serve (its device refused, after the retry
// ladder) throws std::runtime_error naming the policy. A policy that plans offline (PolicyEntry::needs_plan)
// is given `sequence` first, and the allocs and frees that follow must be that sequence's, in order.
class ModelBackend final : public IReplayBackend {
 public:
  ModelBackend(std::string name, std::unique_ptr<IReplayDevice> device, std::string_view policy,
               const CachingConfig& config, const RequestSequence& sequence = {});
  std::string_view name() const override { return m_name; }
  std::string_view reserved_meaning() const override {
    return "the policy's reserved memory: cudaMalloc'd segments + mapped pages";
  }
  bool is_fake() const override { return m_device->is_fake(); }
  Bytes alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) override;
  std::uint64_t verify(Bytes addr) override;
  void free(Bytes addr) override;
  void empty_cache() override { m_policy->empty_cache(); }
  Bytes reserved_bytes() const override { return m_counter.reserved_bytes; }
  std::uint64_t segment_events() const override { return m_counter.events; }
  std::int64_t mem_in_use_bytes() override { return m_device->mem_in_use_bytes(); }
  void sync() override { m_device->sync(); }
  void start_clock() override { m_device->start_clock(); }
  double stop_clock_ms() override { return m_device->stop_clock_ms(); }

  const IAllocatorPolicy& policy() const { return *m_policy; }

 private:
  // The policy's segment events, counted as they happen (an observer: policies keep no statistics).
  struct SegmentCounter final : IAllocObserver {
    Bytes reserved_bytes = 0;
    std::uint64_t events = 0;
    void on_segment_alloc(const SegmentEventInfo& e) override { add(e.size_bytes); }
    void on_segment_map(const SegmentEventInfo& e) override { add(e.size_bytes); }
    void on_segment_free(const SegmentEventInfo& e) override { remove(e.size_bytes); }
    void on_segment_unmap(const SegmentEventInfo& e) override { remove(e.size_bytes); }
    void add(Bytes b) {
      reserved_bytes += b;
      ++events;
    }
    void remove(Bytes b) {
      reserved_bytes -= b;
      ++events;
    }
  };
  struct Live {
    BlockId block;
    Bytes size_bytes;
    StreamId stream;
    std::uint32_t seed;
  };

  std::string m_name;
  std::unique_ptr<IReplayDevice> m_device;
  SegmentCounter m_counter;
  std::unique_ptr<IAllocatorPolicy> m_policy;
  std::string m_policy_name;
  std::unordered_map<Bytes, Live> m_live;
};

}  // namespace vramsim::hw
