// FakeDevice: a device made of host bookkeeping only, for tests and dry runs without a GPU. It behaves as the
// simulator assumes cudaMalloc and the VMM calls behave, so replays on it check the host logic (plan, runner,
// backends, reports), never the hardware: every report made on it says FAKE.
//
// Model of the device (the assumption vramsim-gpu-probe measures on real GPUs):
//   * cudaMalloc(n) takes round_up(n, granularity) bytes (2 MiB by default) at a fresh address aligned to the
//     granularity; cudaFree gives the same back;
//   * cuMemAddressReserve takes address space only; cuMemMap of n bytes takes round_up(n, granularity);
//   * a capacity (default: unlimited) makes malloc / map fail when it would be exceeded.
// Every call is checked: cudaFree of an address that is not a live allocation, a map outside a reservation
// or over mapped pages, an unmap of pages that are not mapped, and a touch outside live memory throw
// std::logic_error naming the call and the addresses.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string_view>

#include "kernels/replay/replay_backend.h"

namespace vramsim::hw {

class FakeDevice final : public IReplayDevice {
 public:
  static constexpr Bytes kDefaultGranularity = 2 * kMiB;
  static constexpr Bytes kUnlimited = Bytes{1} << 60;
  static constexpr Bytes kBaseAddress = 0x7e0000000000;

  explicit FakeDevice(Bytes granularity_bytes = kDefaultGranularity, Bytes capacity_bytes = kUnlimited);

  std::optional<Bytes> malloc(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void free(Bytes addr, Bytes size_bytes) override;
  Bytes reserve(Bytes size_bytes, PoolKind pool, StreamId stream) override;
  void release_reservation(Bytes addr, Bytes size_bytes) override;
  bool map(Bytes addr, Bytes size_bytes) override;
  void unmap(Bytes addr, Bytes size_bytes) override;
  Bytes total_bytes() const override { return m_capacity_bytes; }
  Bytes free_bytes() const override { return m_capacity_bytes - m_in_use_bytes; }

  std::string_view name() const override { return "fake"; }
  bool is_fake() const override { return true; }
  void touch(Bytes addr, Bytes size_bytes, StreamId stream, std::uint32_t seed) override;
  std::uint64_t verify(Bytes, Bytes, StreamId, std::uint32_t) override { return 0; }
  std::int64_t mem_in_use_bytes() override { return static_cast<std::int64_t>(m_in_use_bytes); }
  void sync() override {}
  void start_clock() override { m_clock_start = std::chrono::steady_clock::now(); }
  double stop_clock_ms() override;

  Bytes round_up(Bytes size_bytes) const {
    return (size_bytes + m_granularity_bytes - 1) / m_granularity_bytes * m_granularity_bytes;
  }
  std::size_t live_allocations() const { return m_allocations.size(); }
  Bytes mapped_bytes() const;
  std::size_t touches() const { return m_touches; }

 private:
  Bytes take_address(Bytes size_bytes);
  bool in_allocation(Bytes addr, Bytes size_bytes) const;
  bool in_mapping(Bytes addr, Bytes size_bytes) const;

  Bytes m_granularity_bytes;
  Bytes m_capacity_bytes;
  Bytes m_in_use_bytes = 0;
  Bytes m_next_addr = kBaseAddress;
  std::map<Bytes, Bytes> m_allocations;   // base -> size asked of cudaMalloc
  std::map<Bytes, Bytes> m_reservations;  // base -> size
  std::map<Bytes, Bytes> m_mapped;        // start -> end of mapped runs, merged, disjoint
  std::size_t m_touches = 0;
  std::chrono::steady_clock::time_point m_clock_start{};
};

}  // namespace vramsim::hw
