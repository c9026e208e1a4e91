// Parameters, buffers and the per-code dispatch of the forward pieces.
#include "sim/models/transformer_parts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>
#include <utility>

#include "sim/core/assert.h"
#include "sim/core/error.h"
#include "sim/finetune/bnb_quant.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_prompt.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/models/layer_code.h"

namespace vramsim {
namespace {

// "<block>.experts.<e>.<projection>.weight" (Mixtral: w1 gate, w3 up, w2 down; Qwen2-MoE: gate_proj, up_proj,
// down_proj) and "mlp.shared_expert.<projection>.weight".
VarId* expert_role(LayerParams& p, std::string_view suffix) {
  LayerParams::Expert* expert = nullptr;
  std::string_view rest;
  if (const std::size_t shared = suffix.find("shared_experts."); shared != std::string_view::npos) {
    expert = &p.shared_expert;  // DeepSeek-V3's mlp.shared_experts
    rest = suffix.substr(shared + 15);
  } else if (const std::size_t at = suffix.find("experts.");
             at != std::string_view::npos && suffix.find("shared_expert.") == std::string_view::npos) {
    rest = suffix.substr(at + 8);
    const std::size_t dot = rest.find('.');
    std::size_t e = 0;
    for (const char ch : rest.substr(0, dot)) {
      e = e * 10 + static_cast<std::size_t>(ch - '0');
    }
    if (p.experts.size() <= e) {
      p.experts.resize(e + 1);
    }
    expert = &p.experts[e];
    rest = rest.substr(dot + 1);
  } else if (const std::size_t at2 = suffix.find("shared_expert."); at2 != std::string_view::npos) {
    expert = &p.shared_expert;
    rest = suffix.substr(at2 + 14);
  } else {
    return nullptr;
  }
  if (rest == "w1.weight" || rest == "gate_proj.weight") {
    return &expert->gate_w;
  }
  if (rest == "w3.weight" || rest == "up_proj.weight") {
    return &expert->up_w;
  }
  if (rest == "w2.weight" || rest == "down_proj.weight") {
    return &expert->down_w;
  }
  return nullptr;
}

// Parameter name suffix -> role, for the three naming schemes (HF GPT-2, HF Llama/Mistral/Qwen2, CS336).
VarId* layer_role(LayerParams& p, std::string_view suffix) {
  static const std::pair<std::string_view, VarId LayerParams::*> kRoles[] = {
      {"ln_1.weight", &LayerParams::norm1_w},
      {"ln_1.bias", &LayerParams::norm1_b},
      {"ln_2.weight", &LayerParams::norm2_w},
      {"ln_2.bias", &LayerParams::norm2_b},
      {"attn.c_attn.weight", &LayerParams::qkv_w},
      {"attn.c_attn.bias", &LayerParams::qkv_b},
      {"attn.c_proj.weight", &LayerParams::o_w},
      {"attn.c_proj.bias", &LayerParams::o_b},
      {"mlp.c_fc.weight", &LayerParams::fc1_w},
      {"mlp.c_fc.bias", &LayerParams::fc1_b},
      {"mlp.c_proj.weight", &LayerParams::fc2_w},
      {"mlp.c_proj.bias", &LayerParams::fc2_b},
      {"input_layernorm.weight", &LayerParams::norm1_w},
      {"post_attention_layernorm.weight", &LayerParams::norm2_w},
      {"self_attn.q_proj.weight", &LayerParams::q_w},
      {"self_attn.q_proj.bias", &LayerParams::q_b},
      {"self_attn.k_proj.weight", &LayerParams::k_w},
      {"self_attn.k_proj.bias", &LayerParams::k_b},
      {"self_attn.v_proj.weight", &LayerParams::v_w},
      {"self_attn.v_proj.bias", &LayerParams::v_b},
      {"self_attn.o_proj.weight", &LayerParams::o_w},
      {"self_attn.o_proj.bias", &LayerParams::o_b},
      {"mlp.gate_proj.weight", &LayerParams::gate_w},
      {"mlp.up_proj.weight", &LayerParams::up_w},
      {"mlp.down_proj.weight", &LayerParams::down_w},
      {"mlp.gate_up_proj.weight", &LayerParams::gate_up_w},
      {"self_attn.qkv_proj.weight", &LayerParams::qkv_w},
      {"pre_feedforward_layernorm.weight", &LayerParams::norm3_w},
      {"post_feedforward_layernorm.weight", &LayerParams::norm4_w},
      {"block_sparse_moe.gate.weight", &LayerParams::router_w},
      {"mlp.gate.weight", &LayerParams::router_w},
      {"mlp.shared_expert_gate.weight", &LayerParams::shared_expert_gate_w},
      {"input_layernorm.bias", &LayerParams::norm1_b},
      {"post_attention_layernorm.bias", &LayerParams::norm2_b},
      {"ln_attn.weight", &LayerParams::norm1_w},
      {"ln_attn.bias", &LayerParams::norm1_b},
      {"ln_mlp.weight", &LayerParams::norm2_w},
      {"ln_mlp.bias", &LayerParams::norm2_b},
      {"self_attention.query_key_value.weight", &LayerParams::qkv_w},
      {"self_attention.query_key_value.bias", &LayerParams::qkv_b},
      {"self_attention.dense.weight", &LayerParams::o_w},
      {"self_attention.dense.bias", &LayerParams::o_b},
      {"self_attn.dense.weight", &LayerParams::o_w},
      {"self_attn.dense.bias", &LayerParams::o_b},
      {"mlp.fc1.weight", &LayerParams::fc1_w},
      {"mlp.fc1.bias", &LayerParams::fc1_b},
      {"mlp.fc2.weight", &LayerParams::fc2_w},
      {"mlp.fc2.bias", &LayerParams::fc2_b},
      {"mlp.dense_h_to_4h.weight", &LayerParams::fc1_w},
      {"mlp.dense_h_to_4h.bias", &LayerParams::fc1_b},
      {"mlp.dense_4h_to_h.weight", &LayerParams::fc2_w},
      {"mlp.dense_4h_to_h.bias", &LayerParams::fc2_b},
      {"self_attn.q_norm.weight", &LayerParams::q_norm_w},
      {"self_attn.k_norm.weight", &LayerParams::k_norm_w},
      {"self_attn.sinks", &LayerParams::sinks},
      {"self_attn.q_a_proj.weight", &LayerParams::q_a_w},
      {"self_attn.q_a_layernorm.weight", &LayerParams::q_a_norm_w},
      {"self_attn.q_b_proj.weight", &LayerParams::q_b_w},
      {"self_attn.kv_a_proj_with_mqa.weight", &LayerParams::kv_a_w},
      {"self_attn.kv_a_layernorm.weight", &LayerParams::kv_a_norm_w},
      {"self_attn.kv_b_proj.weight", &LayerParams::kv_b_w},
      {"mlp.router.weight", &LayerParams::router_w},
      {"mlp.router.bias", &LayerParams::router_b},
      {"feed_forward.router.weight", &LayerParams::router_w},
      {"mlp.experts.gate_up_proj", &LayerParams::experts_gate_up_w},
      {"mlp.experts.gate_up_proj_bias", &LayerParams::experts_gate_up_b},
      {"mlp.experts.down_proj", &LayerParams::experts_down_w},
      {"mlp.experts.down_proj_bias", &LayerParams::experts_down_b},
      {"feed_forward.experts.gate_up_proj", &LayerParams::experts_gate_up_w},
      {"feed_forward.experts.down_proj", &LayerParams::experts_down_w},
      {"feed_forward.gate_proj.weight", &LayerParams::gate_w},
      {"feed_forward.up_proj.weight", &LayerParams::up_w},
      {"feed_forward.down_proj.weight", &LayerParams::down_w},
      {"ln1.weight", &LayerParams::norm1_w},
      {"ln2.weight", &LayerParams::norm2_w},
      {"attn.q_proj.weight", &LayerParams::q_w},
      {"attn.k_proj.weight", &LayerParams::k_w},
      {"attn.v_proj.weight", &LayerParams::v_w},
      {"attn.output_proj.weight", &LayerParams::o_w},
      {"ffn.w1.weight", &LayerParams::gate_w},
      {"ffn.w3.weight", &LayerParams::up_w},
      {"ffn.w2.weight", &LayerParams::down_w},
  };
  for (const auto& [name, member] : kRoles) {
    if (suffix == name) {
      return &(p.*member);
    }
  }
  return expert_role(p, suffix);
}

VarId* model_role(ModelParams& p, std::string_view name) {
  if (name.ends_with("wte.weight") || name.ends_with("embed_tokens.weight") ||
      name == "transformer.word_embeddings.weight" || name == "token_embeddings.weight") {
    return &p.embed;
  }
  if (name.ends_with("wpe.weight")) {
    return &p.pos;
  }
  if (name.ends_with("ln_f.weight") || name == "model.norm.weight" || name == "ln_final.weight" ||
      name == "model.final_layernorm.weight") {
    return &p.final_w;
  }
  if (name.ends_with("ln_f.bias") || name == "model.norm.bias" || name == "model.final_layernorm.bias") {
    return &p.final_b;
  }
  if (name == "lm_head.bias") {
    return &p.head_b;
  }
  if (name == "lm_head.weight") {
    return &p.head;
  }
  return nullptr;
}

// get_peft_model: each targeted linear gets the method's tensors (LoRA: lora_A (r, in) and lora_B (out, r);
// the catalogue: peft_method.h), made after the base model is on the device; the base parameters are
// frozen. `resident_numel` (optional): the elements a data-parallel rank keeps of an adapter (its shard).
// `quantized_base_dtype`: the adapters' dtype where the base weight is quantized (not a float).
// `shapes`: the parameters this GPU holds (create_parameters' `keep`), in p.all's order.
void create_lora_adapters(EagerTape& tape, const ModelConfig& model, const LoraOptions& lora,
                          const std::function<std::int64_t(std::int64_t)>& resident_numel, ModelParams& p,
                          DType quantized_base_dtype, const std::vector<ParameterShape>& shapes) {
  const PeftLinearMethod& method = *linear_method(lora);
  const std::vector<std::string> targets = lora_target_modules(lora, model);
  const std::vector<std::string> feedforward =
      lora.method == PeftMethod::kIa3 ? ia3_feedforward_modules(lora, model) : std::vector<std::string>{};
  SIM_ASSERT(shapes.size() == p.all.size());
  const auto resident = [&](std::int64_t n) { return resident_numel ? resident_numel(n) : -1; };
  // nn.Linear stores (out, in); GPT-2's Conv1D (in, out)
  const bool conv1d = model.family == ModelFamily::kGpt2 && !model.linear_weights;
  p.trainable.clear();
  std::int64_t max_in = 0, max_out = 0;
  DType adapter = DType::kFloat32;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const ParameterShape& s = shapes[i];
    const VarId base = p.all[i];
    if (!lora.base_gradients_computed) {
      tape.freeze(base);
    }
    if (!is_lora_target(s, targets, lora.all_linear)) {
      continue;
    }
    const std::int64_t in = conv1d ? s.shape[0] : s.shape[1];
    const std::int64_t out = conv1d ? s.shape[1] : s.shape[0];
    max_in = std::max(max_in, in);
    max_out = std::max(max_out, out);
    const std::string module = s.name.substr(0, s.name.size() - 7);  // without ".weight"
    tape.set_layer(s.layer);
    LoraAdapter a;
    // PEFT: the base weight's float dtype, fp32 under autocast_adapter_dtype. A quantized base keeps the
    // earlier rule: its storage dtype when that is a float (bnb_4bit_quant_storage), else fp32, as TRL's
    // peft_module_casting_to_bf16 leaves QLoRA adapters; torchtune's LoRALinear makes its nn.Linear adapters
    // under the recipe's default dtype (training.set_default_dtype(self._dtype) around
    // config.instantiate), NF4 base or not
    const bool quantized = p.bnb.contains(base) || !is_floating(tape.dtype(base));
    adapter = quantized ? (is_floating(tape.dtype(base)) ? tape.dtype(base) : quantized_base_dtype)
                        : adapter_dtype(tape.dtype(base), quantized_base_dtype, lora);
    for (const AdapterTensor& t :
         method.layer_tensors(in, out, lora, is_lora_target(s, feedforward, false))) {
      const VarId v = tape.parameter(module + "." + t.name, t.shape, adapter, resident(numel(t.shape)));
      if (t.trainable) {
        p.trainable.push_back(v);
      } else {
        tape.freeze(v);
      }
      a.params.push_back(v);
    }
    if (lora.method == PeftMethod::kLora) {
      a.lora_a = a.params.at(0);
      a.lora_b = a.params.at(1);
    }
    p.lora.emplace(base, a);
  }
  tape.set_layer(-1);
  if (p.lora.empty()) {
    throw InputError(fmt::format(
        "--lora-targets: no linear layer of {} matches {}", model.name,
        lora.all_linear ? std::string("all-linear") : fmt::format("{}", fmt::join(targets, ","))));
  }
  std::vector<VarId> shared;  // VeRA's BufferDicts: frozen, registered once
  for (const AdapterTensor& t : method.shared_tensors(max_in, max_out, lora)) {
    const VarId v = tape.parameter("base_model." + t.name, t.shape, adapter);
    tape.freeze(v);
    shared.push_back(v);
  }
  for (auto& [base, a] : p.lora) {
    a.shared = shared;
  }
}

// prepare_model_for_kbit_training: `param.data = param.data.to(torch.float32)` for every fp16/bf16 parameter
// that is not quantized, in model.parameters() order: the fp32 copy, then the half-precision one freed.
void prepare_model_for_kbit_training(EagerTape& tape, const std::vector<ParameterShape>& shapes,
                                     ModelParams& p) {
  tape.begin_op("prepare_model_for_kbit_training", "_to_copy");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const VarId old = p.all[i];
    const DType d = tape.dtype(old);
    if (p.bnb.contains(old) || !is_floating(d) || d == DType::kFloat32) {
      continue;
    }
    tape.set_layer(shapes[i].layer);
    p.all[i] = tape.parameter(shapes[i].name, shapes[i].shape, DType::kFloat32);
    tape.drop(old);
  }
}

}  // namespace

