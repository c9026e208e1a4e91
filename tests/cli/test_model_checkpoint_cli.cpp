// --model FOLDER with a safetensors checkpoint (issue 41): the report's checkpoint line comes from the files'
// headers, written here by hand for a Llama-architecture model small enough to count on paper; warnings where
// the checkpoint and config.json disagree; one-line errors for a bad index, a missing shard, a bad header.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_util.h"

using namespace vramsim::test;
namespace fs = std::filesystem;

namespace {

// hidden 64, 4 heads of 16, 2 key/value heads, MLP 128, one layer, vocabulary 256, lm_head untied.
constexpr const char* kConfig =
    R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16")";

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<long> shape;
  int element_bits;
};

// modeling_llama.py's state_dict: embeddings 256 x 64 = 16,384; q 64 x 64 = 4,096, k and v 32 x 64 = 2,048,
// o 4,096; gate and up 128 x 64 = 8,192, down 64 x 128 = 8,192; three RMSNorm weights of 64; lm_head 16,384.
// Total 16,384 x 2 + 4,096 x 2 + 2,048 x 2 + 8,192 x 3 + 64 x 3 = 69,824 elements, 139,648 B in bf16.
std::vector<Entry> llama_entries(const std::string& dtype, int bits) {
  std::vector<Entry> e = {{"model.embed_tokens.weight", dtype, {256, 64}, bits},
                          {"model.layers.0.input_layernorm.weight", dtype, {64}, bits},
                          {"model.layers.0.self_attn.q_proj.weight", dtype, {64, 64}, bits},
                          {"model.layers.0.self_attn.k_proj.weight", dtype, {32, 64}, bits},
                          {"model.layers.0.self_attn.v_proj.weight", dtype, {32, 64}, bits},
                          {"model.layers.0.self_attn.o_proj.weight", dtype, {64, 64}, bits},
                          {"model.layers.0.post_attention_layernorm.weight", dtype, {64}, bits},
                          {"model.layers.0.mlp.gate_proj.weight", dtype, {128, 64}, bits},
                          {"model.layers.0.mlp.up_proj.weight", dtype, {128, 64}, bits},
                          {"model.layers.0.mlp.down_proj.weight", dtype, {64, 128}, bits},
                          {"model.norm.weight", dtype, {64}, bits},
                          {"lm_head.weight", dtype, {256, 64}, bits}};
  return e;
}

