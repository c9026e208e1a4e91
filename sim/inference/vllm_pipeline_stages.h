// vLLM's pipeline parallelism in serving (`--pipeline-parallel-size N`, vramsim's `--pp N` with --kv-cache
// paged): which decoder layers each stage holds and what else it holds, as vLLM V1 splits a model.
//
//   layers      vllm/distributed/utils.py get_pp_indices: num_hidden_layers // pp layers a stage; the
//               remainder r goes one layer each to the stages before the last, counting back from the one
//               before it (`for i in range(2, r + 2): partitions[-i] += 1`), so the first and last
//               stages, which hold the embedding and the head, get the extra layers last. The environment
//               variable VLLM_PP_LAYER_PARTITION ("16,16") replaces the split; vLLM refuses a list whose
//               length is not pp or whose sum is not the layer count (its messages below).
//   embedding   the models' __init__ (llama.py LlamaModel and every model of the same shape):
//               `if get_pp_group().is_first_rank or (config.tie_word_embeddings and
//               get_pp_group().is_last_rank): self.embed_tokens = VocabParallelEmbedding(...)` else
//               PPMissingLayer: the first stage, and the last too when the head is tied to it.
//   head, norm  LlamaForCausalLM: `if get_pp_group().is_last_rank: self.lm_head = ParallelLMHead(...)`
//               (tied: lm_head.tie_weights(embed_tokens), one table); LlamaModel's final norm likewise.
// Pure arithmetic: no model, no allocator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vramsim {

struct VllmPipelineStage {
  int stage = 0;
  std::int64_t start_layer = 0;  // [start_layer, end_layer), as get_pp_indices returns it
  std::int64_t end_layer = 0;
  bool first = false;  // holds the embedding (get_pp_group().is_first_rank)
  bool last = false;   // holds the final norm and lm_head, runs the sampler (is_last_rank)
  std::int64_t layers() const { return end_layer - start_layer; }
};

// Every stage of a model of `num_hidden_layers` layers split over `pp` stages. `partition` is
// VLLM_PP_LAYER_PARTITION's text ("" : unset). Throws InputError with vLLM's message for a partition it
// refuses, and for a stage left without a layer (vLLM's make_layers would build an empty stage: not
// modelled).
std::vector<VllmPipelineStage> vllm_pipeline_stages(std::int64_t num_hidden_layers, int pp,
                                                    const std::string& partition);

}  // namespace vramsim
