// Follows megatron/core/pipeline_parallel/schedules.py (get_pp_rank_microbatches and the two
// forward_backward_pipelining_* functions) with microbatch_group_size_per_vp_stage at its default, the
// pipeline size.
#include "sim/parallel/pipeline_parallel.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {
namespace {

constexpr std::array<std::pair<std::string_view, PipelineSchedule>, 2> kSchedules{{
    {"1f1b", PipelineSchedule::k1F1B},
    {"interleaved", PipelineSchedule::kInterleaved},
}};

int chunks_per_rank(const PipelineOptions& o) {
  return o.schedule == PipelineSchedule::kInterleaved ? o.virtual_stages : 1;
}

}  // namespace

void validate(const PipelineOptions& o, int micro_batches) {
  if (o.stages < 1 || o.stages > 1024) {
    throw InputError(fmt::format("--pp: {} is not in 1..1024", o.stages));
  }
  if (o.stage < 0 || o.stage >= o.stages) {
    throw InputError(
        fmt::format("--pp-stage: {} is not a stage of {} (0..{})", o.stage, o.stages, o.stages - 1));
  }
  if (o.schedule != PipelineSchedule::kInterleaved) {
    return;
  }
  if (o.stages < 2) {
    throw InputError("--pp-schedule interleaved: needs --pp 2 or more");
  }
  if (o.virtual_stages < 2 || o.virtual_stages > 1024) {
    throw InputError(
        fmt::format("--virtual-stages: the interleaved schedule needs 2..1024 model chunks per GPU, got {}",
                    o.virtual_stages));
  }
  // One step's schedule holds 2 x micro-batches x chunks actions: bounded like every other pass count.
  if (static_cast<std::int64_t>(micro_batches) * o.virtual_stages > kMaxPasses) {
    throw InputError(
        fmt::format("--micro-batches x --virtual-stages: {} x {} chunk passes per step is more "
                    "than the {} vramsim simulates",
                    micro_batches, o.virtual_stages, kMaxPasses));
  }
  // Megatron: "number of microbatches is not divisible by pipeline-model-parallel-size when using
  // interleaved schedule".
  if (micro_batches % o.stages != 0) {
    throw InputError(
        fmt::format("--micro-batches: the interleaved schedule needs a multiple of --pp {}, got {}", o.stages,
                    micro_batches));
  }
}

std::vector<PipelineChunk> pipeline_chunks(int n_layers, const PipelineOptions& o) {
  const int v = chunks_per_rank(o);
  const int virtual_stages = o.stages * v;
  if (n_layers % virtual_stages != 0) {
    throw InputError(fmt::format("--pp: {} layers do not split evenly over {} stages{}", n_layers, o.stages,
                                 v > 1 ? fmt::format(" x {} model chunks", v) : std::string()));
  }
  const int per_chunk = n_layers / virtual_stages;
  std::vector<PipelineChunk> chunks(static_cast<std::size_t>(v));
  for (int c = 0; c < v; ++c) {
    const int virtual_stage = c * o.stages + o.stage;
    PipelineChunk& k = chunks[static_cast<std::size_t>(c)];
    k.first_layer = virtual_stage * per_chunk;
    k.layers = per_chunk;
    k.embeddings = virtual_stage == 0;
    k.head = virtual_stage == virtual_stages - 1;
  }
  return chunks;
}

std::vector<PipelineAction> pipeline_schedule(const PipelineOptions& o, int micro_batches) {
  const int p = o.stages;
  const int v = chunks_per_rank(o);
  const int total = micro_batches * v;  // virtual micro-batches: one chunk's forward (or backward) of one
  int warmup = 0;
  if (o.schedule == PipelineSchedule::kInterleaved) {
    warmup = (p - o.stage - 1) * 2 + (v - 1) * p;
  } else {
    warmup = p - o.stage - 1;
  }
  warmup = std::min(warmup, total);
  // Virtual micro-batch k runs chunk (k mod p*v) / p (backward: the chunks in reverse) on micro-batch
  // (k / (p*v)) * p + k mod p; without interleaving that is chunk 0 on micro-batch k.
  const auto action = [&](int k, bool forward) {
    PipelineAction a;
    a.forward = forward;
    const int chunk = (k % (p * v)) / p;
    a.chunk = forward ? chunk : v - 1 - chunk;
    a.micro_batch = v == 1 ? k : (k / (p * v)) * p + k % p;
    return a;
  };
  std::vector<PipelineAction> order;
  order.reserve(static_cast<std::size_t>(2 * total));
  for (int k = 0; k < warmup; ++k) {
    order.push_back(action(k, true));
  }
  for (int k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
    order.push_back(action(warmup + k, true));
    order.push_back(action(k, false));
  }
  for (int k = total - warmup; k < total; ++k) {  // cool-down
    order.push_back(action(k, false));
  }
  return order;
}

PipelineSchedule parse_pipeline_schedule(std::string_view text, std::string_view option) {
  for (const auto& [name, s] : kSchedules) {
    if (name == text) {
      return s;
    }
  }
  throw InputError(fmt::format("{}: unknown schedule '{}' (known: 1f1b, interleaved)", option, text));
}

std::string_view pipeline_schedule_name(PipelineSchedule s) {
  for (const auto& [name, value] : kSchedules) {
    if (value == s) {
      return name;
    }
  }
  return "?";
}

}  // namespace vramsim
