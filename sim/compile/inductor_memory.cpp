#include "sim/compile/inductor_memory.h"

#include <map>
#include <tuple>

#include "sim/core/assert.h"

namespace vramsim::inductor {
namespace {

constexpr int kNever = -1;

// What the wrapper does with one buffer: the kernel that writes it, the buffer whose memory it takes (or -1),
// and the kernel after which it is deleted (kNever: returned, reused, or an input released at the end).
struct Fate {
  int written_at = kNever;
  int reuses = -1;
  int last_read = kNever;
  int deleted_after = kNever;
  bool reused = false;
};

std::vector<Fate> plan_fates(const GraphPlan& plan) {
  const std::size_t n = plan.buffers.size();
  std::vector<Fate> fate(n);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    for (int b : plan.kernels[k].writes) {
      SIM_ASSERT(fate[static_cast<std::size_t>(b)].written_at == kNever);
      fate[static_cast<std::size_t>(b)].written_at = static_cast<int>(k);
      fate[static_cast<std::size_t>(b)].last_read =
          std::max(fate[static_cast<std::size_t>(b)].last_read, static_cast<int>(k));
    }
    for (int b : plan.kernels[k].reads) {
      fate[static_cast<std::size_t>(b)].last_read = static_cast<int>(k);
    }
  }
  // The pool of dead buffers, by reuse key (dtype, size), most recently freed first.
  std::map<std::tuple<int, Bytes>, std::vector<int>> pool;
  std::vector<std::vector<int>> dying(plan.kernels.size());
  for (std::size_t b = 0; b < n; ++b) {
    const Buffer& buf = plan.buffers[b];
    if (fate[b].written_at != kNever && !buf.graph_output && buf.storage == kNoTensor) {
      dying[static_cast<std::size_t>(fate[b].last_read)].push_back(static_cast<int>(b));
    }
  }
  const auto key = [&plan](int b) {
    const Buffer& buf = plan.buffers[static_cast<std::size_t>(b)];
    return std::make_tuple(static_cast<int>(buf.dtype), buf.size_bytes);
  };
  const auto release = [&](std::size_t k) {
    for (int b : dying[k]) {
      pool[key(b)].push_back(b);
    }
    dying[k].clear();
  };
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const Kernel& kern = plan.kernels[k];
    if (kern.in_place_ok) {
      // inputs that die here, freed before the kernel's outputs are planned: one may become an output
      std::vector<int> keep;
      for (int b : dying[k]) {
        const bool read_here = std::find(kern.reads.begin(), kern.reads.end(), b) != kern.reads.end() &&
                               fate[static_cast<std::size_t>(b)].written_at != static_cast<int>(k);
        if (read_here) {
          pool[key(b)].push_back(b);
        } else {
          keep.push_back(b);
        }
      }
      dying[k] = std::move(keep);
    }
    for (int b : kern.writes) {
      if (plan.buffers[static_cast<std::size_t>(b)].graph_output) {
        continue;  // kept apart so that a returned buffer keeps its own name and category in the bill
      }
      auto it = pool.find(key(b));
      if (it != pool.end() && !it->second.empty()) {
        const int old = it->second.back();
        it->second.pop_back();
        fate[static_cast<std::size_t>(b)].reuses = old;
        fate[static_cast<std::size_t>(old)].reused = true;
      }
    }
    release(k);
  }
  for (std::size_t b = 0; b < n; ++b) {
    const Buffer& buf = plan.buffers[b];
    if (buf.storage != kNoTensor) {
      if (buf.owned) {
        fate[b].deleted_after =
            fate[b].last_read != kNever ? fate[b].last_read : static_cast<int>(plan.kernels.size()) - 1;
      }
    } else if (fate[b].written_at != kNever && !buf.graph_output && !fate[b].reused) {
      fate[b].deleted_after = fate[b].last_read;
    }
  }
  return fate;
}

}  // namespace

std::vector<TensorId> emit(EagerTape& tape, const GraphPlan& plan) {
  const std::vector<Fate> fate = plan_fates(plan);
  std::vector<TensorId> storage(plan.buffers.size(), kNoTensor);
  std::vector<std::vector<int>> deletes(plan.kernels.size());
  for (std::size_t b = 0; b < plan.buffers.size(); ++b) {
    storage[b] = plan.buffers[b].storage;
    if (fate[b].deleted_after != kNever) {
      deletes[static_cast<std::size_t>(fate[b].deleted_after)].push_back(static_cast<int>(b));
    }
  }
  const int saved_layer = tape.layer();
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const Kernel& kern = plan.kernels[k];
    tape.set_layer(kern.layer);
    tape.begin_op(kern.name, kern.kind, kern.flops);
    for (int b : kern.writes) {
      const Buffer& buf = plan.buffers[static_cast<std::size_t>(b)];
      const int old = fate[static_cast<std::size_t>(b)].reuses;
      if (old >= 0) {
        storage[static_cast<std::size_t>(b)] = storage[static_cast<std::size_t>(old)];
        continue;
      }
      storage[static_cast<std::size_t>(b)] = tape.allocate(buf.name, buf.size_bytes, buf.dtype, buf.category);
      if (plan.graph_pool) {
        tape.set_graph_pool(storage[static_cast<std::size_t>(b)]);
      }
    }
    for (int b : kern.reads) {
      tape.use_once(storage[static_cast<std::size_t>(b)]);
    }
    std::vector<TensorId> scratch;
    for (Bytes s : kern.scratch_bytes) {
      scratch.push_back(tape.allocate(kern.name + ".scratch", s, DType::kUInt8, TensorCategory::kTemporary));
      if (plan.graph_pool) {
        tape.set_graph_pool(scratch.back());
      }
    }
    for (TensorId s : scratch) {
      tape.release(s);
    }
    for (int b : deletes[k]) {
      tape.release(storage[static_cast<std::size_t>(b)]);
    }
  }
  tape.set_layer(saved_layer);
  return storage;
}

}  // namespace vramsim::inductor
