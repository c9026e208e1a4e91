// PEFT's trainable tokens (peft_trainable_tokens.h).
#include "sim/finetune/peft_trainable_tokens.h"

#include <charconv>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_method.h"
#include "sim/models/model_config.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {

bool is_trainable_tokens(const LoraOptions& o) { return o.method == PeftMethod::kTrainableTokens; }

int parse_token_indices(std::string_view text, std::int64_t vocab_size) {
  int count = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    std::int64_t index = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || index < 0) {
      throw InputError(
          fmt::format("--token-indices: '{}' at position {} is not a token index", item, pos + 1));
    }
    if (index >= vocab_size) {
      throw InputError(
          fmt::format("--token-indices: {} is not below the vocabulary size {}", index, vocab_size));
    }
    if (++count > 1 << 20) {
      throw InputError("--token-indices: more than 1,048,576 indices");
    }
    pos = comma + 1;
  }
  return count;
}

std::vector<VarId> create_trainable_tokens(EagerTape& tape, const ModelConfig& model, const LoraOptions& o,
                                           DType embedding_dtype) {
  const Shape rows{o.trainable_tokens, model.d_model};
  const VarId delta = tape.parameter("model.embed_tokens.trainable_tokens_delta.default", rows,
                                     adapter_dtype(embedding_dtype, DType::kFloat32, o));
  const VarId original =
      tape.input("model.embed_tokens.trainable_tokens_original.default", rows, embedding_dtype);
  return {delta, original};
}

VarId trainable_tokens_weight(TorchOps& ops, const std::string& name, VarId weight,
                              const std::vector<VarId>& tensors) {
  EagerTape& t = ops.tape();
  const VarId delta = tensors.at(0);
  // index = torch.tensor(token_indices).to(W.device); deltas = trainable_tokens_delta.to(W)
  const VarId index = t.constant(name + ".index", "_to_copy", {t.shape(delta).at(0)}, DType::kInt64);
  const VarId deltas = ops.to(name + ".trainable_tokens_delta.to(W)", delta, t.dtype(weight));
  OpCall c;
  c.name = name + ".index_copy";
  c.kind = "index_copy";
  c.inputs = {weight, index, deltas};
  c.outputs = {OutputSpec{"", t.shape(weight), t.dtype(weight)}};
  c.saved.inputs = {1};  // index_copy_backward: grad.index_fill(0, index, 0), grad.index_select(0, index)
  c.backward.grads = {GradRule{GradRule::Kind::kAlloc}, GradRule{GradRule::Kind::kNone},
                      GradRule{GradRule::Kind::kAlloc}};
  const VarId merged = t.op1(c);
  t.drop({index, deltas});
  return merged;
}

}  // namespace vramsim
