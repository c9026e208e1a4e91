// End-to-end: the vramsim binary on good and bad input. Bad input must give one line on stderr naming the
// file (or option) and the position, and a non-zero exit; never a crash.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace {

using RunResult = vramsim::test::CliRun;
using vramsim::test::run_vramsim;
using vramsim::test::sample;
using vramsim::test::scratch;
using vramsim::test::write_file;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A bad-input run: non-zero exit, no crash (exit code < 128), exactly one line on stderr containing `needle`.
void require_clean_error(const RunResult& r, const std::string& needle) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code < 128);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("replay --check reproduces a bundled real snapshot", "[quick][cli]") {
  const RunResult r =
      run_vramsim("replay " + sample("kkaitlyn111_memory_ctx128_forward.pickle") + " --check");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("check segments   289 / 289") != std::string::npos);
  CHECK(r.out.find("check allocs     2058 / 2058") != std::string::npos);
  CHECK(r.out.find("IDENTICAL") != std::string::npos);
}

TEST_CASE("replay --json has the documented keys", "[quick][cli]") {
  const RunResult r =
      run_vramsim("replay " + sample("MAGMA27_memory_snapshot.pickle") + " --check --json --stats");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes", "fragmentation",
                          "num_device_alloc", "num_ooms", "check", "memory_stats"}) {
    CHECK(j.contains(key));
  }
  for (const char* key : {"segment_events_recorded", "segment_events_matched", "allocs_recorded",
                          "allocs_same_offset", "first_divergence"}) {
    CHECK(j.at("check").contains(key));
  }
  CHECK(j.at("check").at("first_divergence").is_null());
  // MAGMA27's trace has 1,721 allocs and no segment events (INDEX.json); reserved stays 14,180,941,824 bytes.
  CHECK(j.at("check").at("allocs_recorded") == 1721);
  CHECK(j.at("peak_reserved_bytes") == 14180941824LL);
  CHECK(j.at("memory_stats").at("reserved_bytes.all.current") == 14180941824LL);
  CHECK(j.at("num_device_alloc") == 0);
}

TEST_CASE("replay output is deterministic byte for byte", "[quick][cli]") {
  const std::string args =
      "replay " + sample("cranberrii_memory_snapshot.pickle") + " --check --json --stats";
  const RunResult a = run_vramsim(args);
  const RunResult b = run_vramsim(args);
  CHECK(a.exit_code == 0);
  CHECK(a.out == b.out);
}

TEST_CASE("convert round-trips through every format and replays identically", "[quick][cli]") {
  const std::string in = sample("kkaitlyn111_memory_files__memory_ctx256_forward_.pickle");
  const std::string vtrace = scratch("rt.vtrace").string();
  const std::string json = scratch("rt.json").string();
  const std::string pickle = scratch("rt.pickle").string();
  REQUIRE(run_vramsim("convert " + in + " " + vtrace).exit_code == 0);
  REQUIRE(run_vramsim("convert " + vtrace + " " + json).exit_code == 0);
  REQUIRE(run_vramsim("convert " + json + " " + pickle).exit_code == 0);
  CHECK(read_all(pickle) == read_all(in));  // pickle -> vtrace -> json -> pickle is lossless
  const RunResult r = run_vramsim("replay " + vtrace + " --check");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("IDENTICAL") != std::string::npos);
}

