// torch.compile with the Inductor backend, as it changes device memory (--compile):
//   1. Dynamo captures the code's ops into one graph (EagerTape::begin_capture); nothing runs eagerly.
//   2. AOTAutograd traces the joint forward+backward graph and splits it with the min-cut partitioner
//      (aot_partitioner.h): the forward returns its outputs plus the values the backward needs; every other
//      value the backward reads is recomputed inside the backward.
//   3. Inductor fuses pointwise ops, reductions, views and indexing into Triton kernels: a value is a buffer
//      in memory only if a kernel that cannot fuse (a matmul, an attention kernel: extern kernels) reads or
//      writes it, if the graph returns or saves it, or if fusing it would re-read too many buffers
//      (config.realize_reads_threshold = 4 for a value with several users, realize_acc_reads_threshold = 8).
//      Its wrapper code frees buffers at their last use and hands freed ones to later buffers of the same
//      size (inductor_memory.h).
//   4. The compiled backward (one autograd node, CompiledFunction) runs the backward graph the same way:
//      gradients of pointwise chains fuse, extern kernels (the matmuls' backward) write fresh buffers, saved
//      values are freed at their last use in the backward, parameter gradients are the graph's outputs.
//   5. The first call of a kernel with several launch configurations (Inductor's reductions) benchmarks them
//      (triton_heuristics.autotune_to_one_config -> triton.testing.do_bench), which allocates Triton's 256
//      MiB L2-flush buffer for each benchmark; a process that already ran the step (--warm) has them tuned.
//
// What the model leaves out (and the README says): reduction outputs are fused like pointwise ones (Inductor
// realizes them, rows-sized buffers); the flops of fused ops are not given to the time engine; graph
// outputs never take a dead buffer's memory (Inductor lets them).
#pragma once

#include <functional>
#include <set>
#include <string>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

// What a process keeps between compiled calls: the kernels already autotuned.
struct InductorProcess {
  CompileMode mode = CompileMode::kDefault;
  bool autotuned_before = false;  // a warm process: every kernel of this step already tuned
  std::set<std::string> tuned;    // kernel signatures tuned so far
};

// Triton's do_bench L2-flush buffer (triton/backends/nvidia/driver.py get_empty_cache_for_benchmark: 256 MiB
// of int32), seen at 268,435,456 B in the compiled kkaitlyn111 recordings.
inline constexpr Bytes kTritonBenchmarkFlushBytes = 256 * kMiB;

// Runs `body` (the eager code of the compiled function) under torch.compile and returns its output variable.
// The tape must have grad mode as the call sees it; `name` names the graph's ops.
VarId compiled_call(EagerTape& tape, const std::string& name, const std::function<VarId()>& body,
                    InductorProcess& process);

}  // namespace vramsim
