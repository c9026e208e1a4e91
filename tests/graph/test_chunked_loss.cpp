// --loss chunked-ce (torchtune's CEWithChunkedOutputLoss) against the plain Hugging Face loss: which logits
// tensors exist, how large, and which are alive together, counted by hand on a small model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "graph_test_util.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// A 2-layer Llama (vocab 1000, d_model 64), batch 2 x seq 64, bf16: the logits are 2 x 64 x 1000 = 128,000
// elements: 256,000 B in bf16, 512,000 B in fp32. Eight chunks of 8 positions: 16,000 elements each,
// 32,000 B in bf16, 64,000 B in fp32.
constexpr Bytes kLogitsFp32 = 512'000;
constexpr Bytes kChunkBf16 = 32'000;
constexpr Bytes kChunkFp32 = 64'000;

struct Run {
  OpGraph graph;
  AllocationSchedule schedule;
};

Run run(LossKind loss, bool compile_loss = false) {
  TrainingOptions o;
  if (compile_loss) {  // torchtune's recipe with compile=True: per-layer compile and compile_loss
    o.compile = CompileMode::kDefault;
    o.compile_scope = CompileScope::kLayer;
    o.compile_loss = true;
  }
  o.batch = 2;
  o.seq = 64;
  o.steps = 1;
  o.precision = Precision::kBf16;
  o.loss = loss;
  o.cublas_workspace_bytes = 0;
  Run r{build_training_steps(test::tiny_model("tinyllama-1.1b"), o), {}};
  r.schedule = build_allocation_schedule(r.graph);
  return r;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Walks the schedule: for tensors whose name satisfies `match`, the most alive at once, and the bytes alive
// just before event `at`.
struct Alive {
  std::size_t most = 0;
  Bytes bytes_at = 0;
  std::size_t count_at = 0;
};
template <class Match>
Alive alive(const Run& r, Match match, std::size_t at) {
  std::map<TensorId, Bytes> live;
  Alive a;
  for (std::size_t i = 0; i < r.schedule.events.size(); ++i) {
    if (i == at) {
      for (const auto& [t, bytes] : live) {
        a.bytes_at += bytes;
      }
      a.count_at = live.size();
    }
    const TensorId t = r.schedule.event_tensor[i];
    const TraceEvent& e = r.schedule.events[i];
    if (!match(r.graph.tensor(t).name)) {
      continue;
    }
    if (e.action == TraceAction::kAlloc) {
      live[t] = e.size_bytes;
      a.most = std::max(a.most, live.size());
    } else if (e.action == TraceAction::kFreeCompleted) {
      live.erase(t);
    }
  }
  return a;
}

}  // namespace

TEST_CASE("chunked-ce: one chunk's fp32 logits at a time, every chunk's log-probabilities saved",
          "[quick][graph]") {
  const Run chunked = run(LossKind::kChunkedCrossEntropy);
  const std::size_t backward = chunked.schedule.phase_begin(1, Phase::kBackward)->event_index;
  const std::size_t loss = chunked.schedule.phase_begin(1, Phase::kLoss)->event_index;

  // logits_chunk.float(): 64,000 B each, only one alive at a time (the next chunk's comes after this one's
  // cross-entropy has returned).
  const Alive fp32 = alive(
      chunked,
      [](const std::string& n) { return starts_with(n, "loss.chunk") && ends_with(n, ".logits_float"); },
      backward);
  CHECK(fp32.most == 1);
  CHECK(fp32.count_at == 0);
  // F.cross_entropy saves log_softmax's output for backward: all 8 chunks at the start of backward,
  // 8 x 64,000 = 512,000 B = b x s x V x 4.
  const Alive saved = alive(
      chunked,
      [](const std::string& n) {
        return starts_with(n, "loss.chunk") && ends_with(n, ".cross_entropy.log_softmax");
      },
      backward);
  CHECK(saved.count_at == 8);
  CHECK(saved.bytes_at == 8 * kChunkFp32);
  CHECK(saved.bytes_at == kLogitsFp32);
  // The bf16 chunks of the output projection: all 8 alive while the loss runs (the recipe's list), none
  // once backward starts (`del logits`).
  const Alive head = alive(
      chunked,
      [](const std::string& n) {
        return starts_with(n, "output.chunk") && n.find('.', 7) == std::string::npos;
      },
      backward);
  CHECK(head.most == 8);
  CHECK(head.count_at == 0);
  const Alive head_in_loss = alive(
      chunked,
      [](const std::string& n) {
        return starts_with(n, "output.chunk") && n.find('.', 7) == std::string::npos;
      },
      loss);
  CHECK(head_in_loss.count_at == 8);
  CHECK(head_in_loss.bytes_at == 8 * kChunkBf16);

  // The plain loss: logits.float() (512,000 B) and its log_softmax (512,000 B) are alive together.
  const Run plain = run(LossKind::kCrossEntropy);
  const std::size_t plain_backward = plain.schedule.phase_begin(1, Phase::kBackward)->event_index;
  const Alive both = alive(
      plain,
      [](const std::string& n) { return n == "loss.logits_float" || n == "loss.cross_entropy.log_softmax"; },
      plain_backward);
  CHECK(both.most == 2);
  CHECK(both.bytes_at == kLogitsFp32);  // at backward only the saved log-probabilities remain
}

