// The report of predict and trace (see prediction_report.h).
#include "sim/cli/prediction_report.h"

#include <fstream>

#include "sim/core/error.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/size_format.h"

namespace vramsim::cli {
namespace {

nlohmann::ordered_json opt(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

std::string b(std::int64_t v) { return format_bytes_short(static_cast<Bytes>(v < 0 ? -v : v)); }
std::string sb(std::int64_t v) { return fmt::format("{}{}", v < 0 ? "-" : "", b(v)); }

void line(std::string_view label, std::int64_t v, std::string_view note = "") {
  fmt::print("  {:<22}{:>12}  {:>16} B{}{}\n", label, sb(v), v, note.empty() ? "" : "  ", note);
}

// 158656 -> "158,656", as vLLM's "{:,}" prints token counts.
std::string thousands(std::int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return out;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

// With --pp (or engine replicas): every stage's own start-up and the one the lines below are of.
void print_v1_stages(const Prediction::Generation::Paged::V1& s, std::int64_t block_size,
                     std::int64_t num_blocks) {
  if (s.pipeline_parallel == 1 && s.data_parallel == 1) {
    return;
  }
  fmt::print("  parallel         pp {}, dp {} (engine replicas, each its own start-up and KV cache)\n",
             s.pipeline_parallel, s.data_parallel);
  for (const auto& st : s.stages) {
    fmt::print(
        "  stage {:<3} layers {:>3}..{:<3} Model loading took {}, torch peak increase {}, non-torch {}, "
        "Available KV cache memory {}: {} blocks\n",
        st.stage, st.start_layer, st.end_layer - 1, gib(st.weights_bytes), gib(st.torch_peak_increase_bytes),
        gib(st.non_torch_increase_bytes), gib(st.available_bytes), thousands(st.num_blocks));
  }
  if (!s.stages.empty()) {
    fmt::print(
        "  stage {} below   the fewest blocks: every stage keeps {} blocks of {} tokens "
        "(get_kv_cache_configs: the smallest num_blocks among the workers){}\n",
        s.stage, thousands(num_blocks), block_size,
        s.intermediate_bytes > 0
            ? fmt::format("; its received hidden_states + residual {}", gib(s.intermediate_bytes))
            : std::string());
  }
}

// profile_run's encoder pass for a vision-language model (vllm_multimodal_budget.h), with vLLM's log line.
void print_v1_encoder(const Prediction::Generation::Paged::V1::Encoder& e,
                      const Prediction::Generation::Paged::V1& s) {
  fmt::print(
      "  Encoder cache will be initialized with a budget of {} tokens, and profiled with {} {} items of the "
      "maximum feature size.\n",
      e.encoder_budget, e.items, e.modality);
  const bool data = e.tp_mode == "data";
  fmt::print(
      "  encoder profile  {} tokens an item, {} tower rows an item; encoder pass {} (pixel_values {}{} + the "
      "tower's widest layer {}); language model pass {} (pixel_values + kept encoder outputs {} + "
      "max(forward "
      "{}, sampler {}))\n",
      e.max_tokens_per_item, e.tower_tokens_per_item, gib(e.encoder_pass_bytes), gib(e.pixel_values_bytes),
      data ? fmt::format(" + this rank's items' copy {}", gib(e.local_pixel_values_bytes)) : std::string(),
      gib(e.tower_layer_bytes), gib(e.language_pass_bytes), gib(e.encoder_outputs_bytes),
      gib(s.forward_peak_bytes), gib(s.sampler_peak_bytes));
  if (data) {
    fmt::print(
        "  mm_encoder_tp_mode data  the whole tower on every rank; this rank runs {} of the {} items, and "
        "keeps every rank's outputs all-gathered ({} ranks x {} items)\n",
        e.items_on_rank, e.items, s.tensor_parallel, e.items_on_rank);
  }
}

// vLLM V1's start-up as its log prints it (gpu_model_runner, gpu_worker, kv_cache_utils), one rank.
void print_v1(const Prediction::Generation& g) {
  const Prediction::Generation::Paged& v = *g.paged;
  const Prediction::Generation::Paged::V1& s = *v.v1;
  fmt::print(
      "  vLLM V1          tp {}, gpu_memory_utilization {}, block_size {}, max_model_len {}, "
      "max_num_batched_tokens {}, max_num_seqs {}, kv_cache_dtype {}{}{}\n",
      s.tensor_parallel, v.gpu_memory_utilization, v.block_size, v.max_model_len, v.max_num_batched_tokens,
      v.max_num_seqs, s.kv_cache_dtype, s.quantization.empty() ? "" : ", quantization " + s.quantization,
      s.dtype.empty() ? "" : ", dtype " + s.dtype + " (two-byte elements, as bf16)");
  const auto row = [](std::string_view name, std::int64_t bytes, std::string_view note) {
    fmt::print("  {:<36}{:>11}  {}\n", name, gib(bytes), note);
  };
  print_v1_stages(s, v.block_size, v.num_gpu_blocks);
  if (s.expert_parallel > 1) {
    fmt::print(
        "  expert parallel  ep {} (tp x dp): {} of the {} experts a MoE layer on this rank, each whole "
        "(determine_expert_map: the first ranks take the remainder)\n",
        s.expert_parallel, s.local_experts, s.global_experts);
  }
  row("Model loading took", s.weights_bytes,
      s.encoder ? fmt::format("this rank's weights and buffers, vision tower and projector {} of them",
                              gib(s.encoder->tower_weights_bytes))
                : std::string("this rank's weights and buffers"));
  if (s.lora_layers > 0) {
    fmt::print("  {:<36}{:>11}  {} LoRA layers x max_loras {} x max_lora_rank {}, in the line above\n",
               "  LoRA adapter slots", gib(s.lora_slot_bytes), s.lora_layers, s.lora_max_loras,
               s.lora_max_rank);
  }
  if (s.encoder) {
    print_v1_encoder(*s.encoder, s);
  }
  row("torch peak memory increase", s.torch_peak_increase_bytes,
      fmt::format("profile run: forward {}, sampler {}, + cuBLAS workspace {}{}", gib(s.forward_peak_bytes),
                  gib(s.sampler_peak_bytes), b(s.cublas_workspace_bytes),
                  s.fused_moe_workspace_bytes > 0
                      ? fmt::format(", + fused-MoE workspace {}", b(s.fused_moe_workspace_bytes))
                      : std::string()));
  row("non-torch forward increase memory", s.non_torch_increase_bytes,
      s.non_torch_measured ? "--vllm-non-torch-increase (measured)"
                           : "buffers set up during the profile run (non_torch_memory.h)");
  row("Total non KV cache memory", s.non_kv_cache_bytes,
      "weights + torch peak increase + non-torch increase");
  row("Available KV cache memory", v.available_bytes,
      fmt::format("requested {} (total x {}) - total non KV cache memory{}", gib(s.requested_bytes),
                  v.gpu_memory_utilization,
                  s.cudagraph_memory_bytes > 0 ? " - estimated CUDA graph memory" : ""));
  fmt::print("  GPU KV cache size: {} tokens  ({} blocks of {} B per layer{})\n",
             thousands(s.kv_cache_tokens), thousands(v.num_gpu_blocks), s.page_size_bytes,
             s.mla ? ", MLA: one latent + rotary key a token" : "");
  if (s.kv_cache_groups > 1 || s.sliding_window > 0 || s.attention_chunk_size > 0) {
    const std::string local =
        s.attention_chunk_size > 0
            ? fmt::format("chunked local attention {} ({} layers)", s.attention_chunk_size,
                          s.chunked_attention_layers)
            : fmt::format("sliding window {} ({} layers)", s.sliding_window, s.sliding_window_layers);
    fmt::print(
        "  KV cache groups  {}: {} full attention, {} {}; {} layers a group{}; "
        "tokens = blocks // groups x block_size\n",
        s.kv_cache_groups, s.full_attention_groups, s.kv_cache_groups - s.full_attention_groups, local,
        s.layers_per_group,
        s.padding_layers > 0 ? fmt::format(", {} padding", s.padding_layers) : std::string());
  }
  fmt::print("  Maximum concurrency for {} tokens per request: {:.2f}x\n", thousands(v.max_model_len),
             s.max_concurrency);
  fmt::print(
      "  serving questions  the longest max_model_len this cache serves one request of: {}; one "
      "max_model_len ({}) request needs gpu_memory_utilization >= {:.4f}\n",
      thousands(s.largest_max_model_len), thousands(v.max_model_len), s.min_gpu_memory_utilization);
  if (s.cudagraph_memory_bytes > 0) {
    // gpu_model_runner.py's "Estimated CUDA graph memory: %.2f GiB total" and gpu_worker.py's equivalence
    fmt::print("  Estimated CUDA graph memory: {} total  (--vllm-cudagraph-memory; subtracted, vLLM 0.21+)\n",
               gib(s.cudagraph_memory_bytes));
    fmt::print(
        "  CUDA graph memory profiling        --gpu-memory-utilization={:.4f} is equivalent to {:.4f} "
        "without "
        "it; {:.4f} keeps the KV cache's size\n",
        v.gpu_memory_utilization, s.utilization_without_graphs, s.utilization_to_keep_cache);
  } else {
    fmt::print(
        "  CUDA graph memory                   not in the budget: captured after the KV cache (vLLM <= "
        "0.20); "
        "0.21+ subtracts its estimate (--vllm-cudagraph-memory)\n");
  }
  for (const NonTorchLine& l : s.non_torch_lines) {
    row(fmt::format("outside torch: {}", l.name), static_cast<std::int64_t>(l.size_bytes),
        l.after_snapshot ? "during the profile run" : "before vLLM's memory snapshot");
  }
  row("process total, before CUDA graphs", s.process_total_bytes,
      "CUDA context + outside torch + weights + KV cache (nvidia-smi)");
  if (!v.refusal.empty()) {
    fmt::print("  serving          vLLM refuses to start: {}\n", v.refusal);
  }
}

// vLLM's paged cache: how the profile run sized it, and what it serves.
void print_v0(const Prediction::Generation& g);

// SGLang's start-up (ModelRunner.init_torch_distributed, profile_max_num_token, init_memory_pool), one rank.
void print_sglang(const Prediction::Generation& g) {
  const Prediction::Generation::Paged& v = *g.paged;
  const Prediction::Generation::Paged::Sglang& s = *v.sglang;
  const std::string why =
      !s.default_fraction ? std::string()
      : s.reserved_mem_mib > 0
          ? fmt::format(" (SGLang {}'s default: 1 - reserved_mem {:.0f} MiB / the GPU's memory)", s.version,
                        s.reserved_mem_mib)
          : fmt::format(" (SGLang {}'s default at this TP size)", s.version);
  fmt::print("  SGLang           mem_fraction_static {}{}, context_len {}, page_size 1\n",
             s.mem_fraction_static, why, thousands(s.context_len));
  const auto row = [](std::string_view name, std::int64_t bytes, std::string_view note) {
    fmt::print("  {:<36}{:>11}  {}\n", name, gib(bytes), note);
  };
  row("total_gpu_memory", s.total_gpu_memory_bytes, "free at init: total - CUDA context");
  row("Load weight end", s.weights_bytes, "this rank's weights");
  row("avail mem after loading", s.available_after_load_bytes, "total_gpu_memory - weights");
  row("rest_memory", s.rest_bytes,
      fmt::format("avail mem - total_gpu_memory x (1 - {}): the KV pool", s.mem_fraction_static));
  if (!v.refusal.empty()) {
    fmt::print("  serving          SGLang refuses to start: {}\n", v.refusal);
    return;
  }
  fmt::print("  KV Cache is allocated. #tokens: {}, K size: {:.2f} GB, V size: {:.2f} GB  ({} B a token)\n",
             s.max_total_num_tokens, static_cast<double>(s.k_size_bytes) / static_cast<double>(kGiB),
             static_cast<double>(s.k_size_bytes) / static_cast<double>(kGiB), s.cell_size_bytes);
  fmt::print(
      "  serving questions  max_total_num_tokens {}: the longest request the pool holds is {} tokens; "
      "max_running_requests {} (min(max(tokens / context_len x 512, 2048), 4096))\n",
      thousands(s.max_total_num_tokens), thousands(s.max_total_num_tokens - 1), s.max_running_requests);
}

void print_paged(const Prediction::Generation& g) {
  const Prediction::Generation::Paged& v = *g.paged;
  if (v.sglang) {
    print_sglang(g);
  } else if (v.v1) {
    print_v1(g);
  } else {
    print_v0(g);
  }
  fmt::print(
      "  sequences        {} of {} cached tokens ({} + {} - 1, {} blocks each) fit at once; "
      "this batch needs {} of the {} blocks: {}\n",
      v.concurrent_sequences, g.prompt_tokens + g.new_tokens - 1, g.prompt_tokens, g.new_tokens,
      v.blocks_per_sequence, v.batch_blocks, v.num_gpu_blocks,
      v.batch_blocks <= v.num_gpu_blocks ? "it fits at once" : "it does not fit at once");
}

// vLLM V0's profile-run sizing (Worker.determine_num_available_blocks), as print_paged's first lines.
void print_v0(const Prediction::Generation& g) {
  const Prediction::Generation::Paged& v = *g.paged;
  fmt::print(
      "  vLLM             gpu_memory_utilization {}, block_size {}, max_model_len {}, max_num_batched_tokens "
      "{}, max_num_seqs {}\n",
      v.gpu_memory_utilization, v.block_size, v.max_model_len, v.max_num_batched_tokens, v.max_num_seqs);
  line("profile run peak", v.profile_peak_allocated_bytes,
       "allocated_bytes.all.peak: weights + the profile forward's activations");
  line("non-torch", v.non_torch_bytes, "the CUDA context");
  line("KV cache budget", v.available_bytes, "total x utilization - profile peak - non-torch");
  line("KV cache", g.kv_cache_bytes,
       fmt::format("{} blocks of {} B, allocated once before serving", v.num_gpu_blocks, v.block_bytes));
  const std::int64_t tokens = v.num_gpu_blocks * v.block_size;
  fmt::print("  per token        {} B of cache per position of one sequence; the blocks hold {} tokens\n",
             g.kv_bytes_per_token, tokens);
  if (!v.refusal.empty()) {
    fmt::print("  serving          vLLM refuses to start: {}\n", v.refusal);
  }
}

void print_generation(const Prediction::Generation& g, std::int64_t headroom_bytes) {
  const std::int64_t headroom_tokens =
      g.kv_bytes_per_token > 0 ? std::max<std::int64_t>(0, headroom_bytes) / g.kv_bytes_per_token : 0;
  fmt::print("\ngeneration       {} new tokens after a {}-token prompt, greedy, {} KV cache\n", g.new_tokens,
             g.prompt_tokens, g.kv_cache);
  if (g.paged) {
    print_paged(g);
  } else {
    line("KV cache", g.kv_cache_bytes, "keys and values of every layer after the last token");
    fmt::print(
        "  per token        {} B of cache per position of one sequence; the headroom holds about {} more "
        "positions\n",
        g.kv_bytes_per_token, headroom_tokens);
  }
  fmt::print("  prefill (step 1)       allocated {:>12}   reserved {:>12}\n",
             b(g.prefill.peak_allocated_bytes), b(g.prefill.peak_reserved_bytes));
  if (g.decode.step > 0) {
    fmt::print("  {:<23}allocated {:>12}   reserved {:>12}   (the decode step that peaks)\n",
               fmt::format("decode (step {})", g.decode.step), b(g.decode.peak_allocated_bytes),
               b(g.decode.peak_reserved_bytes));
  }
  if (g.prefill_time_ns > 0) {
    fmt::print(
        "  time             prefill {:.2f} ms, decode {:.2f} ms in all: {:.0f} tokens/s (estimate: "
        "roofline, kernels back to back)\n",
        static_cast<double>(g.prefill_time_ns) / 1e6, static_cast<double>(g.decode_time_ns) / 1e6,
        g.decode_tokens_per_s);
  }
}

void print_verdict(const Prediction& p) {
  fmt::print("\nfragmentation    {:.2f} %  (1 - peak active / peak reserved)\n", 100.0 * p.fragmentation);
  fmt::print("OOMs             {}\n", p.num_ooms);
  // With per_process_memory_fraction the headroom is measured against what the fraction allows.
  const std::string limit =
      p.memory_fraction > 0.0 ? fmt::format("; per_process_memory_fraction {} lets the allocator reserve {}",
                                            p.memory_fraction, b(p.allocator_capacity_bytes))
                              : "";
  const std::string refusal =
      p.generation && p.generation->paged ? p.generation->paged->refusal : std::string();
  if (!refusal.empty()) {
    fmt::print("verdict          DOES NOT START: {} refuses to start: {}\n",
               p.generation->paged->sglang ? "SGLang" : "vLLM", refusal);
  } else if (p.fits) {
    fmt::print("verdict          FITS: headroom {} ({:.1f} % of {}{})\n", b(p.headroom_bytes),
               p.headroom_percent, b(p.total_bytes), limit);
  } else {
    fmt::print("verdict          OOM: at least {} short ({:.1f} % of {}{}){}\n", b(-p.headroom_bytes),
               -p.headroom_percent, b(p.total_bytes), limit,
               p.num_ooms > 0 ? fmt::format("; {} allocations failed (figures after the first one are what "
                                            "the step would need)",
                                            p.num_ooms)
                              : "");
  }
}

}  // namespace

nlohmann::ordered_json prediction_json(const Prediction& p, const ReportText& text) {
  nlohmann::ordered_json j;
  j["model"] = p.model_name;
  j["data_parallel"] = {{"scheme", p.data_parallel},
                        {"world_size", p.world_size},
                        {"zero_redundancy_optimizer", p.zero_redundancy_optimizer},
                        {"offload", p.offload}};
  j["tensor_parallel"] = p.tensor_parallel;
  j["sequence_parallel"] = p.sequence_parallel;
  if (p.pipeline) {
    const Prediction::Pipeline& pp = *p.pipeline;
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (const Prediction::PipelineStagePeak& s : pp.simulated) {
      stages.push_back({{"stage", s.stage},
                        {"peak_allocated_bytes", s.peak_allocated_bytes},
                        {"peak_reserved_bytes", s.peak_reserved_bytes},
                        {"fits", s.fits}});
    }
    j["pipeline_parallel"] = {{"stages", pp.stages},
                              {"schedule", pp.schedule},
                              {"split", pp.split},
                              {"layers_per_virtual_stage", pp.layers_per_virtual_stage},
                              {"virtual_stages", pp.virtual_stages},
                              {"micro_batches", pp.micro_batches},
                              {"reported_stage", pp.stage},
                              {"simulated_stages", stages}};
  }
  j["trainable_parameters"] = p.trainable_parameters;
  j["paged_optimizer_state_bytes"] = p.paged_optimizer_state_bytes;
  if (p.host_memory.total() > 0) {
    const HostMemory& h = p.host_memory;
    const auto per_node = static_cast<std::int64_t>(h.total()) * p.gpus_per_node;
    j["host_memory"] = {{"parameters_bytes", h.parameters},
                        {"master_weights_bytes", h.master_weights},
                        {"gradients_bytes", h.gradients},
                        {"optimizer_states_bytes", h.optimizer_states},
                        {"saved_activations_bytes", h.saved_activations},
                        {"saved_activations_pinned_bytes", h.saved_activations_pinned},
                        {"total_bytes", h.total()},
                        {"gpus_per_node", p.gpus_per_node},
                        {"per_node_bytes", per_node}};
  }
  j["total_parameters"] = p.total_parameters;
  if (p.vision.simulated()) {
    j["vision_part"] = {{"model_type", p.vision.model_type},
                        {"tower_parameters", p.vision.tower_parameters},
                        {"tower_layers", p.vision.clip.layers},
                        {"tower_frozen", p.vision_tower_frozen},
                        {"projector_parameters", p.vision.projector_parameters},
                        {"images_per_sample", p.images_per_sample},
                        {"tokens_per_image", p.tokens_per_image}};
  } else if (p.vision.cross_attention_parameters > 0 && p.images_per_sample > 0) {
    // mllama with images: the tower, projector and cross-attention layers run (mllama_vision.h)
    const std::int64_t side = p.vision.mllama.image_size / p.vision.mllama.patch_size;
    j["vision_part"] = {{"model_type", p.vision.model_type},
                        {"tower_parameters", p.vision.tower_parameters},
                        {"tower_layers", p.vision.mllama.layers},
                        {"tower_global_layers", p.vision.mllama.global_layers},
                        {"tower_frozen", p.vision_tower_frozen || p.lora_rank > 0 || !p.peft_method.empty()},
                        {"projector_parameters", p.vision.projector_parameters},
                        {"cross_attention_parameters", p.vision.cross_attention_parameters},
                        {"cross_attention_layers", p.vision.cross_attention_layers},
                        {"images_per_sample", p.images_per_sample},
                        {"tiles_per_image", p.vision.mllama.max_num_tiles},
                        {"patches_per_tile", side * side + 1}};
  } else if (p.vision.total() > 0) {
    j["vision_part_not_simulated"] = {{"model_type", p.vision.model_type},
                                      {"tower_parameters", p.vision.tower_parameters},
                                      {"projector_parameters", p.vision.projector_parameters},
                                      {"parameters", p.vision.total()}};
    if (p.vision.cross_attention_parameters >
        0) {  // mllama, a text-only batch: in memory (in the bill), not run
      j["vision_part_not_simulated"]["cross_attention_parameters"] = p.vision.cross_attention_parameters;
      j["vision_part_not_simulated"]["cross_attention_layers"] = p.vision.cross_attention_layers;
      j["vision_part_not_simulated"]["in_memory"] = true;
    }
  }
  if (p.generation) {
    const Prediction::Generation& g = *p.generation;
    const auto peak = [](const StepPeak& s) {
      return nlohmann::ordered_json{{"step", s.step},
                                    {"peak_allocated_bytes", s.peak_allocated_bytes},
                                    {"peak_reserved_bytes", s.peak_reserved_bytes}};
    };
    j["generation"] = {{"new_tokens", g.new_tokens},
                       {"prompt_tokens", g.prompt_tokens},
                       {"kv_cache", g.kv_cache},
                       {"kv_cache_bytes", g.kv_cache_bytes},
                       {"kv_bytes_per_token", g.kv_bytes_per_token},
                       {"prefill", peak(g.prefill)},
                       {"decode", peak(g.decode)},
                       {"prefill_time_ns", g.prefill_time_ns},
                       {"decode_time_ns", g.decode_time_ns},
                       {"decode_tokens_per_s", g.decode_tokens_per_s},
                       {"prompt_lens", g.prompt_lens}};
    if (g.paged) {
      const Prediction::Generation::Paged& v = *g.paged;
      j["generation"]["paged"] = {{"block_size", v.block_size},
                                  {"block_bytes", v.block_bytes},
                                  {"num_gpu_blocks", v.num_gpu_blocks},
                                  {"kv_cache_tokens", v.num_gpu_blocks * v.block_size},
                                  {"gpu_memory_utilization", v.gpu_memory_utilization},
                                  {"max_model_len", v.max_model_len},
                                  {"max_num_batched_tokens", v.max_num_batched_tokens},
                                  {"max_num_seqs", v.max_num_seqs},
                                  {"profile_peak_allocated_bytes", v.profile_peak_allocated_bytes},
                                  {"non_torch_bytes", v.non_torch_bytes},
                                  {"available_bytes", v.available_bytes},
                                  {"blocks_per_sequence", v.blocks_per_sequence},
                                  {"batch_blocks", v.batch_blocks},
                                  {"concurrent_sequences", v.concurrent_sequences},
                                  {"batch_fits", v.batch_blocks <= v.num_gpu_blocks},
                                  {"refusal", v.refusal}};
      if (v.sglang) {
        const Prediction::Generation::Paged::Sglang& s = *v.sglang;
        j["generation"]["paged"]["sglang"] = {{"mem_fraction_static", s.mem_fraction_static},
                                              {"default_fraction", s.default_fraction},
                                              {"sglang_version", s.version},
                                              {"reserved_mem_mib", s.reserved_mem_mib},
                                              {"total_gpu_memory_bytes", s.total_gpu_memory_bytes},
                                              {"weights_bytes", s.weights_bytes},
                                              {"available_after_load_bytes", s.available_after_load_bytes},
                                              {"rest_bytes", s.rest_bytes},
                                              {"cell_size_bytes", s.cell_size_bytes},
                                              {"max_total_num_tokens", s.max_total_num_tokens},
                                              {"k_size_bytes", s.k_size_bytes},
                                              {"context_len", s.context_len},
                                              {"max_running_requests", s.max_running_requests}};
      }
      if (v.v1) {
        const Prediction::Generation::Paged::V1& s = *v.v1;
        nlohmann::ordered_json lines = nlohmann::ordered_json::array();
        for (const NonTorchLine& l : s.non_torch_lines) {
          lines.push_back({{"name", l.name},
                           {"size_bytes", l.size_bytes},
                           {"after_snapshot", l.after_snapshot},
                           {"source", l.source}});
        }
        j["generation"]["paged"]["vllm_v1"] = {{"tensor_parallel", s.tensor_parallel},
                                               {"expert_parallel", s.expert_parallel},
                                               {"local_experts", s.local_experts},
                                               {"global_experts", s.global_experts},
                                               {"kv_cache_dtype", s.kv_cache_dtype},
                                               {"quantization", s.quantization},
                                               {"model_loading_bytes", s.weights_bytes},
                                               {"lora_slot_bytes", s.lora_slot_bytes},
                                               {"lora_layers", s.lora_layers},
                                               {"torch_peak_increase_bytes", s.torch_peak_increase_bytes},
                                               {"forward_peak_bytes", s.forward_peak_bytes},
                                               {"sampler_peak_bytes", s.sampler_peak_bytes},
                                               {"cublas_workspace_bytes", s.cublas_workspace_bytes},
                                               {"fused_moe_workspace_bytes", s.fused_moe_workspace_bytes},
                                               {"non_torch_increase_bytes", s.non_torch_increase_bytes},
                                               {"non_torch_measured", s.non_torch_measured},
                                               {"non_torch_lines", lines},
                                               {"non_kv_cache_bytes", s.non_kv_cache_bytes},
                                               {"requested_bytes", s.requested_bytes},
                                               {"available_kv_cache_bytes", v.available_bytes},
                                               {"page_size_bytes", s.page_size_bytes},
                                               {"mla", s.mla},
                                               {"kv_cache_groups", s.kv_cache_groups},
                                               {"layers_per_group", s.layers_per_group},
                                               {"padding_layers", s.padding_layers},
                                               {"sliding_window", s.sliding_window},
                                               {"attention_chunk_size", s.attention_chunk_size},
                                               {"kv_cache_needed_bytes", s.kv_cache_needed_bytes},
                                               {"gpu_kv_cache_tokens", s.kv_cache_tokens},
                                               {"max_concurrency", s.max_concurrency},
                                               {"estimated_max_model_len", s.estimated_max_model_len},
                                               {"largest_max_model_len", s.largest_max_model_len},
                                               {"min_gpu_memory_utilization", s.min_gpu_memory_utilization},
                                               {"process_total_bytes", s.process_total_bytes},
                                               {"cudagraph_memory_bytes", s.cudagraph_memory_bytes},
                                               {"utilization_without_graphs", s.utilization_without_graphs},
                                               {"utilization_to_keep_cache", s.utilization_to_keep_cache}};
        if (!s.dtype.empty()) {
          j["generation"]["paged"]["vllm_v1"]["dtype"] = s.dtype;
        }
        if (s.encoder) {
          const auto& e = *s.encoder;
          j["generation"]["paged"]["vllm_v1"]["encoder_profile"] = {
              {"modality", e.modality},
              {"max_tokens_per_item", e.max_tokens_per_item},
              {"encoder_budget", e.encoder_budget},
              {"items", e.items},
              {"tower_tokens_per_item", e.tower_tokens_per_item},
              {"mm_encoder_tp_mode", e.tp_mode},
              {"items_on_rank", e.items_on_rank},
              {"tower_weights_bytes", e.tower_weights_bytes},
              {"pixel_values_bytes", e.pixel_values_bytes},
              {"local_pixel_values_bytes", e.local_pixel_values_bytes},
              {"tower_layer_bytes", e.tower_layer_bytes},
              {"encoder_outputs_bytes", e.encoder_outputs_bytes},
              {"encoder_pass_bytes", e.encoder_pass_bytes},
              {"language_pass_bytes", e.language_pass_bytes}};
        }
        if (s.pipeline_parallel > 1 || s.data_parallel > 1) {
          // Every stage by its number ("0", "1", ...), so a dotted path can name one.
          nlohmann::ordered_json stages = nlohmann::ordered_json::object();
          for (const auto& st : s.stages) {
            stages[std::to_string(st.stage)] = {{"start_layer", st.start_layer},
                                                {"end_layer", st.end_layer},
                                                {"model_loading_bytes", st.weights_bytes},
                                                {"torch_peak_increase_bytes", st.torch_peak_increase_bytes},
                                                {"non_torch_increase_bytes", st.non_torch_increase_bytes},
                                                {"available_kv_cache_bytes", st.available_bytes},
                                                {"num_blocks", st.num_blocks}};
          }
          j["generation"]["paged"]["vllm_v1"]["pipeline_parallel"] = s.pipeline_parallel;
          j["generation"]["paged"]["vllm_v1"]["data_parallel"] = s.data_parallel;
          j["generation"]["paged"]["vllm_v1"]["stage"] = s.stage;
          j["generation"]["paged"]["vllm_v1"]["intermediate_bytes"] = s.intermediate_bytes;
          j["generation"]["paged"]["vllm_v1"]["stages"] = stages;
        }
      }
    }
  }
  if (!p.peft_method.empty() && p.peft_method != "lora") {
    j["peft"] = {{"method", p.peft_method},
                 {"trainable_parameters", p.trainable_parameters},
                 {"total_parameters", p.total_parameters}};
  }
  if (p.lora_rank > 0) {
    j["lora"] = {{"rank", p.lora_rank}, {"target_modules", p.lora_targets}};
  }
  j["base_weights"] =
      p.base_weights.empty()
          ? nlohmann::ordered_json(nullptr)
          : nlohmann::ordered_json{{"format", p.base_weights},
                                   {"double_quant", p.bnb_double_quant},
                                   {"compute_dtype", p.bnb_compute_dtype},
                                   {"saves_input", p.bnb_saves_input},
                                   {"prepare_model_for_kbit_training", p.bnb_prepare_kbit_training}};
  if (!p.precision_regime.empty()) {
    j["precision_regime"] = p.precision_regime;
  }
  if (!p.attention_kernel.empty()) {
    j["attention"] = p.attention_asked;
    j["attention_kernel"] = p.attention_kernel;
  }
  if (!p.cuda_context_source.empty()) {
    j["cuda_context_source"] = p.cuda_context_source;
  }
  j["gpu"] = p.gpu_name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.gpu_name);
  j["total_bytes"] = p.total_bytes;
  j["allocator_capacity_bytes"] = p.allocator_capacity_bytes;
  if (p.memory_fraction > 0.0) {
    j["per_process_memory_fraction"] = p.memory_fraction;
  }
  j["peak_allocated_bytes"] = p.peak_allocated_bytes;
  j["peak_reserved_bytes"] = p.peak_reserved_bytes;
  j["peak_active_bytes"] = p.peak_active_bytes;
  j["peak_requested_bytes"] = p.peak_requested_bytes;
  j["peak_allocated_needed_bytes"] = p.peak_allocated_needed_bytes;
  j["fits"] = p.fits;
  j["headroom_bytes"] = p.headroom_bytes;
  j["headroom_percent"] = p.headroom_percent;
  j["num_ooms"] = p.num_ooms;
  j["fragmentation"] = p.fragmentation;
  j["bill"] = {
      {"parameters", p.bill.parameters},
      {"gradients", p.bill.gradients},
      {"optimizer_states", p.bill.optimizer_states},
      {"activations", p.bill.activations},
      {"temporaries", p.bill.temporaries},
      {"workspace", p.bill.workspace},
      {"inputs", p.bill.inputs},
      {"communication", p.bill.communication},
      {"kv_cache", p.bill.kv_cache},
      {"allocator_rounding", p.bill.allocator_rounding},
      {"allocator_overhead", p.bill.allocator_overhead},
      {"cuda_context", p.bill.cuda_context},
  };
  if (!p.nccl_lines.empty()) {  // multi-GPU runs only, so that one GPU's report keeps its keys
    j["bill"]["nccl"] = p.bill.nccl;
    nlohmann::ordered_json nccl = nlohmann::ordered_json::array();
    for (const NcclBillLine& l : p.nccl_lines) {
      nccl.push_back(
          {{"name", l.name}, {"size_bytes", l.size_bytes}, {"sized", l.sized}, {"source", l.source}});
    }
    j["nccl"] = nccl;
  }
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const LiveTensor& t : p.top_tensors) {
    top.push_back({{"name", t.name},
                   {"category", category_name(t.category)},
                   {"layer", t.layer},
                   {"size_bytes", t.size_bytes}});
  }
  j["peak"] = {{"request_index", p.peak_request_index},
               {"step", p.peak_step},
               {"phase", p.peak_phase},
               {"op", p.peak_op},
               {"layer", p.peak_layer},
               {"top_tensors", top}};
  j["phases"] = {{"step", p.phases_step},
                 {"before_forward", opt(p.phases.before_forward)},
                 {"after_forward", opt(p.phases.after_forward)},
                 {"after_backward", opt(p.phases.after_backward)},
                 {"after_optimizer_step", opt(p.phases.after_optimizer_step)}};
  j["phases_requested"] = {{"before_forward", opt(p.phases_requested.before_forward)},
                           {"after_forward", opt(p.phases_requested.after_forward)},
                           {"after_backward", opt(p.phases_requested.after_backward)},
                           {"after_optimizer_step", opt(p.phases_requested.after_optimizer_step)}};
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const StepPeak& s : p.steps) {
    steps.push_back({{"step", s.step},
                     {"peak_allocated_bytes", s.peak_allocated_bytes},
                     {"peak_requested_bytes", s.peak_requested_bytes},
                     {"peak_reserved_bytes", s.peak_reserved_bytes}});
  }
  j["steps"] = steps;
  j["steps_note"] = text.steps_note;
  if (p.timing) {
    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
    for (const StepTiming& t : p.timing->steps) {
      ts.push_back({{"step", t.step},
                    {"time_ns", t.time_ns},
                    {"compute_bound_ns", t.compute_ns},
                    {"memory_bound_ns", t.memory_ns},
                    {"kernels", t.kernels}});
    }
    j["timing"] = {{"estimate", "roofline over the GPU table; not a measurement"},
                   {"tokens_per_step", p.timing->tokens_per_step},
                   {"tokens_per_s", p.timing->tokens_per_s},
                   {"steps", ts}};
  } else {
    j["timing"] = nullptr;
  }
  j["ops"] = p.ops;
  j["allocations"] = p.tensors;
  j["requests"] = p.requests;  // allocations and frees, as the allocator model took them
  return j;
}

