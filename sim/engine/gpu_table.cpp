// The GPU table. Every number has its source next to it; "est." marks estimates.
//
// Note [Where the numbers come from]
//   Peak FLOP/s and bandwidth: NVIDIA datasheets / architecture whitepapers, dense figures (datasheets print
//   tensor-core numbers "with sparsity" for Ampere and later; we halve those):
//     A100 (SXM4): A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): FP32 19.5 TF,
//       TF32 156 TF, FP16/BF16 312 TF, 1,555 GB/s (40GB, HBM2), 2,039 GB/s (80GB, HBM2e).
//     H100 SXM5: H100 datasheet: FP32 67 TF (66.9), TF32 989 TF*, FP16/BF16 1,979 TF*, FP8 3,958 TF*
//       (* with sparsity -> 494.7 / 989.4 / 1,978.9 dense), 3.35 TB/s HBM3.
//     H200 SXM: H200 datasheet: same GH100 compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
//     L4: L4 datasheet: FP32 30.3 TF, TF32 120 TF*, FP16/BF16 242 TF*, FP8 485 TF* (-> 60 / 121 / 242.5
//       dense), 300 GB/s GDDR6.
//     RTX 4090: Ada (AD102) whitepaper: FP32 82.6 TF, TF32 82.6 TF, FP16/BF16 165.2 TF and FP8 330.3 TF with
//       FP32 accumulate (GeForce runs FP32-accumulate at half the FP16-accumulate rate; PyTorch accumulates
//       in FP32), 1,008 GB/s GDDR6X.
//     V100 SXM2: V100 datasheet: FP32 15.7 TF, tensor FP16 125 TF, 900 GB/s HBM2; no TF32/BF16/FP8.
//     T4: T4 datasheet: FP32 8.1 TF, tensor FP16 65 TF, 320 GB/s GDDR6; no TF32/BF16/FP8.
//   total_memory_bytes is the runtime's total (deviceQuery's "Total amount of global memory", which is
//   cudaMemGetInfo's total; PyTorch's OOM message prints it as "GPU 0 has a total capacity of X GiB"),
//   taken from published deviceQuery outputs or OOM messages. It is below the nominal size (ECC, driver
//   reservations) and moves by a few MiB to ~200 MiB with the driver version; the values below are one
//   recent reading each:
//     A100-40GB 40,441 MiB (deviceQuery, A100 40GB NVLink node, Paderborn PC2 wiki);
//     A100-80GB 81,158 MiB (deviceQuery, A100-SXM4-80GB, driver 12.5; other drivers show 81,051-81,251);
//     H100-80GB 81,106 MiB (deviceQuery, H100 80GB HBM3, driver 12.7; = the "79.21 GiB" of OOM messages);
//     H200-141GB 143,155 MiB (OOM messages on 8xH200: "total capacity of 139.80 GiB"; +-5 MiB rounding);
//     L4 22,518 MiB (deviceQuery, driver 12.0; OOM messages on other drivers say 22.03 GiB);
//     RTX-4090 24,207 MiB (trtexec device info; = the "23.64 GiB" of OOM messages);
//     V100-32GB 32,510 MiB and V100-16GB 16,160 MiB (deviceQuery, Tesla V100-SXM2/PCIE);
//     T4 15,110 MiB (deviceQuery, Tesla T4, driver 11.2).
//   launch_overhead_ns: est. 4 us per kernel for every GPU: host-side launch costs ~4-6 us per kernel in
//   published measurements (e.g. NVIDIA's "Getting Started with CUDA Graphs" blog; pegainfer's launch-
//   overhead post); with the host running ahead the device-side gap is smaller, so this is a mid value.
//   The CUDA context is not here: it depends on the module loading too (sim/predict/cuda_context.cpp).
//   compute capability: NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus): A100 8.0, H100 and
//   H200 9.0,
//     L4 and RTX 4090 8.9, V100 7.0, T4 7.5. PyTorch sizes its cuBLAS workspaces by it (CublasHandlePool.cpp)
//     and picks SDPA kernels by it (sdp_utils.cpp: FlashAttention-2 needs 8.0).
//   SMs: the architecture whitepapers / datasheets: A100 108, H100 SXM5 132, H200 SXM 132 (same GH100
//     configuration), L4 58, RTX 4090 128, V100 80, T4 40. Max resident threads per SM: the CUDA C++
//     Programming Guide's table of compute-capability limits: 2048 for 7.0, 8.0 and 9.0, 1024 for 7.5,
//     1536 for 8.6 and 8.9. PyTorch's reduction kernels size their grid by both (Reduce.cuh).
//   GPU-to-GPU links, per direction (the datasheets print NVLink as both directions together): A100 SXM4
//     NVLink 3 600 GB/s -> 300; H100 SXM5 and H200 SXM NVLink 4 900 GB/s -> 450; V100 SXM2 NVLink 2 300 GB/s
//     -> 150; L4 and RTX 4090 have no NVLink: PCIe 4.0 x16, 32 GB/s; T4 PCIe 3.0 x16, 16 GB/s. Collectives
//     reach less than this (NCCL's bus bandwidth); the timeline's communication times are lower bounds.
//
// Note [The GPUs added for issue 36] (each figure from the vendor data sheet named; dense tensor rates are
// half the data sheets' "with sparsity" figures; memory is the nominal size read as GiB unless a runtime
// total is cited: rows whose total equals the nominal size carry the MARKETING size, not what the driver
// reports, which is a few hundred MiB to ~2% less):
//   L40S: NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, FP32 91.6 TF, TF32 366 TF*, FP16/BF16 733 TF*,
//     FP8 1,466 TF*; AD102, 142 SMs, compute 8.9; PCIe 4.0 x16. Runtime total 44.42 GiB: PyTorch's OOM
//     message on 8x L40S (stepfun-ai/Step-Video-T2V issue #8): 45,486 MiB (+-5 MiB rounding).
//   A10G (AWS g5): NVIDIA A10 datasheet figures (24 GB GDDR6, 600 GB/s, FP32 31.2 TF, TF32 125 TF*,
//     FP16/BF16 250 TF*); 80 SMs and compute 8.6 as deviceQuery prints them on g5 (the A10 has 72; est.).
//     Runtime total 22.19 GiB: PyTorch's OOM message on ml.g5.12xlarge (a vLLM issue about
//     mosaicml/mpt-30b, quoted in public notes): 22,723 MiB (+-5 MiB rounding).
//   RTX 3090: GA102 whitepaper: 24 GB GDDR6X, 936 GB/s, FP32 35.6 TF, FP16/BF16 tensor with FP32
//     accumulate 71 TF (GeForce half rate), no FP8; 82 SMs, compute 8.6. Runtime total 23.70 GiB: PyTorch's
//     OOM messages on an RTX 3090 (Lightning-AI/lit-llama issue #137; GaoLii/DSP issue #10): 24,269 MiB.
//   RTX 5090: NVIDIA RTX Blackwell GPU architecture whitepaper: 32 GB GDDR7, 1,792 GB/s, FP32 104.8 TF,
//     FP16/BF16 tensor FP32-accumulate 209.5 TF, FP8 419 TF (est.: the whitepaper's FP32-accumulate rates);
//     GB202, 170 SMs, compute 12.0; PCIe 5.0 x16 (64 GB/s). Runtime total 31.37 GiB: PyTorch's OOM message on
//     an RTX 5090 (Wan-Video/Wan2.1 issue #465): 32,123 MiB.
//   RTX A6000: NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s, FP32 38.7 TF, tensor 309.7 TF* (FP16);
//     84 SMs, compute 8.6. Memory: marketing.
//   RTX 6000 Ada: NVIDIA RTX 6000 Ada datasheet: 48 GB GDDR6, 960 GB/s, FP32 91.1 TF, FP8 1,457 TF*;
//     142 SMs, compute 8.9. Runtime total 44.43 GiB: PyTorch's OOM message beside nvidia-smi's 46068MiB
//     (DINGYANB/MTVCrafter issue #21): 45,496 MiB.
//   H200 NVL: NVIDIA H200 datasheet (NVL column): 141 GB HBM3e, 4.8 TB/s, FP32 60 TF, TF32 835 TF*,
//     BF16 1,671 TF*, FP8 3,341 TF*; NVLink bridge 900 GB/s; 132 SMs (est., GH100 as in H100 NVL).
//     Memory: the SXM part's runtime total (same HBM stacks; est.).
//   H20: NVIDIA H20 product brief (as reported): 96 GB HBM3, 4.0 TB/s, FP32 44 TF, TF32 74 TF, BF16 148 TF,
//     FP8 296 TF (dense), NVLink 900 GB/s; 78 SMs (est.), compute 9.0. Memory: marketing.
//   B200: NVIDIA HGX B200 datasheet, per GPU (the 8-GPU figures / 8): 180 GB HBM3e, 7.7 TB/s, FP32 75 TF,
//     TF32 2.2 PF*, BF16 4.5 PF*, FP8 9 PF*; NVLink 5 1.8 TB/s; 148 SMs, compute 10.0. Memory: marketing.
//   GB200 (one Blackwell GPU of a GB200 NVL72): NVIDIA GB200 NVL72 datasheet / 72: 186 GB HBM3e
//     (13.4 TB / 72), 8 TB/s, FP32 80 TF, TF32 2.5 PF*, BF16 5 PF*, FP8 10 PF*; NVLink 5 1.8 TB/s.
//     Memory: marketing.
//   AMD Instinct (PyTorch's ROCm build runs the same caching allocator through HIP; the compute capability
//   is what torch.cuda.get_device_capability() returns on ROCm, the gfx target's major/minor):
//     MI250X: AMD Instinct MI250X data sheet: 128 GB HBM2e and 3.2 TB/s over two GCDs, each a device of its
//       own to PyTorch: 64 GB, 1.6 TB/s, FP32 23.95 TF (vector), FP16/BF16 191.5 TF, no TF32/FP8; 110 CUs
//       per GCD; gfx90a (9.0); Infinity Fabric 50 GB/s per direction per link (est.). Memory: marketing.
//     MI300X: AMD Instinct MI300X data sheet: 192 GB HBM3, 5.3 TB/s, FP32 81.7 TF (vector), TF32 653.7 TF,
//       FP16/BF16 1,307.4 TF, FP8 2,614.9 TF (dense); 304 CUs; gfx942 (9.4); Infinity Fabric 128 GB/s per
//       link, 64 per direction. Memory: marketing.
//     MI325X: AMD Instinct MI325X data sheet: 256 GB HBM3E, 6 TB/s, compute as MI300X. Memory: marketing.
//
// Note [The GPUs people rent now, session 8] (the same conventions):
//   H100 PCIe: NVIDIA H100 datasheet (PCIe column): 80 GB HBM2e, 2.0 TB/s, FP32 51 TF, TF32 756 TF*,
//     BF16 1,513 TF*, FP8 3,026 TF*; 114 SMs (H100 whitepaper), compute 9.0; PCIe 5.0 x16. Memory: the
//     SXM5 row's runtime total (the same 80 GB less the driver's share; est., no published PCIe reading).
//   H100 NVL: the datasheet's NVL column: 94 GB HBM3, 3.9 TB/s, FP32 60 TF, TF32 835 TF*, BF16 1,671 TF*,
//     FP8 3,341 TF*; NVLink bridge 600 GB/s; 132 SMs (est., as H100 SXM). Runtime total 93.00 GiB: PyTorch's
//     OOM message on a RunPod "H100 NVL 94GB" (ali-vilab/VACE issue #56): 95,232 MiB (+-5 MiB rounding).
//   A100 PCIe 40GB / 80GB: the A100 datasheet's PCIe columns: compute as SXM4, 1,555 / 1,935 GB/s; PCIe 4.0
//     x16 (the optional NVLink bridge is not assumed). Memory: the SXM4 rows' runtime totals (same HBM;
//     est., no published PCIe reading found).
//   L40: NVIDIA L40 datasheet: 48 GB GDDR6, 864 GB/s, FP32 90.5 TF, TF32 181 TF*, BF16 362 TF*,
//     FP8 724 TF*; AD102, 142 SMs, compute 8.9. Runtime total 44.40 GiB: PyTorch's OOM message "in single
//     L40 GPU" (QwenLM/Qwen3-VL issue #2097): 45,466 MiB (+-5 MiB rounding).
//   A10: NVIDIA A10 datasheet: 24 GB GDDR6, 600 GB/s, FP32 31.2 TF, TF32 125 TF*, BF16 250 TF*; GA102
//     with 72 SMs, compute 8.6. Runtime total 21.99 GiB: PyTorch's OOM message on a Lambda "a10" instance
//     (zai-org/CogVLM issue #236): 22,518 MiB (+-5 MiB rounding).
//   RTX PRO 6000 Blackwell (Workstation / Server Edition): NVIDIA's RTX Blackwell whitepaper table (as
//     quoted in NVIDIA/cudnn-frontend PR #1164): GB202 with 188 SMs; 96 GB GDDR7 ECC, 1,792 GB/s; compute
//     12.0 (sm_120, antirez/ds4 PR #256); FP32 125 TF, "4,000 AI TOPS" FP4 with sparsity -> FP8 1,000,
//     BF16 500, TF32 250 TF dense (est.: professional boards accumulate in FP32 at full rate); PCIe 5.0 x16.
//     Runtime total 94.97 GiB: a CUDA program's log of the device total on a 96 GB Workstation card whose
//     nvidia-smi shows 97,887 MiB (antirez/ds4 issue #431): 97,249 MiB (+-5 MiB rounding).
//   B300 / GB300 (Blackwell Ultra): NVIDIA's announcements give 288 GB HBM3e and 8 TB/s per GPU, compute
//     capability 10.3, NVLink 5 1.8 TB/s; the dense BF16 / FP8 / TF32 / FP32 rates and the SM count are
//     taken as B200's (est.: Blackwell Ultra raises FP4, not these). Memory: marketing.
//   Not added: RTX PRO 6000's Max-Q and Server variants differ in clocks only (the alias maps them to one
//     row); AMD rows beyond MI325X (MI350X/MI355X) wait for a published PyTorch ROCm reading.
//   (* with sparsity; the rows hold half.) Max threads per SM: 1536 for compute 8.6 / 8.9 / 12.0, 2048 for
//   9.0 and 10.0; AMD: 2048 per CU (32 wavefronts of 64; rocminfo on an MI300X prints "Compute Unit: 304" and
//   "Max Work-item Per CU: 2048", ROCm/legacy-rocm-build issue #4021).
#include "sim/engine/gpu_table.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

