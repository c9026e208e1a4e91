// Issue 39 ("Bad input II"): the reproducers of the commands added since the readers were hardened (plan,
// sweep, merge, generation, the paged cache, alloc-conf keys, output writes). Each must end with a sane
// result or one line on stderr and exit status 2, in bounded time and memory.
#include <catch2/catch.hpp>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "test_paths.h"
#include "test_rng.h"

namespace fs = std::filesystem;

namespace {

using Run = vramsim::test::CliRun;
using vramsim::test::run_vramsim;
using vramsim::test::sample;
using vramsim::test::scratch;
using vramsim::test::write_file;

// Exit status 2 (no signal, no abort) and exactly one line on stderr containing `needle`.
void require_input_error(const Run& r, const std::string& needle) {
  INFO("stderr: " << r.err << "\nstdout: " << r.out.substr(0, 2000));
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
}

nlohmann::json parse_out(const Run& r) {
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("issue 39 #1: plan --threads is bounded, never an abort", "[quick][cli][bad-input]") {
  require_input_error(
      run_vramsim("plan --model gpt2 --gpu h100-80gb --global-batch 2 --seq 128 --threads 100000"),
      "--threads: must be in 0..1024, got 100000");
  require_input_error(
      run_vramsim("plan --model gpt2 --gpu h100-80gb --global-batch 2 --seq 128 --threads -1"),
      "--threads: must be in 0..1024, got -1");
  // The most allowed: more threads than groups are not started.
  const Run r =
      run_vramsim("plan --model gpt2 --gpu h100-80gb --global-batch 2 --seq 128 --threads 1024 --json");
  CHECK(parse_out(r).contains("best"));
}

TEST_CASE("issue 39 #3: endless and oversized inputs stop at the documented limits, naming the file",
          "[quick][cli][bad-input]") {
  require_input_error(
      run_vramsim("predict --model /dev/zero --gpu h100-80gb --batch 1 --seq 128"),
      "/dev/zero: more than 268435456 bytes, the most vramsim reads from one input: not read");
  require_input_error(run_vramsim("sweep --model gpt2 --gpu h100-80gb --seq hist:/dev/zero --steps 2"),
                      "/dev/zero: more than 268435456 bytes");
  require_input_error(
      run_vramsim("predict --model ./no/such/config.json --gpu h100-80gb --batch 1 --seq 128"),
      "./no/such/config.json: cannot open the model config file: No such file or directory");
  // A regular trace over 4 GiB is refused before it is read (a sparse file: no disk used).
  const fs::path big = scratch("big.pickle");
  { std::ofstream(big, std::ios::binary) << '\x80'; }
  fs::resize_file(big, (std::uintmax_t{4} << 30) + 1);
  require_input_error(run_vramsim("replay " + big.string()),
                      big.string() + ": 4294967297 bytes, more than the 4294967296 bytes vramsim reads");
  fs::remove(big);
  // A pipe into merge: read within the bound like any other input.
  require_input_error(run_vramsim("merge /dev/zero"), "/dev/zero: more than 268435456 bytes");
}

TEST_CASE("issue 39 #2: a JSON document is bounded before it is built", "[quick][cli][bad-input]") {
  // 10 M small numbers: 20 MB of text, ~320 MB once parsed (more than the 256 MiB allowed a config.json).
  std::string text = "[";
  text.reserve(20'000'002);
  for (int i = 0; i < 10'000'000; ++i) {
    text += i == 0 ? "0" : ",0";
  }
  text += "]";
  const fs::path numbers = write_file("numbers.json", text);
  require_input_error(
      run_vramsim("predict --model " + numbers.string() + " --gpu h100-80gb --batch 1 --seq 128"),
      numbers.string() + ": a JSON document of 20000001 bytes that would take more than");
  require_input_error(run_vramsim("merge " + numbers.string()), numbers.string() + ": a JSON document of");
  fs::remove(numbers);
  const fs::path bad = write_file("bad_config.json", "{\"model_type\": ");
  require_input_error(run_vramsim("predict --model " + bad.string() + " --gpu h100-80gb --batch 1 --seq 128"),
                      bad.string() + ": byte 16: invalid JSON");
}

TEST_CASE("issue 39 #11: a failed write to standard output is an error", "[quick][cli][bad-input]") {
  if (!fs::exists("/dev/full")) {
    SUCCEED("no /dev/full here");
    return;
  }
  require_input_error(
      run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 128 --json >/dev/full"),
      "standard output: write error: No space left on device");
  require_input_error(run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 128 >/dev/full"),
                      "standard output: write error");
  require_input_error(run_vramsim("fit --model gpt2 --gpu h100-80gb --seq 128 >/dev/full"),
                      "standard output: write error");
  require_input_error(run_vramsim("plan --model gpt2 --gpu h100-80gb --global-batch 2 --seq 128 >/dev/full"),
                      "standard output: write error");
}

TEST_CASE("issue 39 #7: per_process_memory_fraction shrinks the verdict's capacity and fit's limit",
          "[quick][cli][bad-input]") {
  const std::string run = "predict --model gpt2 --gpu h100-80gb --batch 8 --seq 512 --json";
  const nlohmann::json full = parse_out(run_vramsim(run));
  const nlohmann::json half = parse_out(run_vramsim(run + " --alloc-conf per_process_memory_fraction:0.5"));
  const std::int64_t total = half.at("total_bytes");
  const std::int64_t allowed = total / 2;  // floor(0.5 x total), exact for an even total
  CHECK(half.at("allocator_capacity_bytes").get<std::int64_t>() == allowed);
  CHECK(half.at("headroom_bytes").get<std::int64_t>() ==
        allowed - half.at("peak_reserved_bytes").get<std::int64_t>());
  CHECK(half.at("headroom_bytes").get<std::int64_t>() <
        full.at("headroom_bytes").get<std::int64_t>() - total / 3);
  CHECK(half.at("fits") == true);
  // 1 % of 80 GiB is less than gpt2 at batch 8 needs: the shortfall is measured against that 1 %, not 80 GiB.
  const nlohmann::json tiny = parse_out(run_vramsim(run + " --alloc-conf per_process_memory_fraction:0.01"));
  CHECK(tiny.at("fits") == false);
  CHECK(tiny.at("allocator_capacity_bytes").get<std::int64_t>() == static_cast<std::int64_t>(0.01 * total));
  CHECK(tiny.at("headroom_bytes").get<std::int64_t>() < 0);
  CHECK(-tiny.at("headroom_bytes").get<std::int64_t>() < total / 5);
  const Run text = run_vramsim(
      "predict --model gpt2 --gpu h100-80gb --batch 8 --seq 512 --alloc-conf "
      "per_process_memory_fraction:0.5");
  CHECK(text.out.find("per_process_memory_fraction 0.5 lets the allocator reserve 39.60 GiB") !=
        std::string::npos);
  // fit's limit: the context plus what the fraction allows, not 80 GiB.
  const nlohmann::json fit = parse_out(run_vramsim(
      "fit --model gpt2 --gpu h100-80gb --seq 512 --json --alloc-conf per_process_memory_fraction:0.25"));
  CHECK(fit.at("limit_bytes").get<std::int64_t>() ==
        fit.at("cuda_context_bytes").get<std::int64_t>() + fit.at("total_bytes").get<std::int64_t>() / 4);
}

TEST_CASE("issue 39 #8: a --capacity below what the trace starts with is refused",
          "[quick][cli][bad-input]") {
  require_input_error(
      run_vramsim("replay " + sample("MAGMA27_memory_snapshot.pickle") + " --capacity 1MiB --check"),
      "--capacity: 1.00 MiB is below the");
}

TEST_CASE("issue 39 #9: vLLM's refusal to start is not a fit, --max-model-len 0 is refused",
          "[quick][cli][bad-input]") {
  const std::string run =
      "predict --model llama-2-7b --gpu h100-80gb --batch 1 --seq 128 --generate 2 "
      "--kv-cache paged --vllm-version v0 ";
  const Run text = run_vramsim(run + "--max-model-len 16777216 --max-num-batched-tokens 16777216");
  INFO(text.out << text.err);
  CHECK(text.out.find("vLLM refuses to start") != std::string::npos);
  CHECK(text.out.find("FITS") == std::string::npos);
  CHECK(text.out.find("verdict          DOES NOT START") != std::string::npos);
  const nlohmann::json j =
      parse_out(run_vramsim(run + "--max-model-len 16777216 --max-num-batched-tokens 16777216 --json"));
  CHECK(j.at("fits") == false);
  require_input_error(run_vramsim(run + "--max-model-len 0"), "--max-model-len");
  require_input_error(run_vramsim(run + "--max-num-batched-tokens 0"), "--max-num-batched-tokens");
}

TEST_CASE("issue 39 #10: GPT-2 cannot generate past its learned positions", "[quick][cli][bad-input]") {
  require_input_error(run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 1000 --generate 100"),
                      "--seq + --generate: 1000 + 100 tokens use 1099 positions, more than the 1024");
  require_input_error(run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 128 --generate 5000"),
                      "more than the 1024 learned positions");
  // Up to the last position is fine: 1000 + 25 - 1 = 1024.
  CHECK(run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 1000 --generate 25").exit_code ==
        0);
}

TEST_CASE("issue 39 #14: integer options are read exactly, fit says when it hit its cap",
          "[quick][cli][bad-input]") {
  const std::string run = "predict --model gpt2 --gpu h100-80gb --seq 128 ";
  require_input_error(run_vramsim(run + "--batch 1 --generate 0"), "--generate");
  require_input_error(run_vramsim(run + "--batch 18446744073709551616"),
                      "18446744073709551616 is out of range");
  require_input_error(run_vramsim(run + "--batch 0x10"), "'0x10' is not a whole number");
  require_input_error(run_vramsim("sweep --model gpt2 --gpu h100-80gb --seq 128 --steps 2 --seed -1"),
                      "-1 is negative");
  require_input_error(
      run_vramsim("sweep --model gpt2 --gpu h100-80gb --seq 128 --steps 2 --seed 18446744073709551616"),
      "18446744073709551616 is out of range");
  // Leading zeros are decimal, not octal: --batch 010 is batch 10.
  const nlohmann::json ten = parse_out(run_vramsim(run + "--batch 010 --json"));
  const nlohmann::json ten_plain = parse_out(run_vramsim(run + "--batch 10 --json"));
  CHECK(ten.at("peak_allocated_bytes") == ten_plain.at("peak_allocated_bytes"));
  const nlohmann::json fit = parse_out(run_vramsim("fit --model gpt2 --capacity 1000TB --seq 16 --json"));
  CHECK(fit.at("best") == 1048576);
  CHECK(fit.at("best_is_search_cap") == true);
}

TEST_CASE("issue 39 #12: merge checks every figure and string of its parts", "[quick][cli][bad-input]") {
  const fs::path part = scratch("part.json");
  const fs::path other = scratch("part2.json");
  const std::string sweep =
      "sweep --model gpt2 --gpu h100-80gb --seq list:64,128 --steps 2 --policies pytorch,buddy ";
  REQUIRE(run_vramsim(sweep + "--shard 1/2 >" + part.string()).exit_code == 0);
  REQUIRE(run_vramsim(sweep + "--shard 2/2 >" + other.string()).exit_code == 0);
  const nlohmann::json good = nlohmann::json::parse(std::ifstream(part));
  CHECK(run_vramsim("merge " + part.string() + " " + other.string()).exit_code == 0);
  const auto edited = [&](const std::string& name, const auto& edit) {
    nlohmann::json j = good;
    edit(j);
    return write_file(name, j.dump()).string();
  };
  const std::string negative =
      edited("negative.json", [](nlohmann::json& j) { j["results"][0]["peak_reserved_bytes"] = -5; });
  require_input_error(run_vramsim("merge " + negative + " " + other.string()),
                      negative + ": peak_reserved_bytes: expected an integer in 0..");
  const std::string huge = edited("huge.json", [](nlohmann::json& j) {
    j["results"][0]["peak_reserved_bytes"] = std::numeric_limits<std::uint64_t>::max();
  });
  require_input_error(run_vramsim("merge " + huge + " " + other.string()),
                      "results[0].peak_reserved_bytes: number 18446744073709551615 is larger");
  const std::string fraction =
      edited("fraction.json", [](nlohmann::json& j) { j["results"][0]["peak_reserved_bytes"] = 1.5; });
  require_input_error(run_vramsim("merge " + fraction + " " + other.string()),
                      "peak_reserved_bytes: expected an integer in 0..");
  const std::string escape =
      edited("escape.json", [](nlohmann::json& j) { j["results"][0]["policy"] = "py\x1b[31mtorch"; });
  require_input_error(run_vramsim("merge " + escape + " " + other.string()),
                      escape + ": results[0].policy: string has control character 0x1B");
}

TEST_CASE("issue 39 #5: generated tokens and steps are bounded by the work they simulate",
          "[quick][cli][bad-input]") {
  require_input_error(
      run_vramsim("predict --model tinyllama-1.1b --gpu h100-80gb --batch 1 --seq 128 --generate 100000"),
      "--generate: 100000 tokens through 22 layers is more than vramsim simulates (131072 layer "
      "passes");
  require_input_error(run_vramsim("fit --model tinyllama-1.1b --gpu h100-80gb --seq 128 --generate 20000"),
                      "--generate: 20000 tokens through 22 layers");
  require_input_error(run_vramsim("sweep --model gpt2 --gpu h100-80gb --seq 128 --steps 100000"),
                      "--steps x --grad-accumulation: 100000 x 1 training passes through 12 layers");
  require_input_error(run_vramsim("predict --model gpt2 --gpu h100-80gb --batch 1 --seq 128 --steps 10000"),
                      "at most 5461 for this model");
}

namespace {

// An executable shell script standing in for the Python interpreter `vramsim trace --python` runs.
std::string fake_python(const std::string& name, const std::string& body) {
  const fs::path p = write_file(name, "#!/bin/sh\n" + body + "\n");
  fs::permissions(p, fs::perms::owner_all);
  return p.string();
}

// A whole shell line ({V} stands for the binary), its stderr captured.
Run run_line(std::string line) {
  const std::string v = vramsim::test::vramsim_binary();
  for (std::size_t at = 0; (at = line.find("{V}", at)) != std::string::npos; at += v.size()) {
    line.replace(at, 3, v);
  }
  const fs::path err_file = scratch("line_stderr.txt");
  const std::string cmd = "{ " + line + " ; } 2>" + err_file.string();
  Run r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("issue 39 #6 and #13: trace waits for its child, not for what the child left running",
          "[quick][cli][bad-input]") {
  const std::string script = write_file("script.py", "print('hi')\n").string();
  const fs::path tmp = scratch("tmp");
  fs::create_directories(tmp);
  // A background process holding the interpreter's stderr: the run ends when the interpreter does. It wrote
  // no outcome, so its exit status 0 is not taken for "traced".
  const fs::path bg_pid = scratch("bg.pid");
  const std::string background =
      fake_python("background.sh", "sleep 30 >&2 &\necho $! > " + bg_pid.string() + "\nexit 0");
  require_input_error(run_vramsim("trace --python " + background + " " + script),
                      "the interpreter ended with status 0 before the tracer finished");
  {
    std::ifstream in(bg_pid);
    pid_t pid = 0;
    if (in >> pid && pid > 0) {
      kill(pid, SIGKILL);
    }
  }
  // os._exit(4) in a script is not "this interpreter has no PyTorch": it is run once and reported as it is.
  const fs::path runs = scratch("runs.txt");
  fs::remove(runs);
  const std::string exits_4 = fake_python("exit4.sh", "echo ran >> " + runs.string() + "\nexit 4");
  require_input_error(run_vramsim("trace --python " + exits_4 + " " + script),
                      "ended with status 4 before the tracer finished");
  CHECK(read_text(runs) == "ran\n");
  // --timeout stops a script that never ends (and what it started); the scratch folder is removed.
  const fs::path started = scratch("started");
  const std::string forever =
      fake_python("forever.sh", "sleep 30 &\ntouch " + started.string() + "\nexec sleep 30");
  const Run timed_out =
      run_line("TMPDIR=" + tmp.string() + " {V} trace --timeout 1 --python " + forever + " " + script);
  require_input_error(timed_out, "still running after --timeout 1 s: stopped");
  require_input_error(run_vramsim("trace --timeout -5 --python " + forever + " " + script),
                      "--timeout: must be in 0..604800");
  // A signal to vramsim stops the script, and the scratch folder is removed.
  fs::remove(started);
  const Run killed = run_line("TMPDIR=" + tmp.string() + " {V} trace --python " + forever + " " + script +
                              " & pid=$!; while [ ! -e " + started.string() +
                              " ]; do sleep 0.1; done; kill -TERM $pid; wait $pid");
  INFO(killed.err);
  CHECK(killed.exit_code == 2);
  CHECK(killed.err.find("stopped by signal 15") != std::string::npos);
  for (const auto& entry : fs::directory_iterator(tmp)) {
    FAIL_CHECK("left behind: " << entry.path());
  }
}

TEST_CASE("issue 39 #14: errors blame what is wrong, and name the file", "[quick][cli][bad-input]") {
  // Settings that are not the recording's cannot rebuild its start state: the option is named, not the file.
  require_input_error(
      run_vramsim("replay " + sample("MAGMA27_memory_snapshot.pickle") +
                  " --alloc-conf roundup_power2_divisions:4"),
      "--alloc-conf: 'roundup_power2_divisions:4' cannot rebuild the allocator state at the trace's start");
  const fs::path config = write_file(
      "overflow.json", "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 1e400}");
  require_input_error(
      run_vramsim("predict --model " + config.string() + " --gpu h100-80gb --batch 1 --seq 128"),
      config.string() + ": byte 65: invalid JSON: number overflow parsing '1e400'");
}

TEST_CASE("issue 39: random options and hostile values end in exit 0 or 2, never a signal or a hang",
          "[cli][bad-input]") {
  // Commands with a small model, so that an accepted combination runs quickly, each with the options it
  // takes (so that many combinations are parsed and run); values half plausible, half what a hostile user
  // would try. `timeout` turns a hang into exit 124 (a failure), not a wait.
  const std::string model = "--model gpt2 --gpu h100-80gb ";
  // clang-format off
  const std::vector<std::string> request = {
      "--steps", "--grad-accumulation", "--alloc-conf", "--tp", "--world-size", "--generate", "--kv-cache",
      "--max-model-len", "--block-size", "--gpu-memory-utilization", "--prompt-len"};
  // clang-format on
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), request.begin(), request.end());
    return extra;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"predict " + model + "--batch 1 --seq 64", with({"--json", "--capacity"})},
      {"fit " + model + "--seq 64", with({"--margin", "--vary", "--json"})},
      {"plan " + model + "--global-batch 2 --seq 64",
       {"--threads", "--gpus", "--margin", "--shard", "--json"}},
      {"sweep " + model + "--seq list:32,64 --policies pytorch", with({"--seed", "--shard", "--json"})},
      {"compare --model gpt2 --batch 1 --seq 64 --policies pytorch,buddy", with({"--capacity", "--json"})},
      {"replay " + sample("MAGMA27_memory_snapshot.pickle"), {"--capacity", "--alloc-conf", "--json"}},
      {"merge /dev/null", {"--json", "--csv"}}};
  const std::vector<std::string> plausible = {
      "1",      "2",    "4", "8", "64", "1/2", "2/2", "0.5", "10%", "80GiB", "expandable_segments:True",
      "static", "batch"};
  const std::vector<std::string> hostile = {"-1",
                                            "0",
                                            "010",
                                            "0x10",
                                            "+5",
                                            "-0",
                                            "1e400",
                                            "nan",
                                            "''",
                                            "x",
                                            "18446744073709551616",
                                            "9223372036854775807",
                                            "4294967297",
                                            "1/0",
                                            "1TB",
                                            "1000TB",
                                            "-1GiB",
                                            "per_process_memory_fraction:0",
                                            "roundup_power2_divisions:0",
                                            "max_split_size_mb:1e400",
                                            "$'\\x1b[31mred'",
                                            "paged",
                                            "/dev/zero"};
  vramsim::test::Rng rng{39};
  int accepted = 0;
  for (int i = 0; i < 60; ++i) {
    const auto& [command, options] = commands[rng.below(commands.size())];
    std::string line = "timeout 120 {V} " + command;
    const std::size_t n = 1 + rng.below(2);
    for (std::size_t k = 0; k < n; ++k) {
      const std::vector<std::string>& values = rng.below(3) != 0 ? plausible : hostile;
      const std::string& option = options[rng.below(options.size())];
      line += " " + option + (option == "--json" ? "" : " " + values[rng.below(values.size())]);
    }
    const Run r = run_line("bash -c \"" + line + "\" >/dev/null");
    INFO(line << "\nstderr: " << r.err);
    CHECK((r.exit_code == 0 || r.exit_code == 2));
    accepted += r.exit_code == 0 ? 1 : 0;
    CHECK(r.err.find('\x1b') == std::string::npos);  // control characters are escaped, never sent raw
    if (r.exit_code == 2) {
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
  }
  CHECK(accepted >= 5);  // the property is tested on runs that go through, not only on parse errors
}

TEST_CASE("issue 39 #4: offline-optimal is bounded by the pairs of overlapping lifetimes, and says so",
          "[quick][cli][bad-input]") {
  // 12,000 allocations all live at once: 71,994,000 pairs, over the 2^26 the planner takes.
  std::string text = "vramsim-trace 1\ndevices 1\nfinal_state no\n";
  const int n = 12000;
  const std::uint64_t base = 0x7f0000000000ULL;
  const std::uint64_t stride = 4ULL << 20;
  for (int i = 0; i < n; ++i) {
    text += fmt::format("0 alloc 0x{:x} {} 0 0\n", base + i * stride, 512 * (1 + i % 4096));
  }
  for (int i = n - 1; i >= 0; --i) {
    text += fmt::format("0 free_requested 0x{:x} {} 0 0\n", base + i * stride, 512 * (1 + i % 4096));
    text += fmt::format("0 free_completed 0x{:x} {} 0 0\n", base + i * stride, 512 * (1 + i % 4096));
  }
  const std::string trace = write_file("all_live.vtrace", text).string();
  require_input_error(run_vramsim("compare " + trace + " --policies offline-optimal"),
                      "offline-optimal: 12000 allocations, up to 12000 live at once, make 71994000 pairs of "
                      "overlapping lifetimes: more than the 67108864 the planner takes");
  // By default compare runs every policy: this one is skipped, with the reason, and the others are reported.
  const Run all = run_vramsim("compare " + trace + " --json");
  const nlohmann::json j = parse_out(all);
  CHECK(j.at("skipped_policies").at(0).at("policy") == "offline-optimal");
  CHECK(j.at("policies").size() >= 3);
  const Run text_run = run_vramsim("compare " + trace);
  CHECK(text_run.out.find("offline-optimal     skipped: offline-optimal: 12000 allocations") !=
        std::string::npos);
}
