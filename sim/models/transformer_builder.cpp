#include "sim/models/transformer_builder.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "sim/compile/torch_compile.h"
#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "sim/finetune/peft_adalora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_prefix.h"
#include "sim/finetune/peft_prompt.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/finetune/torchao_nf4.h"
#include "sim/graph/layer_stamp.h"
#include "sim/inference/hf_generate.h"
#include "sim/models/checkpoint_impl.h"
#include "sim/models/layer_code.h"
#include "sim/models/transformer_parts.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/parallel/pipeline_parallel.h"
#include "sim/training/optimizer.h"
#include "sim/training/selective_checkpoint.h"
#include "sim/training/te_fp8_linear.h"
#include "sim/vision/mllama_vision.h"
#include "sim/vision/vision_tower.h"

namespace vramsim {

std::int64_t learned_positions_seq_limit(const ModelConfig& m, const TrainingOptions& o) {
  if (m.family != ModelFamily::kGpt2 || !layer_code(m.code).follows_transformers()) {
    return 0;
  }
  return std::max<std::int64_t>(1, m.max_positions - std::max<std::int64_t>(0, o.generate_tokens - 1));
}

namespace {

void check_model(const ModelConfig& m, const TrainingOptions& o) {
  validate_moe_options(m, o);
  if (m.n_heads <= 0 || m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0 || m.head_dim <= 0 ||
      m.head_dim % 2 != 0) {
    throw InputError(
        fmt::format("--model {}: heads {} / kv heads {} / head_dim {} do not form a valid attention", m.name,
                    m.n_heads, m.n_kv_heads, m.head_dim));
  }
  if (!layer_code(m.code).follows_transformers() && o.attention == AttentionKind::kFlashAttention2) {
    throw InputError(
        fmt::format("--attention flash_attention_2: the {} code calls F.scaled_dot_product_attention "
                    "(use sdpa)",
                    m.code));
  }
  check_peft_job(m, o);  // what the PEFT catalogue composes with (peft_method.h)
  if (o.lora.enabled() && !layer_code(m.code).follows_transformers()) {
    throw InputError(
        fmt::format("--lora-rank: the {} code's layers are not torch.nn.Linear, which PEFT's LoRA "
                    "wraps (use --model-code torch-modules)",
                    m.code));
  }
  if (o.pipeline.stages > 1 && !layer_code(m.code).follows_transformers()) {
    throw InputError(
        fmt::format("--pp: the {} code is not split into pipeline stages (use --model-code "
                    "torch-modules)",
                    m.code));
  }
  if (o.sequence_parallel) {
    if (!layer_code(m.code).follows_transformers()) {
      throw InputError(
          fmt::format("--sequence-parallel: the {} code is not modelled with sequence "
                      "parallelism (use --model-code torch-modules)",
                      m.code));
    }
    if (o.seq % o.tensor_parallel != 0) {
      throw InputError(fmt::format("--sequence-parallel: --seq {} is not a multiple of --tp {}", o.seq,
                                   o.tensor_parallel));
    }
    // with context parallelism the tp ranks split the rank's own seq / cp tokens (context_parallel.h)
    const int cp = std::max(1, o.context_parallel.degree);
    if ((o.seq / cp) % o.tensor_parallel != 0) {
      throw InputError(fmt::format(
          "--sequence-parallel: this rank's {} tokens (--seq {} / --cp {}) are not a multiple of --tp {}",
          o.seq / cp, o.seq, cp, o.tensor_parallel));
    }
    if (m.mla.kv_lora_rank > 0) {  // mla_qkv's projections run plain nn.Linear on the whole sequence
      throw InputError(
          "--sequence-parallel: multi-head latent attention's projections are not modelled with sequence "
          "parallelism (vramsim)");
    }
    // megatron_moe.cpp runs on the slice, torchtitan_moe.cpp gathers it (PrepareModuleInputOutput)
    if (m.moe.n_experts > 0 && o.moe.impl == MoeImpl::kTransformers) {
      throw InputError(
          "--sequence-parallel: transformers' mixture-of-experts layers are not modelled with it (vramsim "
          "models Megatron-Core's and torchtitan's: --moe-impl megatron or torchtitan)");
    }
  }
  if (o.float8.recipe != Float8Recipe::kNone &&
      (!layer_code(m.code).follows_transformers() || m.family == ModelFamily::kGpt2 || m.moe.n_experts > 0)) {
    throw InputError(fmt::format(
        "--float8: convert_to_float8_training swaps nn.Linear layers; {} are not modelled with it",
        m.family == ModelFamily::kGpt2 ? "GPT-2's Conv1D layers"
        : m.moe.n_experts > 0          ? "mixture-of-experts layers"
                                       : "the " + m.code + " code's layers"));
  }
  if (o.float8.recipe == Float8Recipe::kTensorwise && o.tensor_parallel > 1 && m.mla.kv_lora_rank > 0) {
    // torchtitan's TP plans name wq / wkv_a / wkv_b for its own DeepSeek code; vramsim's MLA is transformers'
    throw InputError(
        "--float8 with --tp: multi-head latent attention's projections are not modelled with "
        "float8 tensor parallelism (vramsim)");
  }
  if (o.context_parallel.degree > 1) {
    const AttentionKind kernel = attention_kernel(m, o);
    if (kernel != AttentionKind::kSdpaFlash && kernel != AttentionKind::kSdpaEfficient) {
      // _attention.py dispatches only the fused SDPA kernels to ring attention
      throw InputError(fmt::format(
          "--cp: context_parallel replaces F.scaled_dot_product_attention's flash and efficient kernels; "
          "--attention {} runs {} (use sdpa-flash or sdpa-efficient)",
          attention_name(o.attention), attention_name(kernel)));
    }
  }
  check_vision_options(m, o);
  if (o.bnb.format != BnbFormat::kNone && !layer_code(m.code).follows_transformers()) {
    throw InputError(fmt::format(
        "--base-weights: bitsandbytes quantizes the nn.Linear layers of transformers' model code; "
        "the {} code has none (use --model-code torch-modules)",
        m.code));
  }
  // Generation runs a forward at every position but the last new token's: seq + generate - 1 of them.
  const std::int64_t positions = o.seq + std::max<std::int64_t>(0, o.generate_tokens - 1);
  if (learned_positions_seq_limit(m, o) > 0 && positions > m.max_positions) {
    throw InputError(
        o.generate_tokens > 1
            ? fmt::format("--seq + --generate: {} + {} tokens use {} positions, more than the {} learned "
                          "positions of {}",
                          o.seq, o.generate_tokens, positions, m.max_positions, m.name)
            : fmt::format("--seq: {} exceeds the {} learned positions of {}", o.seq, m.max_positions,
                          m.name));
  }
}

// The data-parallel units: each decoder layer's parameters, and the rest (the root), in model.parameters()
// order.
std::vector<ParameterUnit> parameter_units(const ModelConfig& model, const ModelParams& params,
                                           const KeepParameter& keep) {
  std::vector<ParameterUnit> units(static_cast<std::size_t>(model.n_layers) + 1);
  for (std::size_t l = 0; l + 1 < units.size(); ++l) {
    units[l].layer = static_cast<int>(l);
  }
  units.back().layer = -1;
  std::vector<ParameterShape> shapes = model.parameter_shapes();
  if (keep) {  // the parameters create_parameters() made, in the same order
    std::erase_if(shapes, [&](const ParameterShape& s) { return !keep(s, parameter_role(s)); });
  }
  std::map<VarId, std::size_t> unit_of;
  for (std::size_t i = 0; i < shapes.size() && i < params.all.size(); ++i) {
    const int l = shapes[i].layer;
    unit_of[params.all[i]] = l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1;
    units[unit_of[params.all[i]]].params.push_back(params.all[i]);
  }
  // PEFT's adapters are submodules of the layer they adapt: wrapped, gathered and reduced with it.
  for (const VarId base : params.all) {
    if (const auto it = params.lora.find(base); it != params.lora.end()) {
      for (const VarId v : it->second.params) {
        units[unit_of.at(base)].params.push_back(v);
      }
    }
  }
  // VeRA's shared vera_A / vera_B and the prompt encoder belong to the root module
  if (!params.lora.empty()) {
    for (const VarId v : params.lora.begin()->second.shared) {
      units.back().params.push_back(v);
    }
  }
  for (const VarId v : params.peft_prompt) {
    units.back().params.push_back(v);
  }
  if (!params.trainable_tokens.empty()) {  // a submodule of embed_tokens (the root unit's)
    units.back().params.push_back(params.trainable_tokens.at(0));
  }
  return units;
}

// torchtitan's expert parallelism: the routed experts' parameters (GroupedExperts' w1, w2, w3 of every MoE
// layer), which its apply_fsdp shards over the efsdp mesh (DataParallelScheme::set_expert_parameters);
// empty otherwise.
std::set<VarId> routed_expert_parameters(const ModelConfig& model, const ModelParams& params,
                                         const TrainingOptions& options) {
  std::set<VarId> out;
  if (options.moe.impl != MoeImpl::kTorchtitan || options.moe.expert_parallel <= 1) {
    return out;
  }
  for (int l = 0; l < model.n_layers; ++l) {
    if (!model.moe.sparse(l) || static_cast<std::size_t>(l) >= params.layers.size()) {
      continue;
    }
    for (const LayerParams::Expert& e : params.layers[static_cast<std::size_t>(l)].experts) {
      for (const VarId v : {e.gate_w, e.up_w, e.down_w}) {
        if (v != kNoVar) {
          out.insert(v);
        }
      }
    }
  }
  return out;
}

// The linears torchao's convert_to_float8_training swaps for Float8Linear under torchtitan's filter
// (float8_linear.h), by the parameters create_parameters() made.
Float8Weights float8_weights(const ModelConfig& model, const ModelParams& params, const KeepParameter& keep,
                             const Float8Options& float8) {
  Float8Weights out;
  if (float8.recipe == Float8Recipe::kNone) {
    return out;
  }
  std::vector<ParameterShape> shapes = model.parameter_shapes();
  if (keep) {
    std::erase_if(shapes, [&](const ParameterShape& s) { return !keep(s, parameter_role(s)); });
  }
  const bool te = float8.recipe == Float8Recipe::kTeDelayed;
  for (std::size_t i = 0; i < shapes.size() && i < params.all.size(); ++i) {
    if ((te ? is_te_linear_target(shapes[i]) : is_float8_target(shapes[i])) &&
        params.all[i] != params.embed) {
      out.insert(params.all[i]);
    }
  }
  return out;
}

// torchao's Float8ColwiseParallel / Float8RowwiseParallel._apply: "Expecting module to be Float8Linear but
// found ..." (ValueError) for a decoder layer's linear that convert_to_float8_training left alone (its
// dimensions not multiples of 16).
void require_float8_layer_linears(const EagerTape& tape, const ModelParams& params,
                                  const Float8Weights& float8) {
  for (const LayerParams& layer : params.layers) {
    for (const VarId w : {layer.q_w, layer.k_w, layer.v_w, layer.qkv_w, layer.o_w, layer.gate_w, layer.up_w,
                          layer.down_w, layer.gate_up_w, layer.fc1_w, layer.fc2_w}) {
      if (w != kNoVar && float8.count(w) == 0) {
        throw InputError(fmt::format(
            "--float8 with --tp: Float8ColwiseParallel / Float8RowwiseParallel expect Float8Linear, but {} "
            "stays nn.Linear (torchao converts only weights whose dimensions are multiples of 16)",
            tape.name(w)));
      }
    }
  }
}

// What one context-parallel rank runs: its seq / N tokens (the load balancer's two chunks).
TrainingOptions context_parallel_rank_options(const TrainingOptions& requested) {
  TrainingOptions local = requested;
  local.seq = requested.seq / requested.context_parallel.degree;
  return local;
}

// One model forward: ids -> logits. Layers run inside checkpoint() for full recomputation; the per-forward
// tensors a checkpointed layer reads (rotary tables, the mask) are passed as its inputs so the replay in
// backward finds them alive, as HF passes position_embeddings to the checkpointed layer.
// The embeddings' output: with sequence parallelism each rank keeps its slice of the sequence
// (scatter_to_sequence_parallel_region in Megatron's LanguageModelEmbedding).
VarId embeddings(EmitContext& ctx, VarId ids) {
  // MllamaForConditionalGeneration.forward: the vision model and projector before the language model
  mllama_prepare_cross_attention(ctx);
  // LlavaModel.forward: the image features scattered into the image tokens' embeddings
  VarId x = merge_image_features(ctx, emit_embeddings(ctx, ids));
  if (is_prompt_learning(ctx.options.lora)) {  // PeftModelForCausalLM.forward: the prompts in front
    const VarId with_prompts = peft_prompt_embeddings(ctx.ops, ctx.params.peft_prompt, x, ctx.options.lora);
    ctx.ops.tape().drop(x);
    x = with_prompts;
  }
  if (!ctx.options.sequence_parallel) {
    return x;
  }
  const VarId shard = ctx.ops.scatter_sequence("embeddings.scatter_to_sequence_parallel_region", x,
                                               ctx.options.tensor_parallel);
  ctx.ops.tape().drop(x);
  return shard;
}

VarId layer_forward(EmitContext& ctx, EagerTape& tape, int l, VarId x, const ParameterUnit& unit);

// Whether the model's code runs under torch.compile (--compile): ctx.inductor is also set when only the loss
// is compiled (--compile-loss on without --compile: torchtitan's compile.components = ["loss"]).
bool compiles_model(const EmitContext& ctx) {
  return ctx.inductor != nullptr && ctx.options.compile != CompileMode::kNone;
}

// Decoder layers [first, first + count) on x; takes over the caller's reference to x and returns the last
// layer's output.
VarId run_layers(EmitContext& ctx, EagerTape& tape, VarId x, int first, int count, DataParallelScheme& dp,
                 const std::vector<ParameterUnit>& units) {
  if (ctx.stamp != nullptr) {
    ctx.stamp->reset();  // each forward pass checks its layers' periodicity afresh
  }
  for (int l = first; l < first + count; ++l) {
    tape.set_layer(-1);  // mllama's cross-attention layers belong to the root unit (the vision part's)
    x = mllama_cross_attention_layers(ctx, l, x);
    tape.set_layer(l);
    dp.pre_forward(tape, units[static_cast<std::size_t>(l)]);
    VarId y;
    const auto run_layer = [&]() {
      return layer_forward(ctx, tape, l, x, units[static_cast<std::size_t>(l)]);
    };
    if (compiles_model(ctx) && ctx.options.compile_scope == CompileScope::kLayer && !tape.capturing()) {
      y = compiled_call(tape, layer_name(l, "compiled"), run_layer, *ctx.inductor);
    } else {
      y = run_layer();
    }
    tape.drop(x);
    x = y;
    dp.post_forward(tape, units[static_cast<std::size_t>(l)]);
  }
  tape.set_layer(-1);
  if (first + count == static_cast<int>(ctx.model.n_layers)) {  // a cross-attention layer after the last
    x = mllama_cross_attention_layers(ctx, first + count, x);
  }
  return x;
}

// The layers whose code takes another road than their neighbours' (torch_modules_layers.cpp): a
// mixture-of-experts layer (ModelConfig::MoE::sparse) and Gemma 2's sliding-window layers (the even ones,
// which build a mask of their own). Layers of different classes are never stamped from each other.
int layer_class(const ModelConfig& model, int l) {
  int key = 0;
  if (model.moe.n_experts > 0 && model.moe.sparse(l)) {
    key |= 1;
  }
  if (model.model_type == "gemma2" && l % 2 == 0) {
    key |= 2;
  }
  return key;
}

// emit_layer(ctx, l, x), through the layer stamp when the context has one and the tape allows it
// (LayerStamp::eligible; autocast's weight-cast cache and the KV cache are state outside the tape: direct).
// The stamp's externals: what a layer reads that exists before it, in the same order for every layer (its
// input, the shared mask and rotary tables, its parameters and adapters).
VarId emit_layer_stamped(EmitContext& ctx, int l, VarId x, const std::vector<VarId>* params) {
  LayerStamp* stamp = ctx.stamp;
  if (stamp == nullptr || ctx.kv_cache != nullptr || ctx.ops.autocast() || !stamp->eligible()) {
    return emit_layer(ctx, l, x);
  }
  std::vector<VarId> externals{x, ctx.additive_mask, ctx.rope_cos, ctx.rope_sin};
  externals.insert(externals.end(), params->begin(), params->end());
  const std::size_t locals = ctx.forward_locals.size();
  const int key = layer_class(ctx.model, l);
  const VarId out = stamp->run(l, key, externals, [&] { return emit_layer(ctx, l, x); });
  if (ctx.forward_locals.size() != locals) {
    stamp->discard(key);  // the layer changed the forward's state: not reproducible from the tape alone
  }
  return out;
}

// One decoder layer on x, checkpointed as --checkpointing says.
VarId layer_forward(EmitContext& ctx, EagerTape& tape, int l, VarId x, const ParameterUnit& unit) {
  {
    const std::vector<VarId>* params = &unit.params;
    VarId y;
    if (ctx.options.checkpointing == Checkpointing::kFull ||
        ctx.options.checkpointing == Checkpointing::kSelectiveOp) {
      // Tensor arguments first (the hidden states, the mask: HF passes both positionally), then the rotary
      // tables, which HF passes inside the position_embeddings tuple (checkpoint's ctx keeps them as they
      // are, outside saved-tensor hooks).
      std::vector<VarId> inputs{x};
      const bool mask = ctx.additive_mask != kNoVar;
      const bool rope = ctx.rope_cos != kNoVar;
      if (mask) {
        inputs.push_back(ctx.additive_mask);
      }
      const std::size_t tensor_args = inputs.size();
      if (rope) {
        inputs.push_back(ctx.rope_cos);
        inputs.push_back(ctx.rope_sin);
      }
      // torch.utils.checkpoint replays the layer under the autocast state of the forward (it re-enters
      // torch.autocast with the saved settings), although backward itself runs outside autocast; leaving
      // that fresh autocast context clears its weight-cast cache.
      const std::optional<DType> forward_autocast = ctx.ops.autocast();
      // --checkpoint-impl: non-reentrant (torchtitan, torchtune, checkpoint_wrapper's default) with or
      // without early stop, or reentrant (CheckpointFunction).
      tape.set_checkpoint_recompute(checkpoint_recompute(ctx.options.checkpoint));
      y = tape.checkpoint(
          layer_name(l, "checkpoint"), inputs,
          [&ctx, l, rope, mask, forward_autocast, params](const std::vector<VarId>& in) {
            const std::optional<DType> outer = ctx.ops.autocast();
            ctx.ops.set_autocast(forward_autocast);
            std::size_t k = 1;
            if (mask) {
              ctx.additive_mask = in[k++];
            }
            if (rope) {
              ctx.rope_cos = in[k++];
              ctx.rope_sin = in[k++];
            }
            const VarId out = emit_layer_stamped(ctx, l, in[0], params);
            if (forward_autocast && !outer) {
              ctx.ops.clear_autocast_cache();
            }
            ctx.ops.set_autocast(outer);
            return out;
          },
          selective_checkpoint_policy(ctx.options.checkpointing), tensor_args);
      tape.set_checkpoint_recompute(CheckpointRecompute::kKeepOutputs);  // the tape's default for the others
    } else {
      y = emit_layer_stamped(ctx, l, x, params);
    }
    return y;
  }
}

// One model forward: ids -> logits.
// The saved-tensor hooks around the forward (--offload activations).
ActivationOffload activation_offload(const TrainingOptions& o) {
  if (!o.offload_activations) {
    return ActivationOffload::kNone;
  }
  return o.activation_offload_torchtune ? ActivationOffload::kTorchtuneStreams
                                        : ActivationOffload::kSaveOnCpu;
}

VarId forward(EmitContext& ctx, EagerTape& tape, VarId ids, DataParallelScheme& dp,
              const std::vector<ParameterUnit>& units) {
  dp.pre_forward(tape, units.back());
  const bool model_graph =
      ctx.options.compile_scope == CompileScope::kModel ||
      (ctx.options.compile_scope == CompileScope::kModelAndLoss && ctx.options.forward_only);
  if (compiles_model(ctx) && model_graph && !tape.capturing()) {
    // torch.compile(model): the whole forward is one graph
    const VarId logits = compiled_call(
        tape, "compiled_model",
        [&]() {
          const VarId x = run_layers(ctx, tape, embeddings(ctx, ids), 0, ctx.model.n_layers, dp, units);
          return emit_final(ctx, x);
        },
        *ctx.inductor);
    dp.post_forward(tape, units.back());
    end_forward(ctx);
    return logits;
  }
  const VarId x = run_layers(ctx, tape, embeddings(ctx, ids), 0, ctx.model.n_layers, dp, units);
  // torchtune's recipes wrap model.output in NoOpManager: its saved tensors stay on the GPU (here the final
  // norm's too, which torchtune offloads: one hidden-size tensor, on the high side).
  const bool torchtune = ctx.options.offload_activations && ctx.options.activation_offload_torchtune;
  if (torchtune) {
    tape.set_activation_offload(ActivationOffload::kNone);
  }
  const VarId logits = emit_final(ctx, x);  // drops x
  if (torchtune) {
    tape.set_activation_offload(ActivationOffload::kTorchtuneStreams);
  }
  dp.post_forward(tape, units.back());  // the root module's forward returns the logits
  end_forward(ctx);
  return logits;
}

// What one step of a pipeline stage works with (build_training_steps' locals).
struct PipelineStage {
  EagerTape& tape;
  TorchOps& ops;
  const ModelConfig& model;
  const TrainingOptions& options;
  const ModelParams& params;
  const ModelBuffers& buffers;
  DataParallelScheme& dp;
  const std::vector<ParameterUnit>& units;
  VarId ids = kNoVar;
  VarId targets = kNoVar;
  std::optional<DType> autocast;
  AttentionKind attention = AttentionKind::kEager;
  const LayerCode* code = nullptr;
  std::vector<PipelineChunk> chunks;
  // torch.distributed.pipelining (runs_torch_pipelining): index chunk * micro-batches + micro-batch.
  std::vector<VarId> recv_buffers;       // args_recv_info: each micro-batch's receive buffer (non-first)
  std::vector<VarId> grad_recv_buffers;  // grad_recv_info: each micro-batch's output-gradient buffer
  std::vector<VarId> output_chunks;      // every forward's output, kept until the next step
  std::vector<TensorId> input_grads;     // the receive buffers' .grad, kept until the next step
  VarId head_output = kNoVar;            // the last virtual stage's latest output (the logits)
  InductorProcess* inductor = nullptr;   // --compile: torchtitan compiles each TransformerBlock
  LayerStamp* stamp = nullptr;           // layer_stamp.h (EmitContext::stamp)
};

// One chunk's forward on one micro-batch: what its backward needs.
struct InFlight {
  VarId received = kNoVar;  // the hidden states received from the previous stage (held until backward)
  VarId output = kNoVar;    // the loss (last virtual stage) or the hidden states sent on (storage freed)
  std::size_t nodes_begin = 0;
  std::size_t nodes_end = 0;
  // The forward's context: checkpointed layers replay with it in the backward, long after the forward.
  std::unique_ptr<EmitContext> ctx;
};

// The hidden states one micro-batch sends between stages: (b, s, h), the sequence split over the
// tensor-parallel ranks under sequence parallelism.
Shape hidden_shape(const PipelineStage& st) {
  const std::int64_t tokens =
      st.options.seq / (st.options.sequence_parallel ? st.options.tensor_parallel : 1);
  return {st.options.batch, tokens, st.model.d_model};
}

// torch.distributed.pipelining's _initialize_stage at the first step (PyTorch of 2024-12,
// torch/distributed/pipelining/stage.py): _prepare_forward_infra makes, for every micro-batch, a receive
// buffer of the stage's input (_make_tensor_from_meta: torch.empty, then requires_grad_(True)) unless the
// stage is the first; _prepare_backward_infra makes, for every micro-batch, a buffer for the gradient of the
// stage's output unless it is the last. They live as long as the stage (args_recv_info, grad_recv_info).
void initialize_stages(PipelineStage& st, int micro_batches) {
  EagerTape& tape = st.tape;
  const DType hidden = parameter_dtype(st.options.precision);
  const std::size_t slots = st.chunks.size() * static_cast<std::size_t>(micro_batches);
  st.recv_buffers.assign(slots, kNoVar);
  st.grad_recv_buffers.assign(slots, kNoVar);
  for (std::size_t c = 0; c < st.chunks.size(); ++c) {
    for (int mb = 0; mb < micro_batches; ++mb) {
      const std::size_t i = c * static_cast<std::size_t>(micro_batches) + static_cast<std::size_t>(mb);
      const std::string n = fmt::format("pipeline.chunk{}.mb{}", c, mb);
      if (!st.chunks[c].embeddings) {
        st.recv_buffers[i] = tape.constant(n + ".recv_buffer", "empty", hidden_shape(st), hidden);
        tape.requires_grad_(st.recv_buffers[i]);
        tape.set_category(st.recv_buffers[i], TensorCategory::kCommunication);
      }
      if (!st.chunks[c].head) {
        st.grad_recv_buffers[i] = tape.constant(n + ".grad_recv_buffer", "empty", hidden_shape(st), hidden);
        tape.set_category(st.grad_recv_buffers[i], TensorCategory::kCommunication);
      }
    }
  }
}

// clear_runtime_states at the start of each schedule.step(): fwd_cache and output_chunks cleared (the last
// references to the outputs kept since the previous step's forwards) and every receive buffer's .grad set to
// None.
void clear_runtime_states(PipelineStage& st) {
  if (st.output_chunks.empty() && st.input_grads.empty()) {
    return;
  }
  st.tape.begin_op("pipeline.clear_runtime_states", "set_to_none");
  for (VarId v : st.output_chunks) {
    st.tape.drop(v);
  }
  for (TensorId g : st.input_grads) {
    st.tape.release(g);
  }
  st.output_chunks.clear();
  st.input_grads.clear();
}

// schedule.step() on the stage that holds the last virtual stage returns _merge_outputs(output_chunks):
// merge_chunks concatenates every micro-batch's output along dimension 0 (torch.cat); torchtitan's train.py
// does not keep the result, so it is freed at once.
void merge_output_chunks(PipelineStage& st, int micro_batches) {
  EagerTape& tape = st.tape;
  SIM_ASSERT(st.head_output != kNoVar);
  Shape merged = tape.shape(st.head_output);  // every micro-batch's output has this shape
  merged[0] *= micro_batches;
  const VarId cat = tape.constant("pipeline.merge_output_chunks", "cat", merged, tape.dtype(st.head_output));
  tape.drop(cat);
}

InFlight pipeline_forward(PipelineStage& st, const PipelineChunk& chunk, std::size_t recv_index) {
  EagerTape& tape = st.tape;
  InFlight f;
  f.nodes_begin = tape.node_count();
  tape.set_activation_offload(activation_offload(st.options));
  tape.set_phase(Phase::kForward);
  st.ops.set_autocast(st.autocast);
  f.ctx = std::make_unique<EmitContext>(EmitContext{st.ops,
                                                    st.model,
                                                    st.options,
                                                    st.params,
                                                    st.buffers,
                                                    {},
                                                    kNoVar,
                                                    kNoVar,
                                                    kNoVar,
                                                    st.attention,
                                                    st.code,
                                                    nullptr});
  EmitContext& ctx = *f.ctx;
  ctx.inductor = st.inductor;
  ctx.stamp = st.stamp;
  VarId x = kNoVar;
  if (chunk.embeddings) {
    st.dp.pre_forward(tape, st.units.back());
    x = embeddings(ctx, st.ids);
  } else {
    const DType hidden = parameter_dtype(st.options.precision);
    if (runs_torch_pipelining(st.options.pipeline)) {
      // get_fwd_recv_ops: irecv into this micro-batch's buffer, made once by _prepare_forward_infra.
      f.received = st.recv_buffers.at(recv_index);
      tape.begin_op("pipeline.recv_forward", "recv");
      tape.use(tape.storage(f.received));
      tape.hold(f.received);  // the forward's reference (the layers take it); args_recv_info keeps its own
    } else {
      // p2p_communication.recv_forward: torch.empty((b, s, h)) in the pipeline dtype, then requires_grad_().
      f.received = tape.received("pipeline.recv_forward", "recv", hidden_shape(st), hidden);
      tape.hold(f.received);  // schedules.py keeps input_tensors until the backward
    }
    st.code->forward_locals(ctx, hidden);
    x = f.received;
  }
  x = run_layers(ctx, tape, x, chunk.first_layer, chunk.layers, st.dp, st.units);
  if (chunk.head) {
    const VarId logits = emit_final(ctx, x);
    st.dp.post_forward(tape, st.units.back());
    end_forward(ctx);
    tape.set_phase(Phase::kLoss);
    f.output = emit_loss(ctx, logits, st.targets);
    if (runs_torch_pipelining(st.options.pipeline)) {
      st.output_chunks.push_back(logits);  // forward_one_chunk: output_chunks.append(output)
      st.head_output = logits;
    } else {
      tape.drop(logits);  // forward_step's locals go away; the loss's graph keeps what it needs
    }
  } else {
    st.dp.post_forward(tape, st.units.back());
    end_forward(ctx);
    tape.begin_op("pipeline.send_forward", "send");
    tape.use(tape.storage(x));
    if (runs_torch_pipelining(st.options.pipeline)) {
      st.output_chunks.push_back(x);  // fwd_cache until the backward, output_chunks until the next step
    } else {
      tape.drop(x);  // send_forward, then deallocate_output_tensor: the data goes, the autograd node stays
    }
    f.output = x;
  }
  if (!st.options.autocast_whole_step) {
    st.ops.set_autocast(std::nullopt);
    st.ops.clear_autocast_cache();
  }
  tape.set_save_on_cpu(false);
  f.nodes_end = tape.node_count();
  return f;
}

void pipeline_backward(PipelineStage& st, const PipelineChunk& chunk, const InFlight& f, std::size_t index) {
  EagerTape& tape = st.tape;
  tape.set_phase(Phase::kBackward);
  st.dp.begin_backward(tape);
  if (runs_torch_pipelining(st.options.pipeline)) {
    // stage_backward: torch.autograd.backward(stage_output, grad_tensors=the received gradient), then
    // grads_input = [buffer.grad]: sent back, and kept in .grad until clear_runtime_states.
    const VarId seed = chunk.head ? kNoVar : st.grad_recv_buffers.at(index);
    const TensorId g =
        tape.backward_keeping_leaf_grad(f.output, f.nodes_begin, f.nodes_end, seed, f.received);
    if (chunk.head) {
      tape.drop(f.output);  // the loss
    }
    if (g != kNoTensor) {
      tape.begin_op("pipeline.send_backward", "send");
      tape.use(g);
      st.input_grads.push_back(g);
    }
    st.dp.end_backward(tape, st.units.back());
    return;
  }
  if (chunk.head) {
    tape.backward(f.output, f.nodes_begin, f.nodes_end, "loss.backward.grad_seed", "ones_like");
    tape.drop(f.output);
  } else {
    // recv_backward: the next stage's gradient of the hidden states seeds this chunk's backward.
    tape.backward(f.output, f.nodes_begin, f.nodes_end, "pipeline.recv_backward", "recv");
  }
  st.dp.end_backward(tape, st.units.back());
  if (f.received != kNoVar) {  // its gradient was sent back (and freed with the backward's leftovers)
    tape.drop(f.received);
  }
}

// One optimizer step's forwards and backwards of this stage in the schedule's order.
void pipeline_step(PipelineStage& st, int step) {
  const int micro_batches = st.options.grad_accumulation;
  const bool torch_pipelining = runs_torch_pipelining(st.options.pipeline);
  if (torch_pipelining) {
    st.tape.set_step(step, 0);
    st.tape.set_phase(Phase::kForward);
    clear_runtime_states(st);
    if (st.recv_buffers.empty()) {
      initialize_stages(st, micro_batches);
    }
  }
  std::vector<InFlight> in_flight(st.chunks.size() * static_cast<std::size_t>(micro_batches));
  std::vector<int> backwards_seen(st.chunks.size(), 0);
  for (const PipelineAction& a : pipeline_schedule(st.options.pipeline, micro_batches)) {
    st.tape.set_step(step, a.micro_batch);
    const PipelineChunk& chunk = st.chunks[static_cast<std::size_t>(a.chunk)];
    const auto index = static_cast<std::size_t>(a.chunk * micro_batches + a.micro_batch);
    InFlight& f = in_flight[index];
    if (a.forward) {
      f = pipeline_forward(st, chunk, index);
    } else {
      // backward_maybe_with_nosync: the gradients are synchronised on the stage's last backward only.
      const int seen = ++backwards_seen[static_cast<std::size_t>(a.chunk)];
      st.dp.set_requires_gradient_sync(seen == micro_batches);
      pipeline_backward(st, chunk, f, index);
    }
  }
  st.dp.set_requires_gradient_sync(true);
  if (torch_pipelining && st.chunks.back().head) {
    merge_output_chunks(st, micro_batches);
  }
}

}  // namespace

AttentionKind attention_kernel(const ModelConfig& model, const TrainingOptions& options) {
  return resolve_attention(
      options.attention, model.head_dim, options.precision, options.compute_capability, !options.inference,
      layer_code(model.code).follows_transformers() &&
          (model.always_builds_mask || left_padded(options) ||
           options.lora.method == PeftMethod::kPrefixTuning));  // prefix tuning: keys longer than queries
}

static OpGraph build_steps(const ModelConfig& model, const TrainingOptions& options);

// `loss.item()` (LossItemSync): aten::_local_scalar_dense copies the loss to the host on the current
// (compute) stream and calls cudaStreamSynchronize, so the host issues nothing more until every op before it
// on that stream has run; the caching allocator's next malloc then completes the deferred frees whose
// record_stream events that work recorded (process_events). FSDP1's _post_backward_final_callback made the
// compute stream wait for the post-backward stream first.
static void read_loss_on_host(EagerTape& tape, VarId loss) {
  const StreamId stream = tape.stream();
  tape.set_stream(0);
  const OpId copy = tape.begin_op("loss.item", "_local_scalar_dense");
  tape.use(tape.storage(loss));
  tape.begin_op("loss.item.synchronize", "noop");
  tape.host_wait_for(copy);
  tape.set_stream(stream);
}

OpGraph build_training_steps(const ModelConfig& model, const TrainingOptions& options) {
  if (is_prompt_learning(options.lora)) {
    // the decoder, head and loss run on the virtual tokens and the input's (PeftModelForCausalLM.forward)
    validate(options);
    TrainingOptions with_prompts = options;
    with_prompts.seq += options.lora.num_virtual_tokens;
    return build_steps(model, with_prompts);
  }
  return build_steps(model, options);
}

static OpGraph build_steps(const ModelConfig& model, const TrainingOptions& requested) {
  validate(requested);
  check_model(model, requested);
  // Context parallelism: this rank runs the model on its seq / N tokens (context_parallel.h).
  const TrainingOptions options = context_parallel_rank_options(requested);
  if (options.generate_tokens > 0) {
    return build_generation(model, options);
  }
  OpGraph graph;
  EagerTape tape(graph);
  TorchOps ops(tape);
  const DType param_dtype = parameter_dtype(options.precision);

  tape.set_step(0);
  tape.set_phase(Phase::kSetup);
  tape.begin_op("model.to(device)", "_to_copy");
  const std::unique_ptr<DataParallelScheme> dp = make_data_parallel(options.data_parallel);
  // --master-weights fp32 under FSDP: the model built in fp32 and wrapped with MixedPrecision(param_dtype=
  // bf16), so FSDP keeps fp32 shards (a bitsandbytes or torchao quantized model is loaded in its compute or
  // storage dtype: no fp32 copy of its parameters exists).
  dp->set_fp32_sharded_parameters(steps_fp32_master(options) && options.bnb.format == BnbFormat::kNone);
  // A pipeline stage holds its own layers, the first also the embeddings, the last the head (with tied
  // embeddings Megatron keeps a copy of the word embeddings there as the output layer's weight).
  const std::vector<PipelineChunk> chunks = pipeline_chunks(model.n_layers, options.pipeline);
  KeepParameter keep;
  if (options.pipeline.stages > 1) {
    keep = [&chunks, &model](const ParameterShape& p, ParameterRole role) {
      return std::any_of(chunks.begin(), chunks.end(), [&](const PipelineChunk& c) {
        switch (role) {
          case ParameterRole::kLayer:
            return p.layer >= c.first_layer && p.layer < c.first_layer + c.layers;
          case ParameterRole::kEmbedding:
            return c.embeddings || (c.head && model.tied_embeddings);
          case ParameterRole::kPositions:
            return c.embeddings;
          case ParameterRole::kHead:
            return c.head;
        }
        return false;
      });
    };
  }
  LoraOptions lora = options.lora;
  // FSDP1 with the adapters inside their layer's unit and use_orig_params=True: the FlatParameter requires
  // grad, so the frozen parameters' gradients are computed too (fsdp.cpp checks the other cases).
  lora.base_gradients_computed = lora.enabled() && options.data_parallel.scheme.starts_with("fsdp-") &&
                                 !options.data_parallel.fsdp_peft_wrap &&
                                 options.data_parallel.fsdp_use_orig_params;
  // DeepSpeed's engine casts the whole module to its half dtype when it wraps it
  // (deepspeed/runtime/engine.py _configure_distributed_model: `elif self.bfloat16_enabled():
  // self.module.bfloat16()`, `self.module.half()` for fp16; per parameter since DeepSpeed 0.19.2's
  // _cast_module_mixed_precision), after PEFT made its adapters fp32 (autocast_adapter_dtype): they train in
  // the model's dtype, and ZeRO keeps their fp32 master partitions as for every other parameter.
  if (options.data_parallel.scheme.starts_with("zero") &&
      (param_dtype == DType::kBFloat16 || param_dtype == DType::kFloat16)) {
    lora.autocast_adapter_dtype = false;
  }
  const auto resident = [&dp](std::int64_t n) { return dp->resident_parameter_numel(n); };
  // A vision-language model registers its vision tower and projector before the language model (LlavaModel)
  VisionParams vision =
      create_vision_parameters(tape, model, param_dtype, options.vision,
                               lora.enabled() || options.bnb.format != BnbFormat::kNone, resident);
  ModelParams params = create_parameters(tape, model, param_dtype, resident, lora, options.bnb, keep);
  if (!vision.all.empty()) {
    params.trainable.insert(params.trainable.begin(), vision.trainable.begin(), vision.trainable.end());
    params.vision = std::move(vision);
  }
  std::vector<ParameterUnit> units = parameter_units(model, params, keep);
  // the vision part belongs to the root unit (wrapped, gathered and reduced with the embeddings and head)
  units.back().params.insert(units.back().params.end(), params.vision.all.begin(), params.vision.all.end());
  // FSDP2's tensor-subclass extension: what fsdp_pre_all_gather hands the all-gather instead of the shard
  const Float8Weights float8_gathered = options.float8.fsdp_float8_all_gather
                                            ? float8_weights(model, params, keep, options.float8)
                                            : Float8Weights{};
  for (ParameterUnit& unit : units) {
    for (const VarId p : unit.params) {
      if (float8_gathered.count(p) != 0) {  // WeightWithDynamicFloat8CastTensor: the float8 shard, 1 B each
        unit.all_gather_inputs[p] = {AllGatherInput{"", numel(tape.shape(p)), DType::kUInt8}};
      }
      const auto nf4 = params.bnb.find(p);
      if (nf4 != params.bnb.end() && nf4->second.format == BnbFormat::kTorchaoNf4) {  // torchao's NF4Tensor
        unit.all_gather_inputs[p] = torchao_nf4_all_gather_inputs(nf4->second);
      }
    }
  }
  const ModelBuffers buffers = create_buffers(tape, model, options);
  const std::set<VarId> experts = routed_expert_parameters(model, params, options);
  // torchtitan's ep mesh borrows the tp ranks when etp = 1 (ExpertParallel with TP: whole experts)
  const int borrowed_tp = model.moe.expert_tensor_parallel > 1 ? 1 : options.tensor_parallel;
  dp->set_expert_parameters(experts, options.moe.expert_parallel, borrowed_tp);
  dp->construct(tape, units);
  tape.set_backward_layer_hooks(
      [&](int l) { dp->pre_backward(tape, units[l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1]); },
      [&](int l) {
        dp->post_backward(tape, units[l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1]);
      });
  tape.begin_op("batch.to(device)", "_to_copy");
  const VarId ids = tape.input("input_ids", {options.batch, options.seq}, DType::kInt64);
  const VarId targets = tape.input("labels", {options.batch, options.seq}, DType::kInt64);
  VarId pixel_values = kNoVar;
  if ((model.vision.simulated() || model.vision.wrapper_model_type == "mllama") &&
      options.vision.images_per_sample > 0) {  // the image processor's fp32 pixels, moved with the batch
    pixel_values = tape.input("pixel_values", pixel_values_shape(model, options), DType::kFloat32);
  }
  OptimizerModel optimizer(tape, options, params.trainable, dp->optimizer_state_shards(),
                           dp->optimizer_on_host(), dp->host_optimizer_fp32(), dp->fp32_sharded_parameters());
  if (options.data_parallel.zero_redundancy_optimizer) {  // rank 0 (the greedy gives it the largest first)
    optimizer.set_zero_redundancy_partition(
        zero_redundancy_partition(tape, params.trainable, options.data_parallel.world_size, 0,
                                  options.data_parallel.zero_partition_key));
  }
  for (const VarId p : experts) {  // torchtitan's experts: their states sharded over efsdp
    optimizer.set_state_shards(p, dp->parameter_state_shards(p));
  }
  const bool forward_only = options.forward_only || options.inference;
  if (!forward_only) {
    optimizer.construct();
  }
  if (options.optimizer_in_backward) {
    // torchtune's register_optim_in_bwd_hooks registers on model.parameters(): under FSDP2 the sharded
    // parameters, whose hooks FSDP2 calls once their gradient is reduce-scattered; autograd's AccumulateGrad
    // fills only the unsharded parameter's gradient, which has none.
    const auto step = [&optimizer](VarId p) { optimizer.step_in_backward(p); };
    if (!dp->set_sharded_grad_hook(step)) {
      tape.set_post_accumulate_grad_hook(step);
    }
  }
  // The cuBLAS workspaces: made by the first matmul of each thread, or already there in a warm process.
  const bool main_exists = options.warm != WarmProcess::kNone;
  const bool autograd_exists = options.warm == WarmProcess::kStep;
  if (main_exists || autograd_exists) {
    tape.begin_op("cublas workspaces of the warm process", "getNewWorkspace");
  }
  if (main_exists && options.cublas_workspace_bytes > 0) {
    tape.allocate("cublas_workspace.main_thread", options.cublas_workspace_bytes, DType::kUInt8,
                  TensorCategory::kWorkspace);
  }
  if (autograd_exists && options.cublas_workspace_bytes > 0) {
    tape.allocate("cublas_workspace.autograd_thread", options.cublas_workspace_bytes, DType::kUInt8,
                  TensorCategory::kWorkspace);
  }
  ops.set_forward_workspace_bytes(main_exists ? 0 : options.cublas_workspace_bytes);
  tape.set_backward_workspace_bytes(autograd_exists ? 0 : options.cublas_workspace_bytes);
  tape.set_cuda_device(options.device);
  ops.set_lora(&params.lora, &options.lora, !options.inference);
  ops.set_bnb(&params.bnb, &options.bnb);
  Float8Options float8_options = options.float8;
  float8_options.te_fsdp2 = options.data_parallel.scheme.starts_with("fsdp2-");
  const Float8Weights float8 = float8_weights(model, params, keep, float8_options);
  if (float8_options.recipe == Float8Recipe::kTensorwise && options.tensor_parallel > 1) {
    require_float8_layer_linears(tape, params, float8);
  }
  if (float8_options.recipe == Float8Recipe::kTeDelayed && !float8.empty()) {
    // init_fp8_metadata at each te.Linear's first forward under fp8_autocast (before the first step's)
    tape.begin_op("te.Linear.init_fp8_metadata", "zeros");
    for (const VarId w : params.all) {
      if (float8.count(w) != 0) {
        const std::string& n = tape.name(w);
        create_te_module_state(tape, n.substr(0, n.size() - std::string_view(".weight").size()), w,
                               float8_options);
      }
    }
  }
  ops.set_float8(&float8, &float8_options);
  ops.set_context_parallel(&options.context_parallel);
  const std::optional<DType> low = autocast_dtype(options.precision);
  const AttentionKind attention = attention_kernel(model, options);
  const LayerCode& code = layer_code(model.code);

  VarId held_logits = kNoVar;  // the training loop's `logits` / `loss` variables
  VarId held_loss = kNoVar;
  std::size_t held_graph_begin = 0;
  // --compile or --compile-loss: what the process has tuned (a warm process: everything). The loss compiled
  // alone runs in torch.compile's default mode (torchtitan: `torch.compile(loss_fn)`, components ["loss"]).
  InductorProcess inductor;
  inductor.mode = options.compile != CompileMode::kNone ? options.compile : CompileMode::kDefault;
  inductor.autotuned_before = options.warm != WarmProcess::kNone;
  PipelineStage stage{tape, ops,       model, options, params, buffers, *dp, units, ids,   targets,
                      low,  attention, &code, chunks,  {},     {},      {},  {},    kNoVar};
  stage.inductor = options.compile != CompileMode::kNone ? &inductor : nullptr;
  LayerStamp stamp(tape);
  stage.stamp = &stamp;
  // AdaLoRA: RankAllocator's importance state over lora_A, lora_B and lora_E (peft_adalora.h)
  const bool adalora = options.lora.method == PeftMethod::kAdalora && options.lora.enabled();
  std::vector<VarId> adalora_params;
  if (adalora) {
    for (const VarId w : params.all) {
      if (const auto it = params.lora.find(w); it != params.lora.end()) {
        adalora_params.insert(adalora_params.end(), it->second.params.begin(), it->second.params.begin() + 3);
      }
    }
  }
  AdaloraRankAllocator rank_allocator(adalora_params);
  std::unique_ptr<KvCache> held_prefix_cache;
  for (int step = 1; step <= options.steps; ++step) {
    if (options.pipeline.stages > 1) {
      pipeline_step(stage, step);
    }
    for (int micro = 0; options.pipeline.stages == 1 && micro < options.grad_accumulation; ++micro) {
      tape.set_step(step, micro);
      tape.set_phase(Phase::kForward);
      ops.set_autocast(low);
      const std::size_t graph_begin = tape.node_count();
      EmitContext ctx{ops,    model,  options, params,    buffers, {},
                      kNoVar, kNoVar, kNoVar,  attention, &code,   nullptr};
      ctx.inductor = options.compile != CompileMode::kNone || options.compile_loss ? &inductor : nullptr;
      ctx.pixel_values = pixel_values;
      ctx.stamp = &stamp;
      tape.set_grad_enabled(!options.inference);                 // `with torch.no_grad():` around the forward
      tape.set_activation_offload(activation_offload(options));  // `with save_on_cpu(...)` too
      std::unique_ptr<KvCache> prefix_cache;  // prefix tuning: get_prompt's DynamicCache (peft_prefix.h)
      if (options.lora.method == PeftMethod::kPrefixTuning) {
        prefix_cache =
            make_prefix_cache(ops, params.peft_prompt, model, options.lora, options.batch, param_dtype);
        ctx.kv_cache = prefix_cache.get();
      }
      // --compile-scope model-and-loss: the model returns its loss (labels passed); the loop keeps no logits
      const bool loss_in_graph =
          compiles_model(ctx) && !forward_only && options.compile_scope == CompileScope::kModelAndLoss;
      VarId logits = kNoVar;
      VarId graph_loss = kNoVar;
      if (loss_in_graph) {
        graph_loss = compiled_call(
            tape, "compiled_model",
            [&]() {
              const VarId lg = forward(ctx, tape, ids, *dp, units);
              tape.set_phase(Phase::kLoss);
              const VarId l = emit_loss(ctx, lg, targets);
              tape.drop(lg);
              tape.set_phase(Phase::kForward);
              return l;
            },
            inductor);
      } else {
        logits = forward(ctx, tape, ids, *dp, units);
      }
      tape.set_grad_enabled(true);
      if (held_logits != kNoVar) {  // `logits = model(x)` rebinds the variable
        tape.drop(held_logits);
        if (forward_only) {
          tape.release_nodes(held_graph_begin, graph_begin);  // nothing else keeps the old graph alive
        }
      }
      held_logits = logits;
      held_graph_begin = graph_begin;
      if (prefix_cache) {  // outputs.past_key_values: alive with `outputs`, until this forward replaced them
        if (held_prefix_cache) {
          held_prefix_cache->release(tape);
        }
        held_prefix_cache = std::move(prefix_cache);
      }
      if (forward_only) {
        if (!options.autocast_whole_step) {
          ops.set_autocast(std::nullopt);
          ops.clear_autocast_cache();
        }
        continue;
      }
      tape.set_phase(Phase::kLoss);
      if (options.activation_offload_torchtune) {  // the recipe's context covers the model's forward only
        tape.set_activation_offload(ActivationOffload::kNone);
      }
      VarId loss = graph_loss;
      if (loss_in_graph) {
        tape.begin_op("loss (inside the compiled graph)", "noop");
      } else {
        loss = emit_loss(ctx, logits, targets);
        if (adalora) {  // AdaLoraModel.forward: outputs.loss += orth_reg_weight * regu_loss
          loss = adalora_orthogonal_regularizer(ops, params.lora, params.all, loss);
        }
      }
      if (held_loss != kNoVar) {
        tape.drop(held_loss);
      }
      held_loss = loss;
      if ((options.loss == LossKind::kChunkedCrossEntropy || options.free_logits_before_backward) &&
          held_logits != kNoVar) {  // torchtune: `del logits`; torchtitan: `del pred`
        tape.drop(held_logits);
        held_logits = kNoVar;
      }
      if (!options.autocast_whole_step) {
        ops.set_autocast(std::nullopt);
        ops.clear_autocast_cache();
      }
      tape.set_save_on_cpu(false);
      tape.set_phase(Phase::kBackward);
      dp->begin_backward(tape);
      tape.backward(loss);
      dp->end_backward(tape, units.back());
      if (options.loss_item_sync == LossItemSync::kAfterBackward) {
        read_loss_on_host(tape, loss);
      }
    }
    if (forward_only) {
      continue;
    }
    tape.set_phase(Phase::kOptimizer);
    if (!options.optimizer_in_backward) {  // else stepped in backward already
      const TensorId flat_grad = dp->flat_fp32_gradient(tape, params.trainable);
      if (flat_grad == kNoTensor) {
        optimizer.step();
      } else {
        optimizer.step_flat(flat_grad);
      }
      dp->after_optimizer_step(tape);
    }
    if (adalora) {  // model.base_model.update_and_allocate(step), after the step, before zero_grad
      tape.begin_op("update_and_allocate", "update_ipt");
      rank_allocator.update_ipt(tape);
    }
    if (options.autocast_whole_step) {
      ops.set_autocast(std::nullopt);
      ops.clear_autocast_cache();
    }
    tape.set_phase(Phase::kZeroGrad);
    optimizer.zero_grad();
    if (lora.base_gradients_computed && options.zero_grad_set_to_none) {
      // FSDP1's _clear_grads_if_needed: with every original parameter's .grad None, the flat gradient goes,
      // the frozen parameters' part with it.
      for (VarId p : params.all) {
        if (tape.grad(p) != kNoTensor) {
          tape.set_grad_to_none(p);
        }
      }
    }
    if (options.loss_item_sync == LossItemSync::kAfterStep && held_loss != kNoVar) {
      read_loss_on_host(tape, held_loss);
    }
  }
  // The script ends: its variables go away.
  tape.begin_op("end_of_loop", "release");
  if (held_logits != kNoVar) {
    tape.drop(held_logits);
  }
  if (held_loss != kNoVar) {
    tape.drop(held_loss);
  }
  if (held_prefix_cache) {
    held_prefix_cache->release(tape);
  }
  tape.release_nodes(0, tape.node_count());
  if (options.autocast_whole_step) {
    ops.clear_autocast_cache();
  }
  tape.finish();
  graph.unified_memory_bytes = optimizer.paged_state_bytes();
  dp->add_host_model_states(tape, params.all, graph.host_memory);
  graph.host_memory.optimizer_states = optimizer.host_state_bytes();
  graph.host_memory.saved_activations = tape.pinned_host().peak_bytes;
  graph.host_memory.saved_activations_pinned = tape.pinned_host().reserved_bytes;
  return graph;
}

Bytes saved_activation_bytes(const OpGraph& graph, int step, int layer) {
  Bytes total = 0;
  for (const Tensor& t : graph.tensors()) {
    const Op& producer = graph.op(t.producer);
    if (t.category == TensorCategory::kActivation && t.layer == layer && producer.step == step &&
        producer.micro_batch == 0 && (producer.phase == Phase::kForward || producer.phase == Phase::kLoss)) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace vramsim
