#include "sim/inference/vllm_pipeline_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "sim/core/error.h"

namespace vramsim {
namespace {

// VLLM_PP_LAYER_PARTITION: `[int(layer) for layer in partition_list_str.split(",")]`.
std::vector<std::int64_t> parse_partition(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view item(text.data() + begin, end - begin);
    std::int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc{} || ptr != item.data() + item.size() || value < 0 ||
        value > (std::int64_t{1} << 24)) {
      throw InputError(fmt::format("--vllm-pp-layer-partition: Invalid partition string: {}", text));
    }
    out.push_back(value);
    if (end == text.size()) {
      return out;
    }
    begin = end + 1;
  }
}

}  // namespace

std::vector<VllmPipelineStage> vllm_pipeline_stages(std::int64_t num_hidden_layers, int pp,
                                                    const std::string& partition) {
  if (pp < 1 || num_hidden_layers < 1) {
    throw InputError(fmt::format("--pp: {} stages of a model of {} layers", pp, num_hidden_layers));
  }
  std::vector<std::int64_t> partitions;
  if (!partition.empty()) {
    partitions = parse_partition(partition);
    std::int64_t sum = 0;
    for (const std::int64_t p : partitions) {
      sum += p;
    }
    if (partitions.size() != static_cast<std::size_t>(pp)) {  // vLLM's own messages
      throw InputError(fmt::format("--vllm-pp-layer-partition: len(partitions)={} does not match pp_size={}.",
                                   partitions.size(), pp));
    }
    if (sum != num_hidden_layers) {
      throw InputError(
          fmt::format("--vllm-pp-layer-partition: sum(partitions)={} does not match num_hidden_layers={}.",
                      sum, num_hidden_layers));
    }
  } else {
    partitions.assign(static_cast<std::size_t>(pp), num_hidden_layers / pp);
    const std::int64_t remaining = num_hidden_layers % pp;
    for (std::int64_t i = 2; i < remaining + 2; ++i) {  // partitions[-i] += 1
      partitions[static_cast<std::size_t>(pp - i)] += 1;
    }
  }
  std::vector<VllmPipelineStage> stages;
  std::int64_t start = 0;
  for (int s = 0; s < pp; ++s) {
    VllmPipelineStage st;
    st.stage = s;
    st.start_layer = start;
    st.end_layer = start + partitions[static_cast<std::size_t>(s)];
    st.first = s == 0;
    st.last = s == pp - 1;
    if (st.layers() == 0) {
      throw InputError(fmt::format(
          "--pp: stage {} of {} holds no decoder layer ({} layers); a stage without layers is not modelled "
          "(vramsim)",
          s, pp, num_hidden_layers));
    }
    start = st.end_layer;
    stages.push_back(st);
  }
  return stages;
}

}  // namespace vramsim