TEST_CASE("bad files give one clean line and a non-zero exit", "[quick][cli]") {
  SECTION("missing file") {
    require_clean_error(run_vramsim("replay /nonexistent/x.pickle"), "/nonexistent/x.pickle");
  }
  SECTION("truncated pickle") {
    const std::string full = read_all(sample("MAGMA27_memory_snapshot.pickle"));
    const fs::path p = write_file("trunc.pickle", full.substr(0, 3000));
    require_clean_error(run_vramsim("replay " + p.string()), "trunc.pickle: byte");
  }
  SECTION("corrupted pickle") {
    std::string bytes = read_all(sample("MAGMA27_memory_snapshot.pickle"));
    bytes[bytes.size() / 2] = '\xff';  // an opcode or length in the middle becomes junk
    bytes[bytes.size() / 3] = 'R';     // REDUCE: never executed
    const fs::path p = write_file("corrupt.pickle", bytes);
    require_clean_error(run_vramsim("replay " + p.string()), "corrupt.pickle");
  }
  SECTION("pickle that asks to run code") {
    const fs::path p = write_file("evil.pickle", std::string("\x80\x04"
                                                             "cos\nsystem\n(S'echo pwned'\ntR.",
                                                             31));
    const RunResult r = run_vramsim("replay " + p.string());
    require_clean_error(r, "evil.pickle: byte 2: unsupported pickle opcode");
    CHECK(r.out.find("pwned") == std::string::npos);
  }
  SECTION("random bytes") {
    std::mt19937 rng(42);
    for (int k = 0; k < 5; ++k) {
      std::string bytes(2000, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      bytes[0] = static_cast<char>(k % 2 == 0 ? 0x80 : '{');  // get past the format sniffing
      const fs::path p = write_file("random.bin", bytes);
      require_clean_error(run_vramsim("replay " + p.string()), "random.bin");
    }
  }
  SECTION("wrong types in JSON") {
    const fs::path p = write_file("types.json", R"({"segments": [{"address": "zero", "total_size": 2097152}],
                                                    "device_traces": []})");
    require_clean_error(run_vramsim("replay " + p.string()), "types.json: segments[0]");
  }
  SECTION("negative size in a vtrace") {
    const fs::path p =
        write_file("neg.vtrace", "vramsim-trace 1\ndevices 1\nfinal_state no\n0 alloc 0x1000 -100 0 0\n");
    require_clean_error(run_vramsim("replay " + p.string()), "neg.vtrace: line 4");
  }
  SECTION("absurd size in a vtrace") {
    const fs::path p =
        write_file("huge.vtrace",
                   "vramsim-trace 1\ndevices 1\nfinal_state no\n0 alloc 0x1000 99999999999999999999 0 0\n");
    require_clean_error(run_vramsim("replay " + p.string()), "huge.vtrace: line 4");
  }
  SECTION("free of an unknown address") {
    const fs::path p = write_file("unknown_free.vtrace",
                                  "vramsim-trace 1\ndevices 1\nfinal_state no\n0 alloc 0x1000 100 0 0\n"
                                  "0 free_requested 0x2000 100 0 0\n0 free_completed 0x2000 100 0 0\n");
    require_clean_error(run_vramsim("replay " + p.string()), "device_traces[0][1]: free_requested of 0x2000");
  }
}

TEST_CASE("bad options give one clean line and a non-zero exit", "[quick][cli]") {
  const std::string s = sample("MAGMA27_memory_snapshot.pickle");
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf foo:1"),
                      "--alloc-conf: foo: Unrecognized key 'foo' in CUDA allocator config.");
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf max_split_size_mb:2"), "max_split_size_mb");
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf garbage_collection_threshold:1.2"),
                      "garbage_collection_threshold");
  require_clean_error(run_vramsim("replay " + s + " --capacity 12parsecs"), "--capacity");
  require_clean_error(run_vramsim("replay " + s + " --device 7"), "--device 7");
  const RunResult unknown = run_vramsim("replay " + s + " --bogus");
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.err.find("--bogus") != std::string::npos);
}

TEST_CASE("replay --check fails when the model is configured differently from the recording",
          "[quick][cli]") {
  // The recordings ran with default settings. Rounding to 2 divisions per power of two turns cranberrii's
  // 8,192,000 byte request (event 8) into 8 MiB, which no longer fits where the recording put it; and a 16
  // GiB device cannot hold the 18.32 GiB that ctx128_forward reached.
  const RunResult divisions = run_vramsim("replay " + sample("cranberrii_memory_snapshot.pickle") +
                                          " --check --alloc-conf roundup_power2_divisions:2");
  CHECK(divisions.exit_code == 1);
  CHECK(divisions.out.find("first divergence event 8:") != std::string::npos);
  CHECK(divisions.out.find("DIVERGES") != std::string::npos);
  const std::string s = sample("kkaitlyn111_memory_ctx128_forward.pickle");
  const RunResult small = run_vramsim("replay " + s + " --check --capacity 16GiB --json");
  CHECK(small.exit_code == 1);
  const nlohmann::json j = nlohmann::json::parse(small.out);
  CHECK(j.at("num_ooms").get<int>() > 0);
  CHECK(j.at("peak_reserved_bytes").get<std::int64_t>() <= 16LL * 1024 * 1024 * 1024);
  CHECK_FALSE(j.at("check").at("first_divergence").is_null());
}

