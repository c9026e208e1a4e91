#include "sim/inference/hf_generate.h"

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "sim/inference/hf_kv_cache.h"
#include "sim/inference/vllm_weight_formats.h"
#include "sim/models/layer_code.h"
#include "sim/models/transformer_builder.h"
#include "sim/models/transformer_parts.h"

namespace vramsim {
namespace {

// One model forward of options.seq new tokens through the cache: ids -> last-position logits.
VarId cached_forward(EmitContext& ctx, EagerTape& tape, VarId ids) {
  VarId x = emit_embeddings(ctx, ids);
  for (int l = 0; l < ctx.model.n_layers; ++l) {
    tape.set_layer(l);
    const VarId y = emit_layer(ctx, l, x);
    tape.drop(x);
    x = y;
  }
  tape.set_layer(-1);
  const VarId logits = emit_final(ctx, x);
  end_forward(ctx);
  return logits;
}

}  // namespace

OpGraph build_generation(const ModelConfig& model, const TrainingOptions& options) {
  const LayerCode& code = layer_code(model.code);
  if (!code.follows_transformers()) {
    throw InputError(
        fmt::format("--generate: the {} code has no KV cache; generation follows Hugging Face "
                    "transformers' code (--model-code torch-modules)",
                    model.code));
  }
  SIM_ASSERT(options.generate_tokens > 0);
  OpGraph graph;
  EagerTape tape(graph);
  TorchOps ops(tape);
  const DType param_dtype = parameter_dtype(options.precision);
  tape.set_step(0);
  tape.set_phase(Phase::kSetup);
  tape.begin_op("model.to(device)", "_to_copy");
  // vLLM serves the weights in the format it loaded them in (--quantization): its decoder linears take that
  // format's bytes; the kernels' activation-side quantization (a one-byte copy of a linear's input) is not
  // modelled.
  StoredBytes stored;
  if (!options.vllm_quantization.empty()) {
    stored = [&options, param_dtype](const ParameterShape& s) -> std::optional<Bytes> {
      if (!vllm_quantizes(s)) {
        return std::nullopt;
      }
      return vllm_linear_weight_bytes(s, options.vllm_quantization, dtype_size_bytes(param_dtype),
                                      options.tensor_parallel);
    };
  }
  const ModelParams params =
      create_parameters(tape, model, param_dtype, {}, options.lora, options.bnb, {}, stored);
  const ModelBuffers buffers = create_buffers(tape, model, options);
  tape.begin_op("inputs.to(device)", "_to_copy");
  const std::int64_t b = options.batch, prompt = options.seq;
  VarId input_ids = tape.input("input_ids", {b, prompt}, DType::kInt64);
  VarId attention_mask = tape.input("attention_mask", {b, prompt}, DType::kInt64);
  const bool warm = options.warm != WarmProcess::kNone;
  if (warm && options.cublas_workspace_bytes > 0) {
    tape.begin_op("cublas workspace of the warm process", "getNewWorkspace");
    tape.allocate("cublas_workspace.main_thread", options.cublas_workspace_bytes, DType::kUInt8,
                  TensorCategory::kWorkspace);
  }
  ops.set_forward_workspace_bytes(warm ? 0 : options.cublas_workspace_bytes);
  tape.set_cuda_device(options.device);
  ops.set_lora(&params.lora, &options.lora, false);
  ops.set_bnb(&params.bnb, &options.bnb);
  const std::optional<DType> low = autocast_dtype(options.precision);  // `with torch.autocast(...)`
  TrainingOptions pass = options;
  pass.inference = true;
  pass.forward_only = true;
  const AttentionKind attention = attention_kernel(model, pass);

  tape.set_step(1);
  tape.set_phase(Phase::kForward);
  tape.begin_op(options.kv_cache == "paged" ? "CacheEngine._allocate_kv_cache" : "generate.cache",
                options.kv_cache == "dynamic" ? "DynamicCache" : "zeros");
  const std::unique_ptr<KvCache> cache =
      make_kv_cache(options.kv_cache, tape, model.n_layers, b, model.n_kv_heads, model.head_dim,
                    prompt + options.generate_tokens, options.kv_cache_fp8 ? DType::kUInt8 : param_dtype,
                    options.block_size, options.num_gpu_blocks);
  tape.set_grad_enabled(false);  // generate() is decorated with torch.no_grad()
  ops.set_autocast(low);
  for (int step = 1; step <= options.generate_tokens; ++step) {
    tape.set_step(step);
    tape.set_phase(Phase::kForward);
    const std::int64_t length = prompt + step - 1;  // input_ids' length before this step's token
    pass.seq = step == 1 ? prompt : 1;
    EmitContext ctx{ops,    model,  pass,   params,    buffers, {},
                    kNoVar, kNoVar, kNoVar, attention, &code,   cache.get()};
    tape.begin_op("generate.prepare_inputs", "slice");
    const VarId ids = step == 1 ? input_ids : tape.view(input_ids, {b, 1}, "input_ids[:, -1:]");
    if (step == 1) {
      tape.hold(ids);
    }
    const VarId logits = cached_forward(ctx, tape, ids);
    tape.drop(ids);
    cache->advance(pass.seq);
    // next_token_logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)
    tape.begin_op("generate.next_token_logits", "_to_copy");
    const VarId last = tape.view(logits, {b, model.vocab_size}, "logits[:, -1, :]");
    const VarId scores =
        tape.constant("generate.next_token_logits", "_to_copy", {b, model.vocab_size}, DType::kFloat32);
    tape.drop(last);
    const VarId next = tape.constant("generate.next_tokens", "argmax", {b}, DType::kInt64);
    tape.drop(scores);
    // input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1); the attention mask likewise
    const VarId ids_next = tape.constant("generate.input_ids", "cat", {b, length + 1}, DType::kInt64);
    tape.drop({input_ids, next});
    input_ids = ids_next;
    const VarId mask_next = tape.constant("generate.attention_mask", "cat", {b, length + 1}, DType::kInt64);
    tape.drop(attention_mask);
    attention_mask = mask_next;
    tape.drop(logits);  // del outputs
  }
  graph.kv_cache_bytes = cache->bytes(tape);
  ops.set_autocast(std::nullopt);
  tape.begin_op("generate.return", "release");
  ops.clear_autocast_cache();
  cache->release(tape);
  tape.drop({input_ids, attention_mask});
  tape.set_grad_enabled(true);
  tape.finish();
  return graph;
}

}  // namespace vramsim
