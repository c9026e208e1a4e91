// --loss chunked-ce (torchtune's CEWithChunkedOutputLoss) against the plain Hugging Face loss: which logits
// tensors exist, how large, and which are alive together, counted by hand on a small model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "loss_test_util.h"
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

using Run = test::ScheduledRun;

Run run(LossKind loss, bool compile_loss = false, bool free_logits = false) {
  TrainingOptions o = test::loss_test_options();
  o.free_logits_before_backward = free_logits;
  if (compile_loss) {  // torchtune's recipe with compile=True: per-layer compile and compile_loss
    o.compile = CompileMode::kDefault;
    o.compile_scope = CompileScope::kLayer;
    o.compile_loss = true;
  }
  o.loss = loss;
  return test::loss_test_run(o);
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
  CHECK_THROWS_WITH(
      make_request(a),
      "--loss: unknown value 'chunked' (known: ce, ce-shift-logits, chunked-ce, torchtitan-chunked-ce)");
  a.loss = "ce";
  a.loss_chunks = 4;
  CHECK_THROWS_WITH(
      make_request(a),
      "--loss-chunks: the chunked losses' option (use it with --loss chunked-ce or torchtitan-chunked-ce)");
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
  a.compile_loss = "on";                              // the loss compiled alone, the model eager
  CHECK(make_request(a).options.compile_loss);
  a.compile_loss = "sometimes";
  CHECK_THROWS_WITH(make_request(a), "--compile-loss: unknown value 'sometimes' (expected auto, on or off)");
  a.compile_mode = "default";
  a.compile_scope = "layer";
  a.compile_loss = "auto";  // torchtune's recipes: compile=True compiles the loss too
  CHECK(make_request(a).options.compile_loss);
  a.compile_loss = "off";
  CHECK_FALSE(make_request(a).options.compile_loss);
}

// --loss torchtitan-chunked-ce: torchtitan's chunked_cross_entropy_loss (pytorch/torchtitan#996, e23bb707d,
// torchtitan/components/loss.py), counted by hand on the small model above (logits 2 x 64 x 1000 bf16 =
// 256,000 B; 8 chunks of 2 x 8 x 1000):
//   * the model returns the whole logits (lm_head, 256,000 B), which the loop holds until `del pred`;
//   * logits.chunk(8, dim=1) of a batch of 2 is not contiguous, so pred.flatten(0, 1) copies each chunk
//     (2 x 8 x 1000 x 2 = 32,000 B), freed once `.float()` (64,000 B) has read it: one of each alive at a
//     time;
//   * F.cross_entropy saves each chunk's fp32 log-probabilities: 8 x 64,000 = 512,000 B at backward;
//     labels.flatten(0, 1) copies each labels chunk (2 x 8 int64 = 128 B), which nll_loss saves;
//   * backward: SplitBackward0 gets all 8 chunk gradients (bf16, 32,000 B each) before split_backward's
//     at::cat makes the logits' gradient (256,000 B): 8 x 32,000 + 256,000 = 512,000 B together.
TEST_CASE("torchtitan-chunked-ce: whole logits, one chunk upcast at a time, chunk gradients cat at once",
          "[quick][graph]") {
  const Run tt = run(LossKind::kTorchtitanChunkedCrossEntropy, false, /*free_logits=*/true);
  const std::size_t backward = tt.schedule.phase_begin(1, Phase::kBackward)->event_index;
  const std::size_t loss = tt.schedule.phase_begin(1, Phase::kLoss)->event_index;

  const auto logits = [](const std::string& n) { return n == "lm_head"; };
  CHECK(alive(tt, logits, loss).bytes_at == 256'000);
  CHECK(alive(tt, logits, backward).count_at == 0);  // del pred
  const Alive copies = alive(
      tt, [](const std::string& n) { return starts_with(n, "loss.chunk") && ends_with(n, ".flatten.clone"); },
      backward);
  CHECK(copies.most == 1);
  CHECK(test::sizes_named(tt.graph, "loss.chunk3.flatten.clone") == std::vector<Bytes>{kChunkBf16});
  const Alive fp32 = alive(
      tt, [](const std::string& n) { return starts_with(n, "loss.chunk") && ends_with(n, ".logits_float"); },
      backward);
  CHECK(fp32.most == 1);
  CHECK(fp32.count_at == 0);
  CHECK(test::sizes_named(tt.graph, "loss.chunk3.logits_float") == std::vector<Bytes>{kChunkFp32});
  const Alive saved = alive(
      tt,
      [](const std::string& n) {
        return starts_with(n, "loss.chunk") && ends_with(n, ".cross_entropy.log_softmax");
      },
      backward);
  CHECK(saved.count_at == 8);
  CHECK(saved.bytes_at == 8 * kChunkFp32);
  const Alive labels = alive(
      tt,
      [](const std::string& n) {
        return starts_with(n, "loss.chunk") && ends_with(n, ".labels_flatten.clone");
      },
      backward);
  CHECK(labels.count_at == 8);
  CHECK(labels.bytes_at == 8 * 128);

  // SplitBackward0: the event that allocates the logits' gradient finds the 8 chunk gradients alive.
  std::size_t cat = 0;
  for (std::size_t i = 0; i < tt.schedule.events.size(); ++i) {
    if (tt.schedule.events[i].action == TraceAction::kAlloc &&
        tt.graph.tensor(tt.schedule.event_tensor[i]).name == "lm_head.chunk.grad") {
      cat = i;
    }
  }
  REQUIRE(cat > backward);
  CHECK(tt.schedule.events[cat].size_bytes == 256'000);
  const Alive chunk_grads = alive(
      tt, [](const std::string& n) { return starts_with(n, "loss.chunk") && ends_with(n, ".flatten.grad"); },
      cat + 1);
  CHECK(chunk_grads.count_at == 8);
  CHECK(chunk_grads.bytes_at == 8 * kChunkBf16);
  const Alive after = alive(
      tt, [](const std::string& n) { return starts_with(n, "loss.chunk") && ends_with(n, ".flatten.grad"); },
      tt.schedule.phase_begin(1, Phase::kOptimizer)->event_index);
  CHECK(after.count_at == 0);

  // Without `del pred` the loop's logits live through backward.
  const Run kept = run(LossKind::kTorchtitanChunkedCrossEntropy);
  CHECK(alive(kept, logits, kept.schedule.phase_begin(1, Phase::kBackward)->event_index).count_at == 1);
}

TEST_CASE("torchtitan-chunked-ce: options and refusals", "[quick][predict]") {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.gpu = "h100";
  a.loss = "torchtitan-chunked-ce";
  a.loss_chunks = 4;
  CHECK(make_request(a).options.loss_chunks == 4);
  a.logits_dtype = "fp32";  // torchtitan before #642: `self.output(h).float()`
  CHECK_NOTHROW(make_request(a));
  a.compile_loss = "on";  // torchtitan never compiled this loss
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--compile-loss on: compiles"));
  a.compile_loss = "auto";
  a.compile_mode = "default";
  a.compile_scope = "model-and-loss";
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("torchtitan's train step runs its loss_fn outside"));
  a.compile_scope = "layer";
  CHECK_FALSE(make_request(a).options.compile_loss);
  a.model = "cs336-small";
  a.logits_dtype = "model";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--loss torchtitan-chunked-ce: torchtitan's loss"));
}