namespace {

// An input-edge error: exit status 2 exactly, one line on stderr, which names the option or field.
void require_input_error(const RunResult& r, const std::string& needle) {
  require_clean_error(r, needle);
  CHECK(r.exit_code == 2);
}

// A llama config.json (TinyLlama's shape) with `field` set to the raw JSON text `value`.
fs::path llama_config(const std::string& name, const std::string& field, const std::string& value) {
  nlohmann::json c = {{"model_type", "llama"},     {"vocab_size", 32000},
                      {"hidden_size", 2048},       {"num_hidden_layers", 22},
                      {"num_attention_heads", 32}, {"num_key_value_heads", 4},
                      {"intermediate_size", 5632}, {"max_position_embeddings", 2048}};
  c[field] = nlohmann::json::parse(value);
  return write_file(name, c.dump());
}

}  // namespace

// Issue 11, section 5: values a user types, far outside what any run has, end in one line and exit 2 --
// before, they wrapped in int64 (silently wrong figures) or tripped an internal invariant (exit 134).
TEST_CASE("absurd --batch, --seq and --steps are rejected at the input edge", "[quick][cli]") {
  // The limits are 2^24 = 16,777,216 for batch and seq, 2^32 = 4,294,967,296 tokens for batch x seq.
  require_input_error(run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 99999999999"),
                      "--seq: must be in 1..16777216, got 99999999999");
  require_input_error(run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 2000000000 --seq 128"),
                      "--batch: must be in 1..16777216, got 2000000000");
  require_input_error(run_vramsim("fit --model tinyllama-1.1b --gpu h200 --seq 99999999999"),
                      "--seq: must be in 1..16777216, got 99999999999");
  require_input_error(run_vramsim("fit --model tinyllama-1.1b --gpu h200 --batch 2000000000 --seq 128"),
                      "--batch: must be in 1..16777216, got 2000000000");
  // 100,000 x 16,777,216 = 1,677,721,600,000 tokens > 2^32: was exit 0 with a wrapped peak_live_bytes.
  require_input_error(
      run_vramsim("sweep --model llama-2-7b --batch 100000 --seq 16777216 --json"),
      "--batch x --seq: 100000 x 16777216 tokens per micro-batch is more than the 4294967296");
  require_input_error(run_vramsim("compare --model llama-2-7b --batch 100000 --seq 16777216"),
                      "--batch x --seq: 100000 x 16777216");
  require_input_error(run_vramsim("sweep --model llama-2-7b --seq 99999999999"),
                      "--seq: 99999999999 is outside");
  require_input_error(
      run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 128 --steps 2000000000"),
      "--steps: must be in 1..100000, got 2000000000");
  require_input_error(
      run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 128 --grad-accumulation 1000 "
                  "--steps 1000"),
      "--steps x --grad-accumulation: 1000 x 1000 micro-batches");
  require_input_error(
      run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 99999999999999999999"),
      "--seq");  // beyond int64: CLI11's own one-line message
}

TEST_CASE("sizes within the edge limits are checked where tensors are sized", "[quick][cli]") {
  // seq 2^24 is allowed, but Llama's causal mask for eager attention alone is 2^24 x (2^24 + 1) fp32 values,
  // 2^50 + 2^26 bytes: beyond the 2^50 bytes the simulator models.
  require_input_error(run_vramsim("predict --model tinyllama-1.1b --capacity 80GiB --batch 1 --seq 16777216 "
                                  "--attention eager"),
                      "would take more than 2^50 bytes (1 PiB)");
}

