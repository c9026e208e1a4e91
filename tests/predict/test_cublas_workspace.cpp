// The cuBLAS workspace per handle and stream, as aten/src/ATen/cuda/CublasHandlePool.cpp
// (parseChosenWorkspaceSize) chooses it: the expected sizes are its rules worked out by hand.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

TEST_CASE("cuBLAS workspace: PyTorch's default per compute capability, and CUBLAS_WORKSPACE_CONFIG",
          "[quick][predict]") {
  constexpr std::int64_t kDefault = 4096 * 1024 * 2 + 16 * 1024 * 8;  // ":4096:2:16:8" = 8 MiB + 128 KiB
  constexpr std::int64_t kHopper = 4096 * 8 * 1024;                   // 32 MiB on 9.x to 12.x
  CHECK(cublas_workspace_bytes(80, "") == kDefault);                  // A100
  CHECK(cublas_workspace_bytes(89, "") == kDefault);                  // L4, RTX 4090 (Ada is 8.9)
  CHECK(cublas_workspace_bytes(75, "") == kDefault);                  // T4
  CHECK(cublas_workspace_bytes(90, "") == kHopper);                   // H100, H200
  CHECK(cublas_workspace_bytes(100, "") == kHopper);                  // Blackwell
  CHECK(cublas_workspace_bytes(80, ":4096:8") == 4096 * 1024 * 8);
  CHECK(cublas_workspace_bytes(90, ":16:8") == 16 * 1024 * 8);
  CHECK(cublas_workspace_bytes(80, ":4096:2:16:8") == kDefault);
  CHECK(cublas_workspace_bytes(90, "nonsense") ==
        kHopper);  // nothing parsed: PyTorch warns, keeps its default
  CHECK_THROWS_WITH(cublas_workspace_bytes(80, ":99999999999999999999:1"),
                    Catch::Contains("--cublas-workspace-config"));
  CHECK_THROWS_WITH(cublas_workspace_bytes(80, ":67108864:2"), Catch::Contains("more than 64 GiB"));
}

TEST_CASE("predict takes the GPU's cuBLAS workspace: two handles (main and autograd thread)",
          "[quick][predict]") {
  RequestArgs a;
  a.model = "gpt2";
  a.batch = 1;
  a.seq = 128;
  a.steps = 1;
  a.gpu = "a100";
  CHECK(make_request(a).options.cublas_workspace_bytes == Bytes{4096 * 1024 * 2 + 16 * 1024 * 8});
  a.gpu = "h100";
  CHECK(make_request(a).options.cublas_workspace_bytes == Bytes{32} << 20);
  a.cublas_workspace_config = ":16:8";
  const Prediction p = predict(make_request(a));
  // After backward both threads' workspaces are alive: 2 x 16 KiB x 8.
  CHECK(p.bill.workspace <= 2 * 16 * 1024 * 8);
  CHECK(make_request(a).options.cublas_workspace_bytes == Bytes{16 * 1024 * 8});
}