namespace {

// Offloading's CPU memory: what the host of each rank must have beside the GPU.
void print_host_memory(const Prediction& p) {
  const HostMemory& h = p.host_memory;
  if (h.total() == 0) {
    return;
  }
  const auto i64 = [](Bytes v) { return static_cast<std::int64_t>(v); };
  fmt::print("\nhost memory of one rank (offload: CPU RAM, in no GPU figure)\n");
  if (h.parameters != 0) {
    line("parameters", i64(h.parameters), "offloaded partitions");
  }
  if (h.master_weights != 0) {
    line("fp32 master weights", i64(h.master_weights), "DeepSpeed's fp32 partition");
  }
  if (h.gradients != 0) {
    line("gradients", i64(h.gradients), "pinned partition");
  }
  if (h.optimizer_states != 0) {
    line("optimizer states", i64(h.optimizer_states), "the host optimizer's");
  }
  if (h.saved_activations_pinned != 0) {
    line("saved activations", i64(h.saved_activations_pinned),
         fmt::format("pinned blocks (power-of-two) for {} packed at most", b(i64(h.saved_activations))));
  }
  line("total", i64(h.total()));
  line(fmt::format("per node ({} rank{})", p.gpus_per_node, p.gpus_per_node == 1 ? "" : "s"),
       i64(h.total()) * p.gpus_per_node, "--gpus-per-node");
}

}  // namespace

