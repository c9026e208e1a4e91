#include "sim/engine/nccl_buffers.h"

#include <string_view>

#include "sim/engine/gpu_table.h"

namespace vramsim {
namespace {

constexpr Bytes kIpcMin = 2 * kMiB;  // CUDA_IPC_MIN (src/include/comm.h): ALIGN_SIZE of every p2p buffer

constexpr Bytes align_ipc(Bytes size_bytes) { return (size_bytes + kIpcMin - 1) / kIpcMin * kIpcMin; }

// The header structures' sizes are not computed here: each is a few KiB (src/include/device.h), far below
// what rounding to 2 MiB absorbs; one byte stands for "some header" so that a 4 MiB Simple-only sender
// (P2P read) rounds up as NCCL's does.
constexpr Bytes kHeader = 1;

// Whether NCCL's public logs give this GPU's channel counts: H100 / H200 SXM (NVLink 4 through NVSwitch).
bool hopper_sxm(const std::string& gpu) {
  if (gpu.empty()) {
    return false;
  }
  const GpuSpec& g = find_gpu(gpu);
  return g.variant.find("SXM") != std::string_view::npos && g.compute_capability == 90;
}

}  // namespace

Bytes nccl_connection_buffer_bytes() {
  constexpr Bytes kSimple = Bytes{1} << 22;    // DEFAULT_BUFFSIZE
  constexpr Bytes kLl = 8 * 512 * 8 * 16;      // DEFAULT_LL_BUFFSIZE
  constexpr Bytes kLl128 = 120 * 640 * 8 * 8;  // DEFAULT_LL128_BUFFSIZE
  return align_ipc(kHeader + kSimple + kLl + kLl128);
}

Bytes nccl_send_connection_bytes() { return align_ipc(kHeader); }

Bytes nccl_ring_channel_bytes() { return nccl_connection_buffer_bytes() + nccl_send_connection_bytes(); }

int nccl_ring_channels(const std::string& gpu) { return hopper_sxm(gpu) ? 24 : 0; }

int nccl_p2p_channels_per_peer(const std::string& gpu) { return hopper_sxm(gpu) ? 32 : 0; }

}  // namespace vramsim