TEST_CASE("absurd config.json values are rejected naming the key", "[quick][cli]") {
  const auto predict = [](const fs::path& config) {
    return run_vramsim("predict --model " + config.string() + " --gpu h200 --batch 1 --seq 128");
  };
  // 2^62 and 2^64 - 1 (stored unsigned by the JSON parser: it must not wrap to -1 in the message).
  require_input_error(predict(llama_config("d62.json", "hidden_size", "4611686018427387904")),
                      "d62.json: key 'hidden_size' must be in 1..16777216, got 4611686018427387904");
  require_input_error(predict(llama_config("d64.json", "intermediate_size", "18446744073709551615")),
                      "d64.json: key 'intermediate_size' must be in 1..16777216, got 18446744073709551615");
  // 10^12 and 2^24 layers: a layer table of that size would exhaust memory and time.
  require_input_error(predict(llama_config("l12.json", "num_hidden_layers", "1000000000000")),
                      "l12.json: key 'num_hidden_layers' must be in 1..4096, got 1000000000000");
  require_input_error(predict(llama_config("l24.json", "num_hidden_layers", "16777216")),
                      "l24.json: key 'num_hidden_layers' must be in 1..4096, got 16777216");
  // Each dimension in range, but q_proj alone is (2^24 heads x 2^24 head_dim) x 2048 = 2^59 > 2^46
  // parameters.
  nlohmann::json heads = nlohmann::json::parse(read_all(llama_config("hd.json", "head_dim", "16777216")));
  heads["num_attention_heads"] = heads["num_key_value_heads"] = 16777216;
  require_input_error(predict(write_file("hd.json", heads.dump())),
                      "hd.json: the model has more than 70368744177664 parameters");
  nlohmann::json moe = {{"model_type", "mixtral"},   {"vocab_size", 32000},      {"hidden_size", 256},
                        {"num_hidden_layers", 4096}, {"num_attention_heads", 8}, {"intermediate_size", 256},
                        {"num_local_experts", 4096}, {"num_experts_per_tok", 2}};
  require_input_error(predict(write_file("moe.json", moe.dump())),
                      "moe.json: 4096 layers x 4096 experts is more than the 65536 expert MLPs");
}

TEST_CASE("text that is not UTF-8 never breaks --json or the pickle writer", "[quick][cli]") {
  // A path with byte 0xFF: the JSON output says U+FFFD there (was an uncaught nlohmann exception, exit 134).
  const fs::path bad_path = write_file(
      "a\xff"
      "b.pickle",
      read_all(sample("MAGMA27_memory_snapshot.pickle")));
  const RunResult r = run_vramsim("replay '" + bad_path.string() + "' --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(
      j["file"].get<std::string>().ends_with("a\xef\xbf\xbd"
                                             "b.pickle"));
  // convert writes that snapshot as a pickle that replays identically.
  const fs::path out = scratch("out\xff.pickle");
  const RunResult c = run_vramsim("convert '" + bad_path.string() + "' '" + out.string() + "'");
  REQUIRE(c.exit_code == 0);
  const RunResult check = run_vramsim("replay '" + out.string() + "' --check");
  CHECK(check.exit_code == 0);
  CHECK(check.out.find("IDENTICAL") != std::string::npos);
  // A vtrace setting or tag that decodes to invalid UTF-8 is rejected at the reader, naming the line.
  const fs::path settings =
      write_file("bad_settings.vtrace", "vramsim-trace 1\ndevices 1\nfinal_state no\nsettings %FF%FE\n");
  require_input_error(run_vramsim("replay " + settings.string() + " --json"),
                      "bad_settings.vtrace: line 4: settings is not valid UTF-8");
  const fs::path tag = write_file("bad_tag.vtrace", "vramsim-trace 1\ndevices 1\nfinal_state no\ntag a%FF\n");
  require_input_error(run_vramsim("convert " + tag.string() + " " + scratch("t.pickle").string()),
                      "bad_tag.vtrace: line 4: tag is not valid UTF-8");
}