void print_prediction(const Prediction& p, const ReportText& text) {
  if (p.gpu_name.empty()) {
    fmt::print("device           --capacity {} (no CUDA context counted)\n", b(p.total_bytes));
  } else {
    fmt::print("device           {}: {} total, {} CUDA context, {}{} for the allocator\n", p.gpu_name,
               b(p.total_bytes), b(p.cuda_context_bytes),
               p.nccl_bytes > 0 ? fmt::format("{} NCCL, ", b(p.nccl_bytes)) : std::string(),
               b(p.allocator_capacity_bytes));
    fmt::print("CUDA context     {}\n", p.cuda_context_source);
    for (const NcclBillLine& l : p.nccl_lines) {
      fmt::print("{:<16} {}\n", l.name, l.source);
    }
  }
  fmt::print("\nbill at the peak of allocated memory (tensor bytes live at that event)\n");
  line("parameters", p.bill.parameters);
  line("gradients", p.bill.gradients);
  line("optimizer states", p.bill.optimizer_states);
  line("activations", p.bill.activations, "saved for backward");
  line("temporaries", p.bill.temporaries, fmt::format("incl. {} workspace", b(p.bill.workspace)));
  line("inputs", p.bill.inputs, "token batch");
  if (p.bill.kv_cache != 0) {
    line("KV cache", p.bill.kv_cache,
         p.generation && p.generation->paged ? "vLLM's block pool, allocated before the first request"
                                             : "keys and values of the positions generated so far");
  }
  if (p.bill.communication != 0) {
    line("communication", p.bill.communication, "data-parallel buffers");
  }
  line("allocator rounding", p.bill.allocator_rounding, "allocated - requested");
  line("allocator overhead", p.bill.allocator_overhead, "peak reserved - peak allocated");
  line("CUDA context", p.bill.cuda_context, "outside the allocator");
  for (const NcclBillLine& l : p.nccl_lines) {
    line(l.name, static_cast<std::int64_t>(l.size_bytes), l.sized ? "outside the allocator" : "not sized");
  }
  const bool nccl = !p.nccl_lines.empty();
  line("total",
       p.bill.parameters + p.bill.gradients + p.bill.optimizer_states + p.bill.activations +
           p.bill.temporaries + p.bill.inputs + p.bill.communication + p.bill.kv_cache +
           p.bill.allocator_rounding + p.bill.allocator_overhead + p.bill.cuda_context + p.bill.nccl,
       p.num_ooms > 0 ? fmt::format("needed at the peak + overhead + context{} (OOM: not a device figure)",
                                    nccl ? " + NCCL" : "")
                      : fmt::format("= peak reserved + context{}", nccl ? " + NCCL" : ""));
  if (p.paged_optimizer_state_bytes > 0) {
    line("paged states", p.paged_optimizer_state_bytes,
         "unified memory, not in the total (bitsandbytes; evicted to the host when the GPU is full)");
  }
  print_host_memory(p);
  fmt::print("\npeak\n");
  line("allocated", p.peak_allocated_bytes, "torch.cuda.max_memory_allocated");
  line("active", p.peak_active_bytes, "memory_stats active_bytes.all.peak (+ frees awaiting streams)");
  line("reserved", p.peak_reserved_bytes, "torch.cuda.max_memory_reserved");
  if (p.num_ooms > 0) {
    line("allocated needed", p.peak_allocated_needed_bytes,
         "without the device limit (the bill is at this peak)");
  }
  fmt::print("  where                 step {}, {}, op {}{}\n", p.peak_step, p.peak_phase, p.peak_op,
             p.peak_layer >= 0 ? fmt::format(" (layer {})", p.peak_layer) : "");
  fmt::print("  largest live tensors\n");
  for (const LiveTensor& t : p.top_tensors) {
    fmt::print("    {:>12}  {:<16} {}\n", b(static_cast<std::int64_t>(t.size_bytes)),
               category_name(t.category), t.name);
  }
  if (p.generation) {
    print_generation(*p.generation, p.headroom_bytes);
    print_verdict(p);
    return;
  }
  fmt::print("\nphases of step {} ({})\n", p.phases_step, text.phases_note);
  auto ph = [](std::string_view label, const std::optional<std::int64_t>& v) {
    if (v) {
      line(label, *v);
    } else {
      fmt::print("  {:<22}{:>12}\n", label, "-");
    }
  };
  ph("before forward", p.phases.before_forward);
  ph("after forward", p.phases.after_forward);
  ph("after backward", p.phases.after_backward);
  ph("after optimizer step", p.phases.after_optimizer_step);
  fmt::print("\nsteps ({})\n", text.steps_note);
  for (const StepPeak& s : p.steps) {
    fmt::print("  step {:<4} allocated {:>12}   reserved {:>12}\n", s.step, b(s.peak_allocated_bytes),
               b(s.peak_reserved_bytes));
  }
  if (p.timing && !p.timing->steps.empty()) {
    fmt::print("\ntime (estimate: roofline over the GPU table, kernels back to back; not a measurement)\n");
    for (const StepTiming& t : p.timing->steps) {
      fmt::print(
          "  step {:<4} {:>10.2f} ms   {} kernels, {:.0f} % of the time compute-bound\n", t.step,
          static_cast<double>(t.time_ns) / 1e6, t.kernels,
          t.time_ns > 0 ? 100.0 * static_cast<double>(t.compute_ns) / static_cast<double>(t.time_ns) : 0.0);
    }
    fmt::print("  throughput  {:.0f} tokens/s (step {}, {} tokens)\n", p.timing->tokens_per_s,
               p.timing->steps.back().step, p.timing->tokens_per_step);
  }
  print_verdict(p);
}

void write_output_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.flush();
  if (!f) {
    throw InputError(fmt::format("{}: cannot write the {}", path, what));
  }
}

}  // namespace vramsim::cli