constexpr double kT = 1e12;  // tera, for FLOP/s and bytes/s
constexpr double kG = 1e9;
constexpr TimeNs kLaunchNs = 4'000;  // est., see Note

// clang-format off
// Per row: name, variant, nominal bytes, runtime total bytes,
//          FLOP/s fp32, tf32, fp16, bf16, fp8 (dense; 0 = no hardware path), bandwidth B/s, launch ns,
//          compute capability x 10, SMs, max threads per SM, link B/s per direction.
const std::vector<GpuSpec> kGpus = {
    {"A100-40GB", "SXM4, HBM2", 40 * kGiB, 42'405'855'232ULL,
     19.5 * kT, 156 * kT, 312 * kT, 312 * kT, 0, 1555 * kG, kLaunchNs, 80, 108, 2048, 300 * kG},
    {"A100-80GB", "SXM4, HBM2e", 80 * kGiB, 85'100'068'864ULL,
     19.5 * kT, 156 * kT, 312 * kT, 312 * kT, 0, 2039 * kG, kLaunchNs, 80, 108, 2048, 300 * kG},
    {"H100-80GB", "SXM5, HBM3", 80 * kGiB, 85'045'477'376ULL,
     66.9 * kT, 494.7 * kT, 989.4 * kT, 989.4 * kT, 1978.9 * kT, 3350 * kG, kLaunchNs, 90, 132, 2048, 450 * kG},
    {"H200-141GB", "SXM, HBM3e", 141 * kGiB, 143'155ULL * kMiB,
     66.9 * kT, 494.7 * kT, 989.4 * kT, 989.4 * kT, 1978.9 * kT, 4800 * kG, kLaunchNs, 90, 132, 2048, 450 * kG},
    {"L4", "PCIe, GDDR6", 24 * kGiB, 23'612'293'120ULL,
     30.3 * kT, 60 * kT, 121 * kT, 121 * kT, 242.5 * kT, 300 * kG, kLaunchNs, 89, 58, 1536, 32 * kG},
    {"RTX-4090", "GeForce, GDDR6X", 24 * kGiB, 24'207ULL * kMiB,
     82.6 * kT, 82.6 * kT, 165.2 * kT, 165.2 * kT, 330.3 * kT, 1008 * kG, kLaunchNs, 89, 128, 1536, 32 * kG},
    {"V100-32GB", "SXM2, HBM2", 32 * kGiB, 34'089'730'048ULL,
     15.7 * kT, 0, 125 * kT, 0, 0, 900 * kG, kLaunchNs, 70, 80, 2048, 150 * kG},
    {"V100-16GB", "SXM2, HBM2", 16 * kGiB, 16'945'512'448ULL,
     15.7 * kT, 0, 125 * kT, 0, 0, 900 * kG, kLaunchNs, 70, 80, 2048, 150 * kG},
    {"T4", "PCIe, GDDR6", 16 * kGiB, 15'843'721'216ULL,
     8.1 * kT, 0, 65 * kT, 0, 0, 320 * kG, kLaunchNs, 75, 40, 1024, 16 * kG},
    {"L40S", "PCIe, GDDR6", 48 * kGiB, 45'486ULL * kMiB,
     91.6 * kT, 183 * kT, 366.5 * kT, 366.5 * kT, 733 * kT, 864 * kG, kLaunchNs, 89, 142, 1536, 32 * kG},
    {"A10G", "PCIe, GDDR6 (AWS g5)", 24 * kGiB, 22'723ULL * kMiB,
     31.2 * kT, 62.5 * kT, 125 * kT, 125 * kT, 0, 600 * kG, kLaunchNs, 86, 80, 1536, 32 * kG},
    {"RTX-3090", "GeForce, GDDR6X", 24 * kGiB, 24'269ULL * kMiB,
     35.6 * kT, 35.6 * kT, 71 * kT, 71 * kT, 0, 936 * kG, kLaunchNs, 86, 82, 1536, 32 * kG},
    {"RTX-5090", "GeForce, GDDR7", 32 * kGiB, 32'123ULL * kMiB,
     104.8 * kT, 104.8 * kT, 209.5 * kT, 209.5 * kT, 419 * kT, 1792 * kG, kLaunchNs, 120, 170, 1536, 64 * kG},
    {"RTX-A6000", "PCIe, GDDR6 (memory: marketing size)", 48 * kGiB, 48 * kGiB,
     38.7 * kT, 77.4 * kT, 154.8 * kT, 154.8 * kT, 0, 768 * kG, kLaunchNs, 86, 84, 1536, 32 * kG},
    {"RTX-6000-Ada", "PCIe, GDDR6", 48 * kGiB, 45'496ULL * kMiB,
     91.1 * kT, 182.1 * kT, 364.2 * kT, 364.2 * kT, 728.5 * kT, 960 * kG, kLaunchNs, 89, 142, 1536, 32 * kG},
    {"H200-NVL", "PCIe + NVLink bridge, HBM3e", 141 * kGiB, 143'155ULL * kMiB,
     60 * kT, 417.5 * kT, 835.5 * kT, 835.5 * kT, 1670.5 * kT, 4800 * kG, kLaunchNs, 90, 132, 2048, 450 * kG},
    {"H20", "SXM, HBM3 (memory: marketing size)", 96 * kGiB, 96 * kGiB,
     44 * kT, 74 * kT, 148 * kT, 148 * kT, 296 * kT, 4000 * kG, kLaunchNs, 90, 78, 2048, 450 * kG},
    {"B200", "SXM (HGX B200), HBM3e (memory: marketing size)", 180 * kGiB, 180 * kGiB,
     75 * kT, 1100 * kT, 2250 * kT, 2250 * kT, 4500 * kT, 7700 * kG, kLaunchNs, 100, 148, 2048, 900 * kG},
    {"GB200", "Grace Blackwell (NVL72), HBM3e (memory: marketing size)", 186 * kGiB, 186 * kGiB,
     80 * kT, 1250 * kT, 2500 * kT, 2500 * kT, 5000 * kT, 8000 * kG, kLaunchNs, 100, 148, 2048, 900 * kG},
    {"H100-PCIe", "PCIe, HBM2e (memory: the SXM5 part's runtime total, est.)", 80 * kGiB, 85'045'477'376ULL,
     51 * kT, 378 * kT, 756.5 * kT, 756.5 * kT, 1513 * kT, 2000 * kG, kLaunchNs, 90, 114, 2048, 64 * kG},
    {"H100-NVL", "PCIe + NVLink bridge, HBM3", 94 * kGiB, 95'232ULL * kMiB,
     60 * kT, 417.5 * kT, 835.5 * kT, 835.5 * kT, 1670.5 * kT, 3900 * kG, kLaunchNs, 90, 132, 2048, 300 * kG},
    {"A100-40GB-PCIe", "PCIe, HBM2 (memory: the SXM4 part's runtime total, est.)", 40 * kGiB,
     42'405'855'232ULL,
     19.5 * kT, 156 * kT, 312 * kT, 312 * kT, 0, 1555 * kG, kLaunchNs, 80, 108, 2048, 32 * kG},
    {"A100-80GB-PCIe", "PCIe, HBM2e (memory: the SXM4 part's runtime total, est.)", 80 * kGiB,
     85'100'068'864ULL,
     19.5 * kT, 156 * kT, 312 * kT, 312 * kT, 0, 1935 * kG, kLaunchNs, 80, 108, 2048, 32 * kG},
    {"L40", "PCIe, GDDR6", 48 * kGiB, 45'466ULL * kMiB,
     90.5 * kT, 90.5 * kT, 181 * kT, 181 * kT, 362 * kT, 864 * kG, kLaunchNs, 89, 142, 1536, 32 * kG},
    {"A10", "PCIe, GDDR6", 24 * kGiB, 22'518ULL * kMiB,
     31.2 * kT, 62.5 * kT, 125 * kT, 125 * kT, 0, 600 * kG, kLaunchNs, 86, 72, 1536, 32 * kG},
    {"RTX-PRO-6000", "Blackwell, GDDR7", 96 * kGiB, 97'249ULL * kMiB,
     125 * kT, 250 * kT, 500 * kT, 500 * kT, 1000 * kT, 1792 * kG, kLaunchNs, 120, 188, 1536, 64 * kG},
    {"B300", "SXM (HGX B300), HBM3e (memory: marketing size)", 288 * kGiB, 288 * kGiB,
     75 * kT, 1100 * kT, 2250 * kT, 2250 * kT, 4500 * kT, 8000 * kG, kLaunchNs, 103, 148, 2048, 900 * kG},
    {"GB300", "Grace Blackwell Ultra (NVL72), HBM3e (memory: marketing size)", 288 * kGiB, 288 * kGiB,
     75 * kT, 1100 * kT, 2250 * kT, 2250 * kT, 4500 * kT, 8000 * kG, kLaunchNs, 103, 148, 2048, 900 * kG},
    {"MI250X-GCD", "AMD Instinct, one of two GCDs, HBM2e (memory: marketing size)", 64 * kGiB, 64 * kGiB,
     23.95 * kT, 0, 191.5 * kT, 191.5 * kT, 0, 1600 * kG, kLaunchNs, 90, 110, 2048, 50 * kG},
    {"MI300X", "AMD Instinct OAM, HBM3 (memory: marketing size)", 192 * kGiB, 192 * kGiB,
     81.7 * kT, 653.7 * kT, 1307.4 * kT, 1307.4 * kT, 2614.9 * kT, 5300 * kG, kLaunchNs, 94, 304, 2048, 64 * kG},
    {"MI325X", "AMD Instinct OAM, HBM3E (memory: marketing size)", 256 * kGiB, 256 * kGiB,
     81.7 * kT, 653.7 * kT, 1307.4 * kT, 1307.4 * kT, 2614.9 * kT, 6000 * kG, kLaunchNs, 94, 304, 2048, 64 * kG},
};