TEST_CASE("bad --lora-*, --generate, --kv-cache, --zero-grad and --adam-foreach-denom values end in one line",
          "[quick][cli]") {
  const std::string run = "predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 128 ";
  require_input_error(run_vramsim(run + "--lora-rank 8 --lora-targets 'q_proj;rm'"),
                      "--lora-targets: 'q_proj;rm' is not a module name");
  require_input_error(run_vramsim(run + "--lora-rank 8 --lora-targets no_such_proj"),
                      "--lora-targets: no linear layer of tinyllama-1.1b matches no_such_proj");
  require_input_error(run_vramsim(run + "--lora-rank -3"), "--lora-rank: -3 is out of range");
  require_input_error(run_vramsim(run + "--lora-rank 8 --lora-dropout 1.5"),
                      "--lora-dropout: 1.5 is not a probability");
  require_input_error(run_vramsim(run + "--lora-rank 8 --gpus 8 --tp 2 --use-dora"),
                      "--use-dora with --tp: PEFT refuses it");
  require_input_error(run_vramsim(run + "--generate 4 --kv-cache pagd"),
                      "--kv-cache: unknown cache 'pagd' (known: dynamic, static, paged)");
  require_input_error(run_vramsim(run + "--generate 4000000"),
                      "--generate: 4000000 new tokens is out of range");
  require_input_error(run_vramsim(run + "--zero-grad sometimes"), "--zero-grad: unknown value 'sometimes'");
  require_input_error(run_vramsim(run + "--adam-foreach-denom twice"),
                      "--adam-foreach-denom: unknown value 'twice'");
  // torch.optim's fused AdamW has no denom list at all (one kernel per parameter group)
  require_input_error(run_vramsim(run + "--optimizer adamw-fused --adam-foreach-denom out-of-place"),
                      "--adam-foreach-denom out-of-place: describes torch.optim's foreach Adam");
  require_input_error(run_vramsim(run + "--checkpoint-early-stop sometimes"),
                      "--checkpoint-early-stop: unknown value 'sometimes'");
  // set_checkpoint_early_stop only changes torch.utils.checkpoint's recomputation
  require_input_error(run_vramsim(run + "--checkpoint-early-stop off"),
                      "--checkpoint-early-stop off: torch.utils.checkpoint's setting");
}

TEST_CASE("predict --zero-redundancy-optimizer needs plain DDP over 2 GPUs or more, its run says so",
          "[quick][cli]") {
  const std::string run = "predict --model gpt2 --gpu h200 --batch 1 --seq 128 --zero-redundancy-optimizer ";
  const std::string needs = "--zero-redundancy-optimizer: shards the optimizer over a DDP group";
  require_input_error(run_vramsim(run), needs);
  require_input_error(run_vramsim(run + "--gpus 4 --zero 2"), needs);
  require_input_error(run_vramsim(run + "--gpus 4 --fsdp full-shard"), needs);
  const RunResult ok = run_vramsim(run + "--gpus 4");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.out.find("zero redundancy  ZeroRedundancyOptimizer: rank 0 keeps optimizer states") !=
        std::string::npos);
}

