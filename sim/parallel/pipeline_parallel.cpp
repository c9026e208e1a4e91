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

constexpr std::array<std::pair<std::string_view, PipelineSchedule>, 3> kSchedules{{
    {"1f1b", PipelineSchedule::k1F1B},
    {"interleaved", PipelineSchedule::kInterleaved},
    {"gpipe", PipelineSchedule::kGPipe},
}};

constexpr std::array<std::pair<std::string_view, PipelineSplit>, 2> kSplits{{
    {"megatron", PipelineSplit::kMegatron},
    {"torchtitan", PipelineSplit::kTorchtitan},
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

std::vector<int> layers_per_virtual_stage(int n_layers, const PipelineOptions& o) {
  const int v = chunks_per_rank(o);
  const int virtual_stages = o.stages * v;
  if (o.split == PipelineSplit::kMegatron) {
    if (n_layers % virtual_stages != 0) {
      throw InputError(
          fmt::format("--pp: {} layers do not split evenly over {} stages{} (Megatron; "
                      "--pp-split torchtitan splits them unevenly)",
                      n_layers, o.stages, v > 1 ? fmt::format(" x {} model chunks", v) : std::string()));
    }
    return std::vector<int>(static_cast<std::size_t>(virtual_stages), n_layers / virtual_stages);
  }
  // torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part(num_stages, num_layers,
  // input_weight, output_weight): the embeddings weigh input_weight layers and the norm + output
  // output_weight; the effective layers are dealt evenly, the first `extra` stages one more; its ValueErrors.
  const int in_w = o.first_stage_less_layers;
  const int out_w = o.last_stage_less_layers;
  if (in_w < 0 || out_w < 0 || in_w > n_layers || out_w > n_layers) {
    throw InputError(
        fmt::format("--pp-first-stage-less-layers / --pp-last-stage-less-layers: {} / {} is not "
                    "in 0..{} (the model's layers)",
                    in_w, out_w, n_layers));
  }
  if (virtual_stages == 1) {
    return {n_layers};
  }
  const int effective = n_layers + in_w + out_w;
  if (virtual_stages > effective) {
    throw InputError(
        fmt::format("--pp: torchtitan refuses it: \"Number of stages ({}) cannot be greater "
                    "than effective layers ({})\"",
                    virtual_stages, effective));
  }
  const int per_stage = effective / virtual_stages;
  const int extra = effective % virtual_stages;
  if (in_w > per_stage || out_w > per_stage) {
    throw InputError(fmt::format(
        "--pp: torchtitan refuses it: \"{} ({}) exceeds minimum layers per stage "
        "({}).\"",
        in_w > per_stage ? "input_weight" : "output_weight", in_w > per_stage ? in_w : out_w, per_stage));
  }
  std::vector<int> layers(static_cast<std::size_t>(virtual_stages));
  int left = n_layers;
  for (int s = 0; s < virtual_stages; ++s) {
    int take = per_stage + (s < extra ? 1 : 0);
    if (s == 0) {
      take -= in_w;
    } else if (s == virtual_stages - 1) {
      take -= out_w;
    }
    take = std::min(take, left);  // "if current_layer < num_layers"
    layers[static_cast<std::size_t>(s)] = take;
    left -= take;
  }
  return layers;
}

std::vector<PipelineChunk> pipeline_chunks(int n_layers, const PipelineOptions& o) {
  const int v = chunks_per_rank(o);
  const int virtual_stages = o.stages * v;
  const std::vector<int> layers = layers_per_virtual_stage(n_layers, o);
  std::vector<int> first(layers.size(), 0);
  for (std::size_t s = 1; s < layers.size(); ++s) {
    first[s] = first[s - 1] + layers[s - 1];
  }
  std::vector<PipelineChunk> chunks(static_cast<std::size_t>(v));
  for (int c = 0; c < v; ++c) {
    // Megatron's and torchtitan's "loop" placement: chunk c of rank r is virtual stage c * stages + r.
    const int virtual_stage = c * o.stages + o.stage;
    PipelineChunk& k = chunks[static_cast<std::size_t>(c)];
    k.first_layer = first[static_cast<std::size_t>(virtual_stage)];
    k.layers = layers[static_cast<std::size_t>(virtual_stage)];
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
  } else if (o.schedule == PipelineSchedule::kGPipe) {
    warmup = total;  // ScheduleGPipe: every micro-batch's forward, then every backward in the same order
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
  if (text == "zero-bubble" || text == "interleaved-zero-bubble" || text == "zbv") {
    // torch/distributed/pipelining/schedules.py ScheduleInterleavedZeroBubble / ScheduleZBVZeroBubble: each
    // backward is split into the input gradient (stage.py backward_one_chunk with full_backward=False) and
    // the weight gradient, run later (backward_weight_one_chunk), so what the weight gradients need stays
    // alive between the two actions; vramsim's backward computes both at once.
    throw InputError(
        fmt::format("{} {}: zero-bubble schedules (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble) "
                    "defer each weight gradient to a later action: not modelled (vramsim)",
                    option, text));
  }
  throw InputError(fmt::format("{}: unknown schedule '{}' (known: 1f1b, interleaved, gpipe)", option, text));
}

PipelineSplit parse_pipeline_split(std::string_view text, std::string_view option) {
  for (const auto& [name, s] : kSplits) {
    if (name == text) {
      return s;
    }
  }
  throw InputError(fmt::format("{}: unknown split '{}' (known: megatron, torchtitan)", option, text));
}

std::string_view pipeline_split_name(PipelineSplit s) {
  for (const auto& [name, value] : kSplits) {
    if (value == s) {
      return name;
    }
  }
  return "?";
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