// Alias -> canonical name. Keys are normalized (see normalize()). "a100" means the 80GB part (it replaced
// the 40GB one in the market); "v100" means the 16GB part (the common cloud instance).
const std::vector<std::pair<std::string_view, std::string_view>> kAliases = {
    {"a100", "A100-80GB"},          {"a100sxm480gb", "A100-80GB"}, {"a100sxm440gb", "A100-40GB"},
    {"a10040g", "A100-40GB"},       {"a10080g", "A100-80GB"},      {"h100", "H100-80GB"},
    {"h100sxm", "H100-80GB"},       {"h100sxm5", "H100-80GB"},     {"h10080gbhbm3", "H100-80GB"},
    {"h200", "H200-141GB"},         {"h200sxm", "H200-141GB"},     {"4090", "RTX-4090"},
    {"v100", "V100-16GB"},          {"v100sxm216gb", "V100-16GB"}, {"v100sxm232gb", "V100-32GB"},
    {"v10016g", "V100-16GB"},       {"v10032g", "V100-32GB"},
    {"l40s", "L40S"},               {"a10g", "A10G"},             {"3090", "RTX-3090"},
    {"5090", "RTX-5090"},           {"a6000", "RTX-A6000"},       {"rtxa6000", "RTX-A6000"},
    {"rtx6000ada", "RTX-6000-Ada"}, {"rtx6000adageneration", "RTX-6000-Ada"},
    {"h200nvl", "H200-NVL"},        {"b200", "B200"},             {"gb200", "GB200"},
    {"mi250x", "MI250X-GCD"},       {"amdinstinctmi250x", "MI250X-GCD"},
    {"mi300x", "MI300X"},           {"amdinstinctmi300x", "MI300X"},
    {"mi325x", "MI325X"},           {"amdinstinctmi325x", "MI325X"},
    {"h100pcie", "H100-PCIe"},      {"h100nvl", "H100-NVL"},       {"a100pcie40gb", "A100-40GB-PCIe"},
    {"a10080gbpcie", "A100-80GB-PCIe"},                            {"l40", "L40"},
    {"a10", "A10"},                 {"rtxpro6000", "RTX-PRO-6000"},
    {"rtxpro6000blackwellworkstationedition", "RTX-PRO-6000"},
    {"rtxpro6000blackwellserveredition", "RTX-PRO-6000"},
    {"rtxpro6000blackwellmaxqworkstationedition", "RTX-PRO-6000"},
    {"b300", "B300"},               {"gb300", "GB300"},
};
// clang-format on

