#include "sim/alloc/device_memory.h"

#include <algorithm>

#include "sim/core/assert.h"

namespace vramsim {

SimulatedDevice::SimulatedDevice(Bytes capacity_bytes, Bytes reserved_outside_bytes)
    : m_capacity_bytes(capacity_bytes), m_used_bytes(std::min(reserved_outside_bytes, capacity_bytes)) {}

Bytes SimulatedDevice::take_address(Bytes size_bytes) {
  const Bytes addr = m_next_addr;
  constexpr Bytes kAlign = 2 * kMiB;
  m_next_addr += (size_bytes + kAlign - 1) / kAlign * kAlign;
  return addr;
}

std::optional<Bytes> SimulatedDevice::malloc(Bytes size_bytes, PoolKind, StreamId) {
  if (size_bytes > m_capacity_bytes - m_used_bytes) {
    return std::nullopt;
  }
  m_used_bytes += size_bytes;
  return take_address(size_bytes);
}

void SimulatedDevice::free(Bytes, Bytes size_bytes) {
  SIM_ASSERT(size_bytes <= m_used_bytes);
  m_used_bytes -= size_bytes;
}

bool SimulatedDevice::adopt(Bytes used_bytes, Bytes end_addr) {
  if (used_bytes > m_capacity_bytes - m_used_bytes) {
    return false;
  }
  m_used_bytes += used_bytes;
  constexpr Bytes kAlign = 2 * kMiB;
  m_next_addr = std::max(m_next_addr, (end_addr + kAlign - 1) / kAlign * kAlign);
  return true;
}

Bytes SimulatedDevice::reserve(Bytes size_bytes, PoolKind, StreamId) { return take_address(size_bytes); }

void SimulatedDevice::release_reservation(Bytes, Bytes) {}

bool SimulatedDevice::map(Bytes, Bytes size_bytes) {
  if (size_bytes > m_capacity_bytes - m_used_bytes) {
    return false;
  }
  m_used_bytes += size_bytes;
  return true;
}

void SimulatedDevice::unmap(Bytes, Bytes size_bytes) {
  SIM_ASSERT(size_bytes <= m_used_bytes);
  m_used_bytes -= size_bytes;
}

}  // namespace vramsim
