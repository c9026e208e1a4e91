// Activation memory per layer against Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models"), Section 4: a GPT layer with 16-bit activations and 1-byte dropout masks saves
// s*b*h*(34 + 5*a*s/h) bytes; with full recomputation, 2*s*b*h.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

using test::megatron_gpt;

TrainingOptions paper_options(std::int64_t s, std::int64_t b) {
  TrainingOptions o = test::megatron_options(s, b);
  o.forward_only = true;  // autograd is on: the forward saves what backward would need
  o.steps = 1;
  return o;
}

}  // namespace

TEST_CASE("Korthikanti et al.: s*b*h*(34 + 5as/h) bytes saved per layer", "[quick][graph]") {
  const auto [h, a, s, b, mib] =
      GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t, double>({
          {6144, 64, 2048, 4, 6752.0},
          {12288, 96, 2048, 1, 2736.0},
      }));
  const Bytes formula = static_cast<Bytes>(s * b * h * 34 + 5 * a * s * s * b);
  REQUIRE(static_cast<double>(formula) / static_cast<double>(kMiB) == mib);
  const OpGraph g = build_training_steps(megatron_gpt(h, a, s), paper_options(s, b));
  CHECK(saved_activation_bytes(g, 1, 0) == formula);
  CHECK(saved_activation_bytes(g, 1, 1) == formula);
}

TEST_CASE("Korthikanti et al.: full recomputation keeps 2*s*b*h bytes per layer", "[quick][graph]") {
  const auto [h, a, s, b, mib] =
      GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t, double>({
          {6144, 64, 2048, 4, 96.0},
          {12288, 96, 2048, 1, 48.0},
      }));
  TrainingOptions o = paper_options(s, b);
  o.checkpointing = Checkpointing::kFull;
  const OpGraph g = build_training_steps(megatron_gpt(h, a, s), o);
  CHECK(static_cast<double>(saved_activation_bytes(g, 1, 0)) / static_cast<double>(kMiB) == mib);
  CHECK(saved_activation_bytes(g, 1, 1) == static_cast<Bytes>(2 * s * b * h));
}

TEST_CASE("Korthikanti et al.: PyTorch eager saves the paper's tensors plus LayerNorm statistics",
          "[quick][graph]") {
  const std::int64_t h = 6144, a = 64, s = 2048, b = 4;
  TrainingOptions o = paper_options(s, b);
  o.megatron_accounting = false;
  const OpGraph g = build_training_steps(megatron_gpt(h, a, s), o);
  // + 2 LayerNorms x (mean, rstd) x 4 bytes per token. HF's GPT2Attention._attn takes
  // nn.functional.softmax(attn_weights, dim=-1) in the scores' dtype (bf16 here), 2 bytes per score as the
  // paper counts.
  const Bytes expected = static_cast<Bytes>(s * b * h * 34 + 5 * a * s * s * b + 16 * s * b);
  CHECK(saved_activation_bytes(g, 1, 0) == expected);

  // Models whose eager attention calls softmax(attn_weights, dim=-1, dtype=torch.float32) (Llama and those
  // written after it, GPTBigCode's attention_softmax_in_fp32) keep 4 bytes per score instead of 2.
  ModelConfig upcast = megatron_gpt(h, a, s);
  upcast.softmax_in_fp32 = true;
  CHECK(saved_activation_bytes(build_training_steps(upcast, o), 1, 0) ==
        expected + static_cast<Bytes>(2 * a * s * s * b));

  // HF's gelu_new written out in Python (0.5 * x * (1 + tanh(c * (x + 0.044715 * x^3)))) saves, besides x
  // (pow's input, the GELU input already counted), tanh's result, 0.5 * x and 1 + tanh: three more 2-byte
  // tensors of the MLP's 4h width, 24 bytes per token per layer.
  ModelConfig hf = megatron_gpt(h, a, s);
  hf.gelu = GeluKind::kNew;
  const OpGraph g_new = build_training_steps(hf, o);
  CHECK(saved_activation_bytes(g_new, 1, 0) == expected + static_cast<Bytes>(24 * s * b * h));
}

TEST_CASE("Korthikanti et al. Table 2, tensor parallel: s*b*h*(10 + 24/t + 5as/(ht)) per layer and rank",
          "[quick][graph]") {
  // One rank of Megatron tensor parallelism (sim/parallel/tensor_parallel.h). GPT-3-like layer of the paper's
  // Table 3 (h 12288, a 96) at s 2048, b 1, t 8: 5as/(ht) = 5 * 96 * 2048 / (12288 * 8) = 10, so
  // 10 + 3 + 10 = 23 s*b*h.
  const std::int64_t h = 12288, a = 96, s = 2048, b = 1, t = 8;
  const OpGraph g = build_training_steps(tensor_parallel_rank(megatron_gpt(h, a, s), static_cast<int>(t)),
                                         paper_options(s, b));
  const std::int64_t sbh = s * b * h;
  CHECK(saved_activation_bytes(g, 1, 0) == sbh * 10 + sbh * 24 / t + 5 * a * s * s * b / t);
  CHECK(saved_activation_bytes(g, 1, 0) == 23 * sbh);
}

TEST_CASE("Korthikanti et al. Table 2, tensor + sequence parallel, with and without selective recomputation",
          "[quick][graph]") {
  // Sequence parallelism (Section 4.2.2) splits the 10 s*b*h that tensor parallelism leaves whole (the
  // LayerNorm inputs, the first linears' inputs, the dropout masks) along the sequence: s*b*h*(34/t +
  // 5as/(ht)); selective recomputation (Section 5) drops the 5as/(ht) of the attention core: s*b*h*34/t.
  // Same layer as above: 34/8 + 10 = 14.25 s*b*h, and 4.25 s*b*h.
  const std::int64_t h = 12288, a = 96, s = 2048, b = 1, t = 8;
  const std::int64_t sbh = s * b * h;
  TrainingOptions o = paper_options(s, b);
  o.tensor_parallel = static_cast<int>(t);
  o.sequence_parallel = true;
  const ModelConfig rank = tensor_parallel_rank(megatron_gpt(h, a, s), static_cast<int>(t));
  const OpGraph g = build_training_steps(rank, o);
  CHECK(saved_activation_bytes(g, 1, 0) == sbh * 34 / t + 5 * a * s * s * b / t);
  CHECK(saved_activation_bytes(g, 1, 1) == sbh * 34 / t + 5 * a * s * s * b / t);
  CHECK(4 * saved_activation_bytes(g, 1, 0) == 57 * sbh);  // 14.25 s*b*h

  o.checkpointing = Checkpointing::kSelective;
  const OpGraph selective = build_training_steps(rank, o);
  CHECK(saved_activation_bytes(selective, 1, 0) == sbh * 34 / t);
  CHECK(4 * saved_activation_bytes(selective, 1, 0) == 17 * sbh);  // 4.25 s*b*h

  // Without sequence parallelism, selective recomputation leaves s*b*h*(10 + 24/t) (Table 2, row 3).
  o.sequence_parallel = false;
  CHECK(saved_activation_bytes(build_training_steps(rank, o), 1, 0) == sbh * 10 + sbh * 24 / t);
}
