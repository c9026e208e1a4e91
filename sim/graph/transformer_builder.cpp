#include "sim/graph/transformer_builder.h"

#include <algorithm>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/graph/data_parallel.h"
#include "sim/graph/hf_generate.h"
#include "sim/graph/layer_code.h"
#include "sim/graph/optimizer.h"
#include "sim/graph/transformer_parts.h"

namespace vramsim {
namespace {

void check_model(const ModelConfig& m, const TrainingOptions& o) {
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
  if (o.lora.rank > 0 && !layer_code(m.code).follows_transformers()) {
    throw InputError(
        fmt::format("--lora-rank: the {} code's layers are not torch.nn.Linear, which PEFT's LoRA "
                    "wraps (use --model-code torch-modules)",
                    m.code));
  }
  if (o.bnb.format != BnbFormat::kNone && !layer_code(m.code).follows_transformers()) {
    throw InputError(fmt::format(
        "--base-weights: bitsandbytes quantizes the nn.Linear layers of transformers' model code; "
        "the {} code has none (use --model-code torch-modules)",
        m.code));
  }
  if (m.family == ModelFamily::kGpt2 && layer_code(m.code).follows_transformers() &&
      o.seq > m.max_positions) {
    throw InputError(
        fmt::format("--seq: {} exceeds the {} learned positions of {}", o.seq, m.max_positions, m.name));
  }
}

// The data-parallel units: each decoder layer's parameters, and the rest (the root), in model.parameters()
// order.
std::vector<ParameterUnit> parameter_units(const ModelConfig& model, const ModelParams& params) {
  std::vector<ParameterUnit> units(static_cast<std::size_t>(model.n_layers) + 1);
  for (std::size_t l = 0; l + 1 < units.size(); ++l) {
    units[l].layer = static_cast<int>(l);
  }
  units.back().layer = -1;
  const std::vector<ParameterShape> shapes = model.parameter_shapes();
  for (std::size_t i = 0; i < shapes.size() && i < params.all.size(); ++i) {
    const int l = shapes[i].layer;
    units[l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1].params.push_back(params.all[i]);
  }
  return units;
}

// One model forward: ids -> logits. Layers run inside checkpoint() for full recomputation; the per-forward
// tensors a checkpointed layer reads (rotary tables, the mask) are passed as its inputs so the replay in
// backward finds them alive, as HF passes position_embeddings to the checkpointed layer.
VarId forward(EmitContext& ctx, EagerTape& tape, VarId ids, DataParallelScheme& dp,
              const std::vector<ParameterUnit>& units) {
  dp.pre_forward(tape, units.back());
  VarId x = emit_embeddings(ctx, ids);
  for (int l = 0; l < ctx.model.n_layers; ++l) {
    tape.set_layer(l);
    dp.pre_forward(tape, units[static_cast<std::size_t>(l)]);
    VarId y;
    if (ctx.options.checkpointing == Checkpointing::kFull) {
      std::vector<VarId> inputs{x};
      for (VarId extra : {ctx.rope_cos, ctx.rope_sin, ctx.additive_mask}) {
        inputs.push_back(extra);
      }
      inputs.erase(std::remove(inputs.begin() + 1, inputs.end(), kNoVar), inputs.end());
      const bool rope = ctx.rope_cos != kNoVar;
      const bool mask = ctx.additive_mask != kNoVar;
      // torch.utils.checkpoint replays the layer under the autocast state of the forward (it re-enters
      // torch.autocast with the saved settings), although backward itself runs outside autocast; leaving
      // that fresh autocast context clears its weight-cast cache.
      const std::optional<DType> forward_autocast = ctx.ops.autocast();
      y = tape.checkpoint(layer_name(l, "checkpoint"), inputs,
                          [&ctx, l, rope, mask, forward_autocast](const std::vector<VarId>& in) {
                            const std::optional<DType> outer = ctx.ops.autocast();
                            ctx.ops.set_autocast(forward_autocast);
                            std::size_t k = 1;
                            if (rope) {
                              ctx.rope_cos = in[k++];
                              ctx.rope_sin = in[k++];
                            }
                            if (mask) {
                              ctx.additive_mask = in[k++];
                            }
                            const VarId out = emit_layer(ctx, l, in[0]);
                            if (forward_autocast && !outer) {
                              ctx.ops.clear_autocast_cache();
                            }
                            ctx.ops.set_autocast(outer);
                            return out;
                          });
    } else {
      y = emit_layer(ctx, l, x);
    }
    tape.drop(x);
    x = y;
    dp.post_forward(tape, units[static_cast<std::size_t>(l)]);
  }
  tape.set_layer(-1);
  const VarId logits = emit_final(ctx, x);  // drops x
  end_forward(ctx);
  return logits;
}

}  // namespace

AttentionKind attention_kernel(const ModelConfig& model, const TrainingOptions& options) {
  return resolve_attention(options.attention, model.head_dim, options.precision, options.compute_capability,
                           !options.inference,
                           layer_code(model.code).follows_transformers() && model.always_builds_mask);
}

OpGraph build_training_steps(const ModelConfig& model, const TrainingOptions& options) {
  validate(options);
  check_model(model, options);
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
  const ModelParams params = create_parameters(
      tape, model, param_dtype, [&dp](std::int64_t n) { return dp->resident_parameter_numel(n); },
      options.lora, options.bnb);
  const std::vector<ParameterUnit> units = parameter_units(model, params);
  const ModelBuffers buffers = create_buffers(tape, model, options);
  dp->construct(tape, units);
  tape.set_backward_layer_hooks(
      [&](int l) { dp->pre_backward(tape, units[l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1]); },
      [&](int l) {
        dp->post_backward(tape, units[l >= 0 ? static_cast<std::size_t>(l) : units.size() - 1]);
      });
  tape.begin_op("batch.to(device)", "_to_copy");
  const VarId ids = tape.input("input_ids", {options.batch, options.seq}, DType::kInt64);
  const VarId targets = tape.input("labels", {options.batch, options.seq}, DType::kInt64);
  OptimizerModel optimizer(tape, options, params.trainable, dp->optimizer_state_shards());
  const bool forward_only = options.forward_only || options.inference;
  if (!forward_only) {
    optimizer.construct();
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
  const std::optional<DType> low = autocast_dtype(options.precision);
  const AttentionKind attention = attention_kernel(model, options);
  const LayerCode& code = layer_code(model.code);

  VarId held_logits = kNoVar;  // the training loop's `logits` / `loss` variables
  VarId held_loss = kNoVar;
  std::size_t held_graph_begin = 0;
  for (int step = 1; step <= options.steps; ++step) {
    for (int micro = 0; micro < options.grad_accumulation; ++micro) {
      tape.set_step(step, micro);
      tape.set_phase(Phase::kForward);
      ops.set_autocast(low);
      const std::size_t graph_begin = tape.node_count();
      EmitContext ctx{ops,    model,  options, params,    buffers, {},
                      kNoVar, kNoVar, kNoVar,  attention, &code,   nullptr};
      tape.set_grad_enabled(!options.inference);  // `with torch.no_grad():` around the forward
      const VarId logits = forward(ctx, tape, ids, *dp, units);
      tape.set_grad_enabled(true);
      if (held_logits != kNoVar) {  // `logits = model(x)` rebinds the variable
        tape.drop(held_logits);
        if (forward_only) {
          tape.release_nodes(held_graph_begin, graph_begin);  // nothing else keeps the old graph alive
        }
      }
      held_logits = logits;
      held_graph_begin = graph_begin;
      if (forward_only) {
        if (!options.autocast_whole_step) {
          ops.set_autocast(std::nullopt);
          ops.clear_autocast_cache();
        }
        continue;
      }
      tape.set_phase(Phase::kLoss);
      const VarId loss = emit_loss(ctx, logits, targets);
      if (held_loss != kNoVar) {
        tape.drop(held_loss);
      }
      held_loss = loss;
      if (!options.autocast_whole_step) {
        ops.set_autocast(std::nullopt);
        ops.clear_autocast_cache();
      }
      tape.set_phase(Phase::kBackward);
      dp->begin_backward(tape);
      tape.backward(loss);
      dp->end_backward(tape, units.back());
    }
    if (forward_only) {
      continue;
    }
    tape.set_phase(Phase::kOptimizer);
    optimizer.step();
    if (options.autocast_whole_step) {
      ops.set_autocast(std::nullopt);
      ops.clear_autocast_cache();
    }
    tape.set_phase(Phase::kZeroGrad);
    optimizer.zero_grad();
  }
  // The script ends: its variables go away.
  tape.begin_op("end_of_loop", "release");
  if (held_logits != kNoVar) {
    tape.drop(held_logits);
  }
  if (held_loss != kNoVar) {
    tape.drop(held_loss);
  }
  tape.release_nodes(0, tape.node_count());
  if (options.autocast_whole_step) {
    ops.clear_autocast_cache();
  }
  tape.finish();
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