DType bnb_load_dtype(DType dtype) { return dtype == DType::kFloat32 ? DType::kFloat16 : dtype; }

std::string layer_name(int layer, const char* what) { return fmt::format("layers.{}.{}", layer, what); }

ParameterRole parameter_role(const ParameterShape& s) {
  if (s.layer >= 0) {
    return ParameterRole::kLayer;
  }
  ModelParams roles;
  const VarId* slot = model_role(roles, s.name);
  if (slot == &roles.embed) {
    return ParameterRole::kEmbedding;
  }
  return slot == &roles.pos ? ParameterRole::kPositions : ParameterRole::kHead;
}

ModelParams create_parameters(EagerTape& tape, const ModelConfig& model, DType dtype,
                              const std::function<std::int64_t(std::int64_t)>& resident_numel,
                              const LoraOptions& lora, const BnbOptions& bnb, const KeepParameter& keep,
                              const StoredBytes& stored_bytes) {
  ModelParams p;
  p.layers.resize(static_cast<std::size_t>(model.n_layers));
  std::vector<ParameterShape> shapes = model.parameter_shapes();
  if (keep) {  // the parameters this GPU holds; `shapes` then lines up with p.all
    std::erase_if(shapes, [&keep](const ParameterShape& s) { return !keep(s, parameter_role(s)); });
  }
  const bool quantized = bnb.format != BnbFormat::kNone;
  // bitsandbytes loads fp32 checkpoints as fp16 (from_pretrained's default torch_dtype with quantization);
  // torchtune builds the model in its training dtype.
  const DType load_dtype = quantized && bnb.format != BnbFormat::kTorchaoNf4 ? bnb_load_dtype(dtype) : dtype;
  for (const ParameterShape& s : shapes) {
    tape.set_layer(s.layer);
    if (quantized && is_bnb_target(s)) {
      // nn.Linear stores (out, in); GPT-2's Conv1D (in, out), transposed when transformers quantizes it
      const bool conv1d = model.family == ModelFamily::kGpt2 && !model.linear_weights;
      p.all.push_back(load_bnb_weight(tape, s.name, s.shape[conv1d ? 1 : 0], s.shape[conv1d ? 0 : 1],
                                      load_dtype, bnb, p.bnb, resident_numel));
      continue;
    }
    std::int64_t resident = resident_numel ? resident_numel(numel(s.shape)) : -1;
    if (const std::optional<Bytes> stored = stored_bytes ? stored_bytes(s) : std::nullopt) {
      const Bytes element = dtype_size_bytes(load_dtype);
      resident = static_cast<std::int64_t>((*stored + element - 1) / element);
    }
    p.all.push_back(tape.parameter(s.name, s.shape, load_dtype, resident));
  }
  if (quantized && bnb.prepare_kbit_training) {
    prepare_model_for_kbit_training(tape, shapes, p);
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const ParameterShape& s = shapes[i];
    VarId* slot = nullptr;
    if (s.layer >= 0) {
      // "<prefix>.<layer>.<suffix>": the suffix starts after the layer index.
      const std::string key = fmt::format(".{}.", s.layer);
      const std::size_t at = s.name.find(key);
      slot = layer_role(p.layers[static_cast<std::size_t>(s.layer)],
                        std::string_view(s.name).substr(at + key.size()));
    } else {
      slot = model_role(p, s.name);
    }
    if (slot != nullptr) {
      *slot = p.all[i];
    }
  }
  tape.set_layer(-1);
  if (p.head == kNoVar) {
    p.head = p.embed;  // tied embeddings
  }
  p.trainable = p.all;
  if (quantized) {
    for (VarId v : p.all) {
      tape.freeze(v);  // prepare_model_for_kbit_training freezes the base model; Params4bit never trains
    }
    p.trainable.clear();
  }
  if (is_prompt_learning(lora) || lora.method == PeftMethod::kPrefixTuning) {
    // every base parameter frozen; the prompt (prefix) encoder trains
    for (VarId v : p.all) {
      tape.freeze(v);
    }
    p.peft_prompt = create_prompt_encoder(tape, model, lora);
    p.trainable = p.peft_prompt;
  } else if (is_trainable_tokens(lora)) {  // the embedding's rows only
    for (VarId v : p.all) {
      tape.freeze(v);
    }
    p.trainable_tokens = create_trainable_tokens(tape, model, lora, tape.dtype(p.embed));
    p.trainable = {p.trainable_tokens.at(0)};
  } else if (lora.enabled()) {
    create_lora_adapters(tape, model, lora, resident_numel, p,
                         bnb.format == BnbFormat::kTorchaoNf4 ? dtype : DType::kFloat32, shapes);
  }
  return p;
}

ModelBuffers create_buffers(EagerTape& tape, const ModelConfig& model, const TrainingOptions& options) {
  return layer_code(model.code).create_buffers(tape, model, options);
}

VarId emit_embeddings(EmitContext& ctx, VarId ids) { return ctx.code->embeddings(ctx, ids); }

VarId emit_layer(EmitContext& ctx, int layer, VarId x) { return ctx.code->layer(ctx, layer, x); }

VarId emit_final(EmitContext& ctx, VarId x) { return ctx.code->final_norm_and_head(ctx, x); }

VarId emit_loss(EmitContext& ctx, VarId logits, VarId targets) {
  return ctx.code->loss(ctx, logits, targets);
}

void end_forward(EmitContext& ctx) {
  for (VarId v : ctx.forward_locals) {
    ctx.ops.tape().drop(v);
  }
  ctx.forward_locals.clear();
  ctx.rope_cos = ctx.rope_sin = ctx.additive_mask = kNoVar;
}

}  // namespace vramsim
