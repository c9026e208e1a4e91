#include "kernels/replay/backends.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/replay/fake_device.h"
#include "sim/alloc/registry.h"
#include "sim/core/error.h"

namespace vramsim::hw {

const std::vector<BackendInfo>& backend_table() {
  static const std::vector<BackendInfo> kBackends = {
      {"cuda-malloc", "every allocation a cudaMalloc, every free a cudaFree", false, false},
      {"async-pool",
       "cudaMallocAsync / cudaFreeAsync on a pool that keeps its memory (release threshold max)", false,
       false},
      {"model", "a simulator policy decides; its segment calls (cudaMalloc, VMM map) are real", false, true},
      {"fake", "FAKE, no GPU: cuda-malloc on host bookkeeping (2 MiB granularity)", true, false},
      {"fake-model", "FAKE, no GPU: model on host bookkeeping (2 MiB granularity)", true, true},
  };
  return kBackends;
}

const BackendInfo& find_backend(std::string_view name) {
  std::string known;
  for (const BackendInfo& b : backend_table()) {
    if (b.name == name) {
      return b;
    }
    known += known.empty() ? "" : ", ";
    known += b.name;
  }
  throw InputError(fmt::format("--backend: unknown backend '{}' (known: {})", name, known));
}

std::unique_ptr<IReplayBackend> make_backend(const BackendRequest& request, const CudaHooks& cuda) {
  const BackendInfo& info = find_backend(request.backend);
  if (info.takes_policy) {
    find_policy(request.policy);  // an unknown policy is an option error, found before any device is made
  }
  const auto device = [&]() -> std::unique_ptr<IReplayDevice> {
    if (info.fake) {
      return std::make_unique<FakeDevice>(request.fake_granularity_bytes);
    }
    return cuda.make_device(request.device, request.streams);
  };
  if (info.name == "async-pool") {
    return cuda.make_async_pool(request.device, request.streams);
  }
  if (info.takes_policy) {
    return std::make_unique<ModelBackend>(std::string(info.name), device(), request.policy, request.config,
                                          request.sequence);
  }
  return std::make_unique<DirectMallocBackend>(std::string(info.name), device());
}

// ---- DirectMallocBackend ---------------------------------------------------------------------------------

DirectMallocBackend::DirectMallocBackend(std::string name, std::unique_ptr<IReplayDevice> device)
    : m_name(std::move(name)), m_device(std::move(device)) {}

Bytes DirectMallocBackend::alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) {
  const std::optional<Bytes> addr = m_device->malloc(size_bytes, PoolKind::kLarge, stream);
  if (!addr) {
    throw std::runtime_error(
        fmt::format("out of device memory: cudaMalloc({}) failed with {} bytes allocated by this replay "
                    "(device free: {})",
                    size_bytes, m_reserved_bytes, m_device->free_bytes()));
  }
  ++m_segment_events;
  m_reserved_bytes += size_bytes;
  m_live.emplace(*addr, Live{size_bytes, stream, seed});
  m_device->touch(*addr, size_bytes, stream, seed);
  return *addr;
}

std::uint64_t DirectMallocBackend::verify(Bytes addr) {
  const Live& live = m_live.at(addr);
  return m_device->verify(addr, live.size_bytes, live.stream, live.seed);
}

void DirectMallocBackend::free(Bytes addr) {
  const auto it = m_live.find(addr);
  if (it == m_live.end()) {
    throw std::logic_error(fmt::format("free of 0x{:x}, which this backend did not allocate", addr));
  }
  // cudaFree waits for the device to be idle, so the touch kernels queued on other streams cannot race it.
  m_device->free(addr, it->second.size_bytes);
  ++m_segment_events;
  m_reserved_bytes -= it->second.size_bytes;
  m_live.erase(it);
}

// ---- ModelBackend ----------------------------------------------------------------------------------------

ModelBackend::ModelBackend(std::string name, std::unique_ptr<IReplayDevice> device, std::string_view policy,
                           const CachingConfig& config, const RequestSequence& sequence)
    : m_name(std::move(name)),
      m_device(std::move(device)),
      m_policy(find_policy(policy).make(config, *m_device, m_counter)),
      m_policy_name(policy) {
  if (find_policy(policy).needs_plan) {
    m_policy->plan(sequence);
  }
}

Bytes ModelBackend::alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) {
  const AllocResult r = m_policy->allocate(AllocRequest{size_bytes, stream, 0});
  if (!r.ok()) {
    throw std::runtime_error(fmt::format(
        "out of device memory: policy {} could not serve {} bytes (it holds {} bytes; device free: {})",
        m_policy_name, size_bytes, m_counter.reserved_bytes, m_device->free_bytes()));
  }
  m_live.emplace(r.addr, Live{r.block, size_bytes, stream, seed});
  m_device->touch(r.addr, size_bytes, stream, seed);
  return r.addr;
}

std::uint64_t ModelBackend::verify(Bytes addr) {
  const Live& live = m_live.at(addr);
  return m_device->verify(addr, live.size_bytes, live.stream, live.seed);
}

void ModelBackend::free(Bytes addr) {
  const auto it = m_live.find(addr);
  if (it == m_live.end()) {
    throw std::logic_error(fmt::format("free of 0x{:x}, which this backend did not allocate", addr));
  }
  m_policy->free(it->second.block, 0);
  m_live.erase(it);
}

}  // namespace vramsim::hw