TEST_CASE(
    "bad --pp, --pp-schedule, --pp-stage, --virtual-stages, --sequence-parallel and --loss-parallel values "
    "end "
    "in one line",
    "[quick][cli]") {
  // tinyllama-1.1b has 22 layers.
  const std::string run = "predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 128 ";
  require_input_error(run_vramsim(run + "--pp 0"), "--pp: 0 is not in 1..1024");
  require_input_error(run_vramsim(run + "--pp 4"), "--pp: 22 layers do not split evenly over 4 stages");
  require_input_error(run_vramsim(run + "--pp 2 --pp-stage 2"), "--pp-stage: 2 is not a stage of 2");
  require_input_error(run_vramsim(run + "--pp 2 --pp-schedule zero-bubbles"),
                      "--pp-schedule: unknown schedule 'zero-bubbles'");
  require_input_error(
      run_vramsim(run + "--pp 2 --pp-schedule zbv"),
      "--pp-schedule zbv: zero-bubble schedules (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble) defer "
      "each weight gradient to a later action: not modelled (vramsim)");
  require_input_error(run_vramsim(run + "--pp 2 --pp-split even"), "--pp-split: unknown split 'even'");
  // torchtitan's split of 22 layers over 32 stages: its ValueError, quoted.
  require_input_error(run_vramsim(run + "--pp 32 --gpus 32 --pp-split torchtitan"),
                      "Number of stages (32) cannot be greater than effective layers (24)");
  require_input_error(run_vramsim(run + "--pp 4 --pp-schedule interleaved --micro-batches 4"),
                      "--pp: 22 layers do not split evenly over 4 stages x 2 model chunks");
  require_input_error(run_vramsim(run + "--pp 2 --pp-schedule interleaved --micro-batches 3"),
                      "--micro-batches: the interleaved schedule needs a multiple of --pp 2, got 3");
  require_input_error(
      run_vramsim(run + "--pp 2 --pp-schedule interleaved --virtual-stages 1 --micro-batches 2"),
      "--virtual-stages: the interleaved schedule needs 2..1024 model chunks per GPU");
  require_input_error(
      run_vramsim(run + "--pp 2 --pp-schedule interleaved --virtual-stages 1000 --micro-batches 1000"),
      "--micro-batches x --virtual-stages: 1000 x 1000 chunk passes per step is more than the 100000");
  require_input_error(run_vramsim(run + "--pp 2 --tp 2 --gpus 6"),
                      "--tp x --pp: 2 x 2 does not divide --world-size 6");
  require_input_error(run_vramsim(run + "--pp 2 --peft-method adalora --lora-rank 4 --init-r 8"),
                      "--peft-method adalora: with --pp or --zero 3 is not modelled (vramsim)");
  require_input_error(
      run_vramsim(run + "--pp 2 --inference"),
      "--pp: pipeline parallelism with --forward-only, --inference or --generate is not modelled");
  require_input_error(run_vramsim(run + "--sequence-parallel"),
                      "--sequence-parallel: needs tensor parallelism (--tp 2 or more)");
  require_input_error(run_vramsim(run + "--loss-parallel"),
                      "--loss-parallel: needs tensor parallelism (--tp 2 or more)");
  require_input_error(
      run_vramsim(run + "--tp 2 --loss-parallel --loss chunked-ce"),
      "--loss-parallel: with --loss chunked-ce, ce-shift-logits or torchtitan-chunked-ce is not "
      "modelled");
  require_input_error(run_vramsim("predict --model llama-2-7b --gpu h200 --batch 1 --seq 100 --tp 8 "
                                  "--sequence-parallel"),
                      "--sequence-parallel: --seq 100 is not a multiple of --tp 8");
  require_input_error(run_vramsim(run + "--gpus 8 --zero 2 --offload gpu"),
                      "--offload: unknown item 'gpu' (known: optimizer, params, activations)");
  require_input_error(run_vramsim(run + "--gpus 8 --offload optimizer"),
                      "--offload: needs a sharding scheme that offloads (--zero 2|3 or --fsdp)");
  require_input_error(run_vramsim(run + "--gpus 8 --zero 1 --offload optimizer"),
                      "--offload optimizer: modelled with --zero 2 or 3 (ZeRO-Offload)");
  require_input_error(run_vramsim(run + "--gpus 8 --zero 2 --offload params"),
                      "--offload params: DeepSpeed offloads parameters only with --zero 3");
  require_input_error(run_vramsim(run + "--gpus 8 --fsdp full-shard --offload optimizer"),
                      "--offload optimizer: FSDP moves the optimizer to the host only with its parameters");
  require_input_error(run_vramsim(run + "--offload activations --activation-offload deepspeed"),
                      "--activation-offload: unknown value 'deepspeed' (known: save-on-cpu, torchtune)");
  require_input_error(run_vramsim(run + "--activation-offload torchtune"),
                      "--activation-offload torchtune: needs --offload activations");
  // torchtune's recipes raise RuntimeError("enable_activation_offloading should only be True when
  // enable_activation_checkpointing is True") (recipes/lora_finetune_single_device.py, torchtune >= 0.4).
  require_input_error(run_vramsim(run + "--offload activations --activation-offload torchtune"),
                      "--activation-offload torchtune: torchtune's recipes refuse it without activation "
                      "checkpointing");
  require_input_error(run_vramsim("predict --model cs336-small --gpu h200 --batch 1 --seq 128 --pp 2"),
                      "--pp: the cs336-basics code is not split into pipeline stages");
}