// A safetensors file as the format lays it out: little-endian length, JSON header, zero bytes of data.
std::string safetensors_file(const std::vector<Entry>& entries) {
  std::string header = "{";
  unsigned long offset = 0;
  for (const Entry& e : entries) {
    unsigned long elements = 1;
    std::string shape;
    for (long d : e.shape) {
      elements *= static_cast<unsigned long>(d);
      if (!shape.empty()) {
        shape.push_back(',');
      }
      shape.append(std::to_string(d));
    }
    const unsigned long bytes = elements * static_cast<unsigned long>(e.element_bits) / 8;
    header += (header.size() > 1 ? "," : "") + std::string("\"") + e.name + "\":{\"dtype\":\"" + e.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + std::string(offset, '\0');
}

fs::path model_folder(const std::string& name, const std::string& config_json) {
  const fs::path dir = scratch(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  return dir;
}

void write(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string predict(const fs::path& dir, const std::string& extra = "") {
  return "predict --model " + dir.string() + " --gpu a100-40gb --batch 1 --seq 64 --steps 1" + extra;
}

}  // namespace

TEST_CASE("issue 41: --model FOLDER reads its safetensors headers", "[cli][checkpoint]") {
  const std::string config = std::string(kConfig) + "}";
  SECTION("one bf16 file: the line carries the header's bytes, no warning") {
    const fs::path dir = model_folder("ckpt_bf16", config);
    write(dir / "model.safetensors", safetensors_file(llama_entries("BF16", 16)));
    const CliRun r = run_vramsim(predict(dir));
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK(
        r.out.find("checkpoint       1 file (model.safetensors), 12 tensors, 139,648 B: BF16 139,648 B (the "
                   "weights as stored, from the safetensors headers)\n") != std::string::npos);
    const CliRun j = run_vramsim(predict(dir, " --json"));
    CHECK(j.out.find(R"("elements": 69824,)") != std::string::npos);
    CHECK(j.out.find(R"("bytes": 139648,)") != std::string::npos);
    CHECK(j.out.find(R"("warnings": [])") != std::string::npos);
  }
  SECTION("an fp32 checkpoint: the real dtype, twice the bytes") {
    const fs::path dir = model_folder("ckpt_fp32", config);
    write(dir / "model.safetensors", safetensors_file(llama_entries("F32", 32)));
    const CliRun r = run_vramsim(predict(dir));
    CHECK(r.out.find("12 tensors, 279,296 B: F32 279,296 B") != std::string::npos);
  }
  SECTION("a checkpoint without lm_head: a warning naming the missing tensor, 69,824 - 16,384 = 53,440") {
    const fs::path dir = model_folder("ckpt_no_head", config);
    std::vector<Entry> e = llama_entries("BF16", 16);
    e.pop_back();
    write(dir / "model.safetensors", safetensors_file(e));
    const CliRun r = run_vramsim(predict(dir));
    REQUIRE(r.exit_code == 0);
    CHECK(r.err ==
          "vramsim: warning: " + (dir / "model.safetensors").string() +
              ": the checkpoint holds 53,440 elements in 11 tensors; config.json implies 69,824 "
              "parameters (model.parameters()): fewer by 16,384 (the size of lm_head.weight [256, 64], "
              "which the checkpoint lacks). The prediction follows config.json\n");
    CHECK(r.out.find("differs from config.json (see the warning)") != std::string::npos);
  }
  SECTION("sharded: the index and its two shards") {
    const fs::path dir = model_folder("ckpt_sharded", config);
    const std::vector<Entry> e = llama_entries("BF16", 16);
    write(dir / "model-00001-of-00002.safetensors", safetensors_file({e.begin(), e.begin() + 6}));
    write(dir / "model-00002-of-00002.safetensors", safetensors_file({e.begin() + 6, e.end()}));
    std::string map;
    for (std::size_t i = 0; i < e.size(); ++i) {
      map += (i ? "," : "") + std::string("\"") + e[i].name + "\":\"model-0000" + (i < 6 ? "1" : "2") +
             "-of-00002.safetensors\"";
    }
    write(dir / "model.safetensors.index.json",
          R"({"metadata":{"total_size":139648},"weight_map":{)" + map + "}}");
    const CliRun r = run_vramsim(predict(dir));
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("checkpoint       2 files (model.safetensors.index.json), 12 tensors, 139,648 B: BF16 "
                     "139,648 B") != std::string::npos);
    // the second shard missing: a partial download
    fs::remove(dir / "model-00002-of-00002.safetensors");
    const CliRun missing = run_vramsim(predict(dir));
    CHECK(missing.exit_code == 2);
    CHECK(missing.err == "vramsim: error: " + (dir / "model.safetensors.index.json").string() +
                             ": shard 'model-00002-of-00002.safetensors' (named in weight_map) is not in the "
                             "folder " +
                             dir.string() +
                             ": a partial download? Fetch it, or give the config.json path alone\n");
    // a tensor the index puts in a shard whose header lacks it
    write(dir / "model.safetensors.index.json",
          R"({"weight_map":{"model.norm.weight":"model-00001-of-00002.safetensors"}})");
    const CliRun absent = run_vramsim(predict(dir));
    CHECK(absent.exit_code == 2);
    CHECK(absent.err.find("weight_map puts tensor 'model.norm.weight' in 'model-00001-of-00002.safetensors', "
                          "whose header has no such tensor\n") != std::string::npos);
    write(dir / "model.safetensors.index.json", R"({"weight_map":{"x":"../../etc/passwd"}})");
    CHECK(run_vramsim(predict(dir)).err.find("weight_map['x'] must name a file of the folder") !=
          std::string::npos);
  }
  SECTION("a truncated file: one line naming the file and the byte, exit 2") {
    const fs::path dir = model_folder("ckpt_truncated", config);
    const std::string bytes = safetensors_file(llama_entries("BF16", 16));
    write(dir / "model.safetensors", bytes.substr(0, bytes.size() - 1000));
    const CliRun r = run_vramsim(predict(dir));
    CHECK(r.exit_code == 2);
    CHECK(r.err.starts_with("vramsim: error: " + (dir / "model.safetensors").string() + ": byte "));
    CHECK(r.err.find("past the file's") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
}

TEST_CASE("issue 41: a GPTQ checkpoint's headers against its quantization_config", "[cli][checkpoint]") {
  const std::string config =
      std::string(kConfig) +
      R"(, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}})";
  // AutoGPTQ's QuantLinear of in x out, 4 bits, group 32 (qlinear_triton.py): qweight int32 [in / 8, out],
  // qzeros int32 [in / 32, out / 8], scales float16 [in / 32, out], g_idx int32 [in].
  const auto linear = [](const std::string& m, long in, long out, long group) {
    return std::vector<Entry>{{m + ".qweight", "I32", {in / 8, out}, 32},
                              {m + ".qzeros", "I32", {in / group, out / 8}, 32},
                              {m + ".scales", "F16", {in / group, out}, 16},
                              {m + ".g_idx", "I32", {in}, 32}};
  };
  const auto checkpoint = [&](long group) {
    std::vector<Entry> e = {{"model.embed_tokens.weight", "F16", {256, 64}, 16},
                            {"model.layers.0.input_layernorm.weight", "F16", {64}, 16},
                            {"model.layers.0.post_attention_layernorm.weight", "F16", {64}, 16},
                            {"model.norm.weight", "F16", {64}, 16},
                            {"lm_head.weight", "F16", {256, 64}, 16}};
    for (const auto& [m, in, out] :
         std::vector<std::tuple<std::string, long, long>>{{"model.layers.0.self_attn.q_proj", 64, 64},
                                                          {"model.layers.0.self_attn.k_proj", 64, 32},
                                                          {"model.layers.0.self_attn.v_proj", 64, 32},
                                                          {"model.layers.0.self_attn.o_proj", 64, 64},
                                                          {"model.layers.0.mlp.gate_proj", 64, 128},
                                                          {"model.layers.0.mlp.up_proj", 64, 128},
                                                          {"model.layers.0.mlp.down_proj", 128, 64}}) {
      for (const Entry& x : linear(m, in, out, group)) {
        e.push_back(x);
      }
    }
    return safetensors_file(e);
  };
  SECTION("as quantized with group 32: no warning; the refusal quotes the headers") {
    // qweight 2,048 (q) + 1,024 x 2 (k, v) + 2,048 (o) + 4,096 x 3 (gate, up, down) = 18,432 B; qzeros 576 B;
    // scales 2,304 B; g_idx 256 x 6 + 512 = 2,048 B. I32 18,432 + 576 + 2,048 = 21,056 B; F16 2,304 + 32,768
    // x 2
    // + 64 x 2 x 3 = 68,224 B; 5 + 7 x 4 = 33 tensors, 89,280 B.
    const fs::path dir = model_folder("ckpt_gptq", config);
    write(dir / "model.safetensors", checkpoint(32));
    const CliRun r = run_vramsim(predict(dir));
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("warning") == std::string::npos);
    CHECK(r.err.find(
              "; the checkpoint's safetensors headers: 1 file (model.safetensors), 33 tensors, 89,280 B: "
              "F16 68,224 B, I32 21,056 B; predicting with these weights is not modelled") !=
          std::string::npos);
  }
  SECTION("written with group 64 but configured with 32: the zero points and scales disagree") {
    // group 64: qzeros 32 + 16 + 16 + 32 + 64 + 64 + 64 = 288 B; scales 128 + 64 + 64 + 128 + 256 + 256 + 256
    // = 1,152 B. config.json's group 32 implies 576 and 2,304.
    const fs::path dir = model_folder("ckpt_gptq_64", config);
    write(dir / "model.safetensors", checkpoint(64));
    const CliRun r = run_vramsim(predict(dir));
    const std::string file = (dir / "model.safetensors").string();
    CHECK(r.err.starts_with(
        "vramsim: warning: " + file +
        ": qzeros: the checkpoint holds 7 tensors of 288 B; config.json implies 7 of 576 B\n"
        "vramsim: warning: " +
        file +
        ": scales: the checkpoint holds 7 tensors of 1,152 B; config.json implies 7 of 2,304 "
        "B\nvramsim: error: "));
  }
}

TEST_CASE("issue 41: a compressed-tensors checkpoint: refused, with what its headers hold",
          "[cli][checkpoint]") {
  // llm-compressor's pack-quantized W4A16 layout of q_proj (64 x 64): weight_packed int32 [64, 64 / 8] =
  // 2,048 B, weight_scale bfloat16 [64, 64 / 32] = 256 B, weight_shape int64 [2] = 16 B; embeddings bf16
  // 32,768 B.
  const fs::path dir = model_folder(
      "ckpt_compressed",
      std::string(kConfig) +
          R"(, "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}})");
  write(dir / "model.safetensors",
        safetensors_file({{"model.embed_tokens.weight", "BF16", {256, 64}, 16},
                          {"model.layers.0.self_attn.q_proj.weight_packed", "I32", {64, 8}, 32},
                          {"model.layers.0.self_attn.q_proj.weight_scale", "BF16", {64, 2}, 16},
                          {"model.layers.0.self_attn.q_proj.weight_shape", "I64", {2}, 64}}));
  const CliRun r = run_vramsim(predict(dir));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("'compressed-tensors' is not modelled") != std::string::npos);
  CHECK(r.err.ends_with(
      "; the checkpoint's safetensors headers: 1 file (model.safetensors), 4 tensors, 35,088 B: "
      "BF16 33,024 B, I32 2,048 B, I64 16 B\n"));
}
