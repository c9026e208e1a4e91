// End-to-end: the vramsim binary on good and bad input. Bad input must give one line on stderr naming the file
// (or option) and the position, and a non-zero exit; never a crash.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "test_paths.h"

namespace fs = std::filesystem;

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Per-process scratch space: CTest runs test cases in parallel processes.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("vramsim_cli_tests." + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir / name;
}

RunResult run_vramsim(const std::string& args) {
  const fs::path err_file = scratch("stderr.txt");
  const std::string cmd = std::string(VRAMSIM_BINARY) + " " + args + " 2>" + err_file.string();
  RunResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    r.out.append(buf.data(), n);
  }
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

fs::path write_file(const std::string& name, const std::string& bytes) {
  const fs::path p = scratch(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::string sample(const std::string& name) {
  return (vramsim::test::source_dir() / "traces" / "samples" / name).string();
}

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
  const RunResult r = run_vramsim("replay " + sample("kkaitlyn111_memory_ctx128_forward.pickle") + " --check");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("check segments   289 / 289") != std::string::npos);
  CHECK(r.out.find("check allocs     2058 / 2058") != std::string::npos);
  CHECK(r.out.find("IDENTICAL") != std::string::npos);
}

TEST_CASE("replay --json has the documented keys", "[quick][cli]") {
  const RunResult r = run_vramsim("replay " + sample("MAGMA27_memory_snapshot.pickle") + " --check --json --stats");
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
  const std::string args = "replay " + sample("cranberrii_memory_snapshot.pickle") + " --check --json --stats";
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
  SECTION("missing file") { require_clean_error(run_vramsim("replay /nonexistent/x.pickle"), "/nonexistent/x.pickle"); }
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
    const fs::path p = write_file("evil.pickle", std::string("\x80\x04" "cos\nsystem\n(S'echo pwned'\ntR.", 31));
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
    const fs::path p = write_file("neg.vtrace", "vramsim-trace 1\ndevices 1\nfinal_state no\n0 alloc 0x1000 -100 0 0\n");
    require_clean_error(run_vramsim("replay " + p.string()), "neg.vtrace: line 4");
  }
  SECTION("absurd size in a vtrace") {
    const fs::path p = write_file("huge.vtrace",
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
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf foo:1"), "--alloc-conf: foo: unknown option");
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf max_split_size_mb:2"), "max_split_size_mb");
  require_clean_error(run_vramsim("replay " + s + " --alloc-conf garbage_collection_threshold:1.2"),
                      "garbage_collection_threshold");
  require_clean_error(run_vramsim("replay " + s + " --capacity 12parsecs"), "--capacity");
  require_clean_error(run_vramsim("replay " + s + " --device 7"), "--device 7");
  const RunResult unknown = run_vramsim("replay " + s + " --bogus");
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.err.find("--bogus") != std::string::npos);
}

TEST_CASE("replay --check fails when the model is configured differently from the recording", "[quick][cli]") {
  // The recordings ran with default settings. Rounding to 2 divisions per power of two turns cranberrii's 8,192,000
  // byte request (event 8) into 8 MiB, which no longer fits where the recording put it; and a 16 GiB device cannot
  // hold the 18.32 GiB that ctx128_forward reached.
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