TEST_CASE("bad --base-weights and --bnb-* values end in one line", "[quick][cli]") {
  const std::string run = "predict --model tinyllama-1.1b --gpu h200 --batch 1 --seq 128 ";
  require_input_error(run_vramsim(run + "--lora-rank 8 --base-weights int4"),
                      "--base-weights: unknown value 'int4' (known: nf4, fp4, int8, torchao-nf4)");
  require_input_error(run_vramsim(run + "--lora-rank 8 --base-weights nf4 --bnb-compute-dtype fp8"),
                      "--bnb-compute-dtype: unknown value 'fp8'");
  require_input_error(run_vramsim(run + "--bnb-double-quant"), "--bnb-double-quant / --bnb-compute-dtype");
  require_input_error(run_vramsim(run + "--base-weights nf4"),
                      "--base-weights: transformers refuses to fine-tune a purely quantized model");
  require_input_error(
      run_vramsim(run + "--lora-rank 8 --base-weights int8 --gpus 2 --zero 3"),
      "--base-weights int8: sharding bitsandbytes' Int8Params (FSDP, ZeRO-3) is not modelled");
  require_input_error(run_vramsim(run + "--lora-rank 8 --base-weights nf4 --tp 2"),
                      "--base-weights: quantized base weights are not modelled with Megatron's --tp or --pp");
  require_input_error(run_vramsim(run + "--inference --base-weights nf4 --model-code cs336-basics"),
                      "--base-weights: bitsandbytes quantizes the nn.Linear layers");
}

TEST_CASE("predict --json names the base-weight format, fit takes the same flags", "[quick][cli]") {
  const std::string qlora =
      " --model tinyllama-1.1b --gpu a100-40gb --seq 256 --lora-rank 8 --base-weights nf4 "
      "--bnb-double-quant --bnb-compute-dtype bf16";
  const RunResult r = run_vramsim("predict --batch 1 --steps 1 --json" + qlora);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("base_weights").at("format") == "nf4");
  CHECK(j.at("base_weights").at("double_quant") == true);
  CHECK(j.at("base_weights").at("compute_dtype") == "bfloat16");
  CHECK(j.at("base_weights").at("prepare_model_for_kbit_training") == true);
  const RunResult plain =
      run_vramsim("predict --model tinyllama-1.1b --gpu a100-40gb --seq 256 --batch 1 --json");
  REQUIRE(plain.exit_code == 0);
  CHECK(nlohmann::json::parse(plain.out).at("base_weights").is_null());
  const RunResult text = run_vramsim("predict --batch 1 --steps 1" + qlora);
  CHECK(text.out.find("base weights     nf4 (bitsandbytes Linear4bit") != std::string::npos);
  const RunResult fit = run_vramsim("fit" + qlora);
  CHECK(fit.exit_code == 0);
  CHECK(fit.out.find("largest batch that fits") != std::string::npos);
}

TEST_CASE("replay --check of an expandable-segment snapshot, as a pickle, two devices", "[quick][cli]") {
  // Hand-made from spec §5: device 0 maps [R, R+20 MiB) for 5 MiB, then one more page for 18 MiB (15 MiB free
  // < 18 MiB, E2/E3), which takes [R+5, R+23) and leaves a 17 MiB free tail; device 1 has the same shape on
  // another reservation. Converted to a pickle as _dump_snapshot would write it.
  const fs::path vtrace = write_file("expandable.vtrace", R"(vramsim-trace 1
devices 2
final_state yes
segment 0 0x7f0000000000 41943040 0 large 1 0 0
block 0x7f0000000000 5242880 5242880 allocated
block 0x7f0000500000 18874368 18874368 allocated
block 0x7f0001700000 17825792 0 inactive
segment 1 0x7e0000000000 41943040 0 large 1 0 0
block 0x7e0000000000 5242880 5242880 allocated
block 0x7e0000500000 18874368 18874368 allocated
block 0x7e0001700000 17825792 0 inactive
0 segment_map 0x7f0000000000 20971520 0 0
0 alloc 0x7f0000000000 5242880 0 0
0 segment_map 0x7f0001400000 20971520 0 0
0 alloc 0x7f0000500000 18874368 0 0
1 segment_map 0x7e0000000000 20971520 0 0
1 alloc 0x7e0000000000 5242880 0 0
1 segment_map 0x7e0001400000 20971520 0 0
1 alloc 0x7e0000500000 18874368 0 0
)");
  const fs::path pickle = scratch("expandable.pickle");
  REQUIRE(run_vramsim("convert " + vtrace.string() + " " + pickle.string()).exit_code == 0);
  for (const char* device : {"0", "1"}) {
    const RunResult r = run_vramsim("replay " + pickle.string() + " --check --device " + device);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("pytorch-expandable") != std::string::npos);
    CHECK(r.out.find("check segments   2 / 2 ") != std::string::npos);
    CHECK(r.out.find("IDENTICAL") != std::string::npos);
  }
  const RunResult none = run_vramsim("replay " + pickle.string() + " --device 2");
  require_clean_error(none, "has no trace for that device; devices with a trace: 0, 1");
  CHECK(none.exit_code == 2);

  // Bad input: a segment_map of pages that are not mapped at the end (spec §8.7: undoing it is impossible).
  const fs::path bad = write_file("expandable_bad.vtrace", R"(vramsim-trace 1
devices 1
final_state yes
segment 0 0x7f0000000000 20971520 0 large 1 0 0
block 0x7f0000000000 20971520 0 inactive
0 segment_map 0x7f0001400000 20971520 0 0
)");
  const RunResult r = run_vramsim("replay " + bad.string() + " --check");
  require_clean_error(r, "expandable_bad.vtrace: device_traces[0][0]: segment_map of 0x7f0001400000");
  CHECK(r.exit_code == 2);
}