// torchtune's compile_loss (torchtune/training/_compile.py) compiles CEWithChunkedOutputLoss.
// compute_cross_entropy on its own: each chunk's F.cross_entropy(logits.float(), labels) is one graph. For
// its backward the min-cut partitioner keeps the bf16 chunk (a graph input, 32,000 B) and per-row statistics
// (16 rows), and recomputes the softmax from them; the fp32 upcast and log-probabilities (64,000 B a chunk)
// are never buffers. So at the start of backward the 8 bf16 chunks are alive (held by the compiled graphs
// although the recipe deleted its list) and no fp32 chunk is: 256,000 B instead of 512,000 B.
TEST_CASE("chunked-ce with compile_loss: the bf16 chunks are saved, not fp32 log-probabilities",
          "[quick][graph]") {
  const Run compiled = run(LossKind::kChunkedCrossEntropy, /*compile_loss=*/true);
  const std::size_t backward = compiled.schedule.phase_begin(1, Phase::kBackward)->event_index;
  std::map<TensorId, Bytes> live;
  for (std::size_t i = 0; i < backward; ++i) {
    const TensorId t = compiled.schedule.event_tensor[i];
    const TraceEvent& e = compiled.schedule.events[i];
    if (e.action == TraceAction::kAlloc) {
      live[t] = e.size_bytes;
    } else if (e.action == TraceAction::kFreeCompleted) {
      live.erase(t);
    }
  }
  int bf16_chunks = 0;
  int fp32_chunks = 0;
  for (const auto& [t, bytes] : live) {
    bf16_chunks += bytes == kChunkBf16 ? 1 : 0;
    fp32_chunks += bytes == kChunkFp32 && compiled.graph.tensor(t).dtype == DType::kFloat32 ? 1 : 0;
  }
  CHECK(bf16_chunks == 8);
  CHECK(fp32_chunks == 0);
}

TEST_CASE("loss options: errors name the option", "[quick][predict]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.loss = "chunked";
  CHECK_THROWS_WITH(make_request(a), "--loss: unknown value 'chunked' (known: ce, chunked-ce)");
  a.loss = "ce";
  a.loss_chunks = 4;
  CHECK_THROWS_WITH(make_request(a), "--loss-chunks: chunked-ce's option (use it with --loss chunked-ce)");
  a.loss = "chunked-ce";
  a.loss_chunks = 0;
  CHECK_THROWS_WITH(make_request(a), "--loss-chunks: 0 is not in 1..4096");
  a.loss_chunks = 8;
  a.inference = true;
  CHECK_THROWS_WITH(
      make_request(a),
      "--loss chunked-ce: a training loss does not apply to --inference, --forward-only or --generate");
  a.inference = false;
  a.model = "cs336-small";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--loss chunked-ce: torchtune's loss"));
  a.model = "tinyllama-1.1b";
  CHECK_NOTHROW(make_request(a));
  CHECK_FALSE(make_request(a).options.compile_loss);  // eager: nothing compiled
  a.compile_loss = "on";
  CHECK_THROWS_WITH(make_request(a),
                    Catch::StartsWith("--compile-loss on: needs --compile with --loss chunked-ce"));
  a.compile_loss = "sometimes";
  CHECK_THROWS_WITH(make_request(a), "--compile-loss: unknown value 'sometimes' (expected auto, on or off)");
  a.compile_mode = "default";
  a.compile_scope = "layer";
  a.compile_loss = "auto";  // torchtune's recipes: compile=True compiles the loss too
  CHECK(make_request(a).options.compile_loss);
  a.compile_loss = "off";
  CHECK_FALSE(make_request(a).options.compile_loss);
}
