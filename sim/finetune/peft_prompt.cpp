// Prompt tuning and P-tuning (peft_prompt.h).
#include "sim/finetune/peft_prompt.h"

#include "sim/finetune/peft_prefix.h"

#include "sim/graph/eager_tape.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {

bool is_prompt_learning(const LoraOptions& o) {
  return o.method == PeftMethod::kPromptTuning || o.method == PeftMethod::kPTuning;
}

std::vector<AdapterTensor> prompt_encoder_tensors(const ModelConfig& model, const LoraOptions& o) {
  if (o.method == PeftMethod::kPrefixTuning) {
    return prefix_encoder_tensors(model, o);
  }
  const std::int64_t n = o.num_virtual_tokens;
  const std::int64_t d = model.d_model;  // token_dim: the model's hidden size
  if (o.method == PeftMethod::kPromptTuning) {
    return {{"prompt_encoder.default.embedding.weight", {n, d}}};
  }
  const std::int64_t h = o.encoder_hidden_size > 0 ? o.encoder_hidden_size : d;
  return {{"prompt_encoder.default.embedding.weight", {n, d}},
          {"prompt_encoder.default.mlp_head.0.weight", {h, d}},
          {"prompt_encoder.default.mlp_head.0.bias", {h}},
          {"prompt_encoder.default.mlp_head.2.weight", {h, h}},
          {"prompt_encoder.default.mlp_head.2.bias", {h}},
          {"prompt_encoder.default.mlp_head.4.weight", {d, h}},
          {"prompt_encoder.default.mlp_head.4.bias", {d}}};
}

std::vector<VarId> create_prompt_encoder(EagerTape& tape, const ModelConfig& model, const LoraOptions& o) {
  std::vector<VarId> out;
  for (const AdapterTensor& a : prompt_encoder_tensors(model, o)) {
    out.push_back(tape.parameter(a.name, a.shape, DType::kFloat32));  // made in the default dtype
  }
  return out;
}

VarId peft_prompt_embeddings(TorchOps& ops, const std::vector<VarId>& encoder, VarId inputs_embeds,
                             const LoraOptions& o) {
  EagerTape& t = ops.tape();
  const Shape shape = t.shape(inputs_embeds);  // a copy: new variables may move the tape's storage
  const std::int64_t b = shape.at(0);
  const std::int64_t n = o.num_virtual_tokens;
  // prompt_tokens[...].unsqueeze(0).expand(batch_size, -1).to(device): a host arange copied over
  const VarId tokens = t.constant("prompt_tokens.to(device)", "_to_copy", {b, n}, DType::kInt64);
  VarId prompts = ops.embedding("prompt_encoder.embedding", encoder.at(0), tokens);
  t.drop(tokens);
  if (encoder.size() == 7) {  // PromptEncoder.mlp_head
    for (int i = 0; i < 3; ++i) {
      const std::string name = "prompt_encoder.mlp_head." + std::to_string(2 * i);
      const VarId y = ops.linear(name, prompts, encoder.at(1 + 2 * i), encoder.at(2 + 2 * i));
      t.drop(prompts);
      prompts = y;
      if (i < 2) {
        // nn.ReLU: threshold_backward keeps the output, silu_backward the input: the same (b, n, h) bytes
        const VarId r = ops.silu(name + ".relu", prompts);
        t.drop(prompts);
        prompts = r;
      }
    }
  }
  const VarId cast = ops.to("prompts.to(inputs_embeds.dtype)", prompts, t.dtype(inputs_embeds));
  t.drop(prompts);
  // the word embeddings of the input's seq tokens: a view of the first seq rows
  const VarId words = t.view(inputs_embeds, {b, shape.at(1) - n, shape.at(2)}, "inputs_embeds");
  const VarId x = ops.cat_dim("torch.cat((prompts, inputs_embeds), dim=1)", cast, words, 1);
  t.drop({cast, words});
  return x;
}

}  // namespace vramsim