// Lower case, letters and digits only, without a leading vendor/brand word: "NVIDIA GeForce RTX 4090" ->
// "rtx4090", "Tesla V100-SXM2-16GB" -> "v100sxm216gb".
std::string normalize(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  for (const std::string_view prefix : {"nvidia", "tesla", "geforce"}) {
    if (out.size() > prefix.size() && out.starts_with(prefix)) {
      out.erase(0, prefix.size());
    }
  }
  return out;
}

const GpuSpec* find_canonical(std::string_view key) {
  for (const GpuSpec& gpu : kGpus) {
    if (normalize(gpu.name) == key) {
      return &gpu;
    }
  }
  return nullptr;
}

}  // namespace

std::string_view compute_dtype_name(ComputeDType dtype) {
  switch (dtype) {
    case ComputeDType::kFp32:
      return "fp32";
    case ComputeDType::kTf32:
      return "tf32";
    case ComputeDType::kFp16:
      return "fp16";
    case ComputeDType::kBf16:
      return "bf16";
    case ComputeDType::kFp8:
      return "fp8";
  }
  SIM_ASSERT(false && "unknown ComputeDType");
  return "";
}

ComputeDType parse_compute_dtype(std::string_view text) {
  const std::string key = normalize(text);
  if (key == "fp32" || key == "float32") {
    return ComputeDType::kFp32;
  }
  if (key == "tf32") {
    return ComputeDType::kTf32;
  }
  if (key == "fp16" || key == "float16" || key == "half") {
    return ComputeDType::kFp16;
  }
  if (key == "bf16" || key == "bfloat16") {
    return ComputeDType::kBf16;
  }
  if (key == "fp8") {
    return ComputeDType::kFp8;
  }
  throw InputError(
      fmt::format("dtype: unknown compute dtype '{}' (known: fp32, tf32, fp16, bf16, fp8)", text));
}

