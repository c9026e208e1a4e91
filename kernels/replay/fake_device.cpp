#include "kernels/replay/fake_device.h"

#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

namespace vramsim::hw {
namespace {

[[noreturn]] void misuse(const std::string& what) { throw std::logic_error("fake device: " + what); }

}  // namespace

FakeDevice::FakeDevice(Bytes granularity_bytes, Bytes capacity_bytes)
    : m_granularity_bytes(granularity_bytes), m_capacity_bytes(capacity_bytes) {
  if (granularity_bytes == 0) {
    misuse("granularity must be positive");
  }
}

Bytes FakeDevice::take_address(Bytes size_bytes) {
  const Bytes addr = m_next_addr;
  m_next_addr += round_up(size_bytes == 0 ? 1 : size_bytes);
  return addr;
}

std::optional<Bytes> FakeDevice::malloc(Bytes size_bytes, PoolKind, StreamId) {
  const Bytes taken = round_up(size_bytes);
  if (taken > m_capacity_bytes - m_in_use_bytes) {
    return std::nullopt;
  }
  const Bytes addr = take_address(size_bytes);
  m_allocations.emplace(addr, size_bytes);
  m_in_use_bytes += taken;
  return addr;
}

void FakeDevice::free(Bytes addr, Bytes size_bytes) {
  const auto it = m_allocations.find(addr);
  if (it == m_allocations.end()) {
    misuse(fmt::format("cudaFree(0x{:x}): not a live allocation", addr));
  }
  if (it->second != size_bytes) {
    misuse(
        fmt::format("cudaFree(0x{:x}) of {} bytes: it was allocated with {}", addr, size_bytes, it->second));
  }
  m_in_use_bytes -= round_up(it->second);
  m_allocations.erase(it);
}

Bytes FakeDevice::reserve(Bytes size_bytes, PoolKind, StreamId) {
  const Bytes addr = take_address(size_bytes);
  m_reservations.emplace(addr, size_bytes);
  return addr;
}

void FakeDevice::release_reservation(Bytes addr, Bytes size_bytes) {
  const auto it = m_reservations.find(addr);
  if (it == m_reservations.end() || it->second != size_bytes) {
    misuse(fmt::format("cuMemAddressFree(0x{:x}, {}): no such reservation", addr, size_bytes));
  }
  const auto mapped = m_mapped.lower_bound(addr);
  if (mapped != m_mapped.end() && mapped->first < addr + size_bytes) {
    misuse(fmt::format("cuMemAddressFree(0x{:x}): pages at 0x{:x} are still mapped", addr, mapped->first));
  }
  m_reservations.erase(it);
}

bool FakeDevice::map(Bytes addr, Bytes size_bytes) {
  const Bytes end = addr + size_bytes;
  auto res = m_reservations.upper_bound(addr);
  if (size_bytes == 0 || res == m_reservations.begin() ||
      std::prev(res)->first + std::prev(res)->second < end) {
    misuse(fmt::format("cuMemMap(0x{:x}, {}): outside every reservation", addr, size_bytes));
  }
  auto next = m_mapped.upper_bound(addr);
  if ((next != m_mapped.end() && next->first < end) ||
      (next != m_mapped.begin() && std::prev(next)->second > addr)) {
    misuse(fmt::format("cuMemMap(0x{:x}, {}): overlaps mapped pages", addr, size_bytes));
  }
  const Bytes taken = round_up(size_bytes);
  if (taken > m_capacity_bytes - m_in_use_bytes) {
    return false;
  }
  m_in_use_bytes += taken;
  Bytes start = addr;
  Bytes stop = end;
  if (next != m_mapped.end() && next->first == end) {  // merge with the run above
    stop = next->second;
    next = m_mapped.erase(next);
  }
  if (next != m_mapped.begin() && std::prev(next)->second == addr) {  // ... and the one below
    start = std::prev(next)->first;
    m_mapped.erase(std::prev(next));
  }
  m_mapped.emplace(start, stop);
  return true;
}

void FakeDevice::unmap(Bytes addr, Bytes size_bytes) {
  const Bytes end = addr + size_bytes;
  auto it = m_mapped.upper_bound(addr);
  if (size_bytes == 0 || it == m_mapped.begin() || std::prev(it)->second < end) {
    misuse(fmt::format("cuMemUnmap(0x{:x}, {}): not mapped", addr, size_bytes));
  }
  --it;
  const Bytes run_start = it->first;
  const Bytes run_end = it->second;
  m_mapped.erase(it);
  if (run_start < addr) {
    m_mapped.emplace(run_start, addr);
  }
  if (end < run_end) {
    m_mapped.emplace(end, run_end);
  }
  m_in_use_bytes -= round_up(size_bytes);
}

bool FakeDevice::in_allocation(Bytes addr, Bytes size_bytes) const {
  auto it = m_allocations.upper_bound(addr);
  if (it == m_allocations.begin()) {
    return false;
  }
  --it;
  return addr + size_bytes <= it->first + it->second;
}

bool FakeDevice::in_mapping(Bytes addr, Bytes size_bytes) const {
  auto it = m_mapped.upper_bound(addr);
  if (it == m_mapped.begin()) {
    return false;
  }
  --it;
  return addr + size_bytes <= it->second;
}

void FakeDevice::touch(Bytes addr, Bytes size_bytes, StreamId, std::uint32_t) {
  if (!in_allocation(addr, size_bytes) && !in_mapping(addr, size_bytes)) {
    misuse(fmt::format("touch of [0x{:x}, 0x{:x}): outside every live allocation and mapping", addr,
                       addr + size_bytes));
  }
  ++m_touches;
}

double FakeDevice::stop_clock_ms() {
  const auto elapsed = std::chrono::steady_clock::now() - m_clock_start;
  return std::chrono::duration<double, std::milli>(elapsed).count();
}

Bytes FakeDevice::mapped_bytes() const {
  Bytes total = 0;
  for (const auto& [start, end] : m_mapped) {
    total += end - start;
  }
  return total;
}

}  // namespace vramsim::hw
