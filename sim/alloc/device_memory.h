// The simulated device under a caching policy: it answers cudaMalloc / cudaFree and the virtual-memory calls
// of expandable segments, and decides where memory lives and when the device is full.
//
// Policies talk to IDeviceMemory only; SimulatedDevice is the ordinary implementation (a capacity and an
// address bump pointer), and replay installs one that follows a recorded trace (sim/replay/).
#pragma once

#include <optional>

#include "sim/alloc/block_pool.h"
#include "sim/core/types.h"

namespace vramsim {

class IDeviceMemory {
 public:
  virtual ~IDeviceMemory() = default;
  // cudaMalloc(size_bytes): the base address, or nullopt for cudaErrorMemoryAllocation.
  virtual std::optional<Bytes> malloc(Bytes size_bytes, PoolKind pool, StreamId stream) = 0;
  virtual void free(Bytes addr, Bytes size_bytes) = 0;
  // cuMemAddressReserve: address space only, never fails for lack of memory.
  virtual Bytes reserve(Bytes size_bytes, PoolKind pool, StreamId stream) = 0;
  virtual void release_reservation(Bytes addr, Bytes size_bytes) = 0;
  // cuMemCreate + cuMemMap of [addr, addr + size_bytes), all or nothing (spec E4).
  virtual bool map(Bytes addr, Bytes size_bytes) = 0;
  virtual void unmap(Bytes addr, Bytes size_bytes) = 0;
  virtual Bytes total_bytes() const = 0;  // cudaMemGetInfo total
  virtual Bytes free_bytes() const = 0;   // cudaMemGetInfo free
};

// A device of `capacity_bytes` of which `reserved_outside_bytes` (CUDA context, other processes) are never
// available. Addresses start at a fixed base and grow; each allocation is aligned to 2 MiB, so their relative
// order is the order of creation, as cudaMalloc usually behaves on a fresh device.
class SimulatedDevice final : public IDeviceMemory {
 public:
  static constexpr Bytes kUnlimited = Bytes{1} << 60;
  static constexpr Bytes kBaseAddress = 0x7f0000000000;

  explicit SimulatedDevice(Bytes capacity_bytes = kUnlimited, Bytes reserved_outside_bytes = 0);

  std::optional<Bytes> malloc(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void free(Bytes addr, Bytes size_bytes) override;
  Bytes reserve(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void release_reservation(Bytes addr, Bytes size_bytes) override;
  bool map(Bytes addr, Bytes size_bytes) override;
  void unmap(Bytes addr, Bytes size_bytes) override;
  Bytes total_bytes() const override { return m_capacity_bytes; }
  Bytes free_bytes() const override { return m_capacity_bytes - m_used_bytes; }

  Bytes used_bytes() const { return m_used_bytes; }
  // Memory that was reserved before the run began (a recording's start state, installed in the policy
  // directly): `used_bytes` more count as used, and new addresses begin at or above `end_addr`, so that they
  // cannot overlap the installed segments. Returns false, changing nothing, when they do not fit the
  // capacity.
  bool adopt(Bytes used_bytes, Bytes end_addr);

 private:
  Bytes take_address(Bytes size_bytes);

  Bytes m_capacity_bytes;
  Bytes m_used_bytes;
  Bytes m_next_addr = kBaseAddress;
};

}  // namespace vramsim
