// vramsim-replay's command line, as a function the executable's main() and the tests call:
//
//   vramsim-replay TRACE [--backend cuda-malloc|async-pool|model|fake|fake-model] [--policy NAME]
//                        [--alloc-conf STR] [--device N] [--trace-device N] [--verify] [--json [--no-rows]]
//
// Exit status: 0 ok; 1 the replay failed (a CUDA call, out of device memory; the message names the trace
// event); 2 no CUDA device (one line, as vramsim-gpu-probe); 3 --verify found bytes that lost their pattern;
// 64 bad arguments; 65 a trace that cannot be read or contradicts itself.
#pragma once

#include <ostream>

#include "kernels/replay/replay_backend.h"

namespace vramsim::hw {

inline constexpr int kExitOk = 0;
inline constexpr int kExitReplayFailed = 1;
inline constexpr int kExitNoDevice = 2;
inline constexpr int kExitVerifyFailed = 3;
inline constexpr int kExitUsage = 64;
inline constexpr int kExitBadTrace = 65;

// Runs the whole program: parse, plan, make the backend (through `cuda` for the real ones), replay, report.
// Normal output goes to `out`, errors (one line each, prefixed "vramsim-replay: ") to `err`.
int replay_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                const CudaHooks& cuda);

// The hooks of a build without CUDA: both throw NoCudaDevice saying so.
CudaHooks no_cuda_hooks();

}  // namespace vramsim::hw