double GpuSpec::peak_flops_per_s(ComputeDType dtype) const {
  double flops = 0;
  switch (dtype) {
    case ComputeDType::kFp32:
      flops = fp32_flops_per_s;
      break;
    case ComputeDType::kTf32:
      flops = tf32_flops_per_s > 0 ? tf32_flops_per_s : fp32_flops_per_s;
      break;
    case ComputeDType::kFp16:
      flops = fp16_flops_per_s;
      break;
    case ComputeDType::kBf16:
      flops = bf16_flops_per_s > 0 ? bf16_flops_per_s : fp32_flops_per_s;
      break;
    case ComputeDType::kFp8:
      flops = fp8_flops_per_s > 0 ? fp8_flops_per_s : fp16_flops_per_s;
      break;
  }
  SIM_ASSERT(flops > 0);
  return flops;
}

const std::vector<GpuSpec>& gpu_table() { return kGpus; }

std::string known_gpu_names() {
  std::string names;
  for (const GpuSpec& gpu : kGpus) {
    names += names.empty() ? "" : ", ";
    names += gpu.name;
  }
  return names;
}

const GpuSpec& find_gpu(std::string_view name) {
  const std::string key = normalize(name);
  if (const GpuSpec* gpu = find_canonical(key)) {
    return *gpu;
  }
  for (const auto& [alias, canonical] : kAliases) {
    if (alias == key) {
      const GpuSpec* gpu = find_canonical(normalize(canonical));
      SIM_ASSERT(gpu != nullptr);
      return *gpu;
    }
  }
  std::string aliases;
  for (const auto& [alias, canonical] : kAliases) {
    if (alias.size() <= 5) {  // the short ones users type; the rest are PyTorch device names
      aliases += aliases.empty() ? "" : ", ";
      aliases += alias;
    }
  }
  throw InputError(
      fmt::format("--gpu: unknown GPU '{}' (known: {}; aliases: {}; PyTorch device names such as "
                  "'NVIDIA A100-SXM4-80GB' are accepted too)",
                  name, known_gpu_names(), aliases));
}

}  // namespace vramsim
