// How the wrapper code Inductor generates for one compiled graph (torch/_inductor/codegen/wrapper.py) uses
// device memory: a list of kernels in program order, each allocating the buffers it writes and reading
// buffers made earlier (or graph inputs). The wrapper frees a buffer after the last kernel that reads it
// (`del buf3`) unless the graph returns it; a buffer it frees goes to a pool, and a later allocation of the
// same dtype and size takes it instead of allocating (`buf7 = buf3; del buf3  # reuse`, MemoryPlanningState
// keyed by buffer_reuse_key). A pointwise kernel may write its output into an input that dies at that very
// kernel (in-place reuse). Graph inputs are freed at their last use when the graph owns them (AOTAutograd's
// backward steals its saved tensors) and are never reused.
//
// The plan is made for the whole graph first (whether a dead buffer is reused decides whether its `del` is
// emitted), then the kernels are emitted into the tape as ops with their allocations and frees.
#pragma once

#include <string>
#include <vector>

#include "sim/graph/eager_tape.h"

namespace vramsim::inductor {

struct Buffer {
  std::string name;
  Bytes size_bytes = 0;
  DType dtype = DType::kFloat32;
  TensorCategory category = TensorCategory::kTemporary;
  int layer = -1;
  // A graph input: already allocated (`storage`). When `owned` the graph holds one reference to it and
  // drops it after its last use (or after the last kernel when no kernel reads it).
  TensorId storage = kNoTensor;
  bool owned = false;
  bool graph_output = false;  // returned: never freed; allocated fresh (the simulator does not let it reuse)
};

struct Kernel {
  std::string name;
  std::string kind;  // "triton" for a generated kernel, the aten op of an extern kernel
  double flops = 0.0;
  int layer = -1;
  std::vector<int> writes;           // buffers it allocates (indices into the plan's buffers)
  std::vector<int> reads;            // buffers it reads
  std::vector<Bytes> scratch_bytes;  // extern kernels' workspace, freed when the kernel is done
  bool in_place_ok = false;          // a Triton kernel: an output may take a dying input's buffer
};

struct GraphPlan {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  // CUDA graphs (cudagraph trees): every allocation of the graph, scratch too, comes from the private pool.
  bool graph_pool = false;
};

// Emits `plan` into the tape as ops. Returns, per buffer, its storage (kNoTensor for a buffer no kernel
// writes); graph outputs come back holding one reference each (the caller's), graph inputs are released as
// described above.
std::vector<TensorId> emit(EagerTape& tape, const GraphPlan& plan);

}  // namespace vramsim::inductor