TEST_CASE("bad vLLM paged-cache and --prompt-len values end in one line", "[quick][cli]") {
  const std::string run = "predict --model tinyllama-1.1b --gpu h200 --batch 2 --seq 128 ";
  require_input_error(run_vramsim(run + "--kv-cache paged"), "--kv-cache paged: needs --generate");
  require_input_error(run_vramsim(run + "--generate 4 --kv-cache paged --block-size 0"),
                      "--block-size: must be in 1..");
  require_input_error(run_vramsim(run + "--generate 4 --kv-cache paged --gpu-memory-utilization 0"),
                      "--gpu-memory-utilization: must be in (0, 1]");
  require_input_error(run_vramsim(run + "--generate 4 --block-size 32"), "--kv-cache paged");
  require_input_error(run_vramsim("predict --model tinyllama-1.1b --gpu h200 --batch 2 --generate 4 "
                                  "--prompt-len uniform:64..32"),
                      "--prompt-len: LO 64 is above HI 32");
}

TEST_CASE("predict reports offloading's host memory in text and --json", "[quick][cli]") {
  // TinyLlama over 8 ranks, ZeRO-3 with both offloads, bf16: per rank the fp32 partition, its fp32 gradient
  // and AdamW's two fp32 states (16 bytes per partition element) plus the bf16 partitions of the
  // non-persistent parameters; a node of 8 ranks holds 8 times that.
  const std::string run =
      "predict --model tinyllama-1.1b --gpu a100-40gb --batch 1 --seq 256 --precision bf16 --steps 1 --gpus "
      "8 "
      "--zero 3 --offload optimizer,params";
  const RunResult text = run_vramsim(run);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("host memory of one rank") != std::string::npos);
  const RunResult json = run_vramsim(run + " --json");
  REQUIRE(json.exit_code == 0);
  const nlohmann::json h = nlohmann::json::parse(json.out).at("host_memory");
  const auto bytes = [&h](const char* key) { return h.at(key).get<std::int64_t>(); };
  CHECK(bytes("master_weights_bytes") == bytes("gradients_bytes"));
  CHECK(bytes("optimizer_states_bytes") == 2 * bytes("master_weights_bytes"));
  CHECK(bytes("parameters_bytes") * 2 < bytes("master_weights_bytes"));  // bf16, and not the persistent ones
  CHECK(bytes("total_bytes") == bytes("parameters_bytes") + 4 * bytes("master_weights_bytes"));
  CHECK(h.at("gpus_per_node").get<int>() == 8);
  CHECK(bytes("per_node_bytes") == 8 * bytes("total_bytes"));
  // Nothing offloaded: no host memory section.
  const RunResult plain =
      run_vramsim("predict --model tinyllama-1.1b --gpu a100-40gb --batch 1 --seq 256 --steps 1 --json");
  CHECK_FALSE(nlohmann::json::parse(plain.out).contains("host_memory"));
}
