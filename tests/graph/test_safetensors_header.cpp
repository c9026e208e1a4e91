// The safetensors header reader (sim/hub/safetensors_header.h) on files whose bytes the tests write by
// hand: the safetensors crate's own test vectors (safetensors/src/tensor.rs, test_serialization and
// test_empty), and one bad input per rule the crate enforces (SafeTensors::read_metadata,
// Metadata::validate), each with the byte offset worked out by hand.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "sim/core/error.h"
#include "sim/hub/safetensors_header.h"
#include "test_rng.h"

using namespace vramsim;

namespace {

// The 8-byte little-endian length, then the header as written.
std::string prefixed(const std::string& header, std::uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return out + header;
}

// A whole file: prefix, header, and `data_bytes` zero bytes of tensor data.
std::string file_bytes(const std::string& header, std::uint64_t data_bytes) {
  return prefixed(header, header.size()) + std::string(data_bytes, '\0');
}

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors_header(bytes, bytes.size(), "m.safetensors");
}

std::string error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("safetensors header: the crate's test vectors") {
  SECTION("test_serialization: one F32 tensor [1, 2, 3], 24 bytes") {
    // tensor.rs test_serialization: 64, 0, 0, 0, 0, 0, 0, 0, then this 64-byte header, then 6 floats.
    const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(header.size() == 64);
    const SafetensorsHeader h = parse(file_bytes(header, 24));
    REQUIRE(h.tensors.size() == 1);
    CHECK(h.header_size_bytes == 64);
    CHECK(h.data_size_bytes == 24);
    CHECK(h.tensors[0].name == "attn.0");
    CHECK(h.tensors[0].dtype == "F32");
    CHECK(h.tensors[0].shape == std::vector<std::int64_t>{1, 2, 3});
    CHECK(h.tensors[0].numel() == 6);
    CHECK(h.tensors[0].size_bytes() == 24);
  }
  SECTION("test_empty: no tensors, a header padded with spaces to 8 bytes, with and without __metadata__") {
    CHECK(parse(file_bytes("{}      ", 0)).tensors.empty());
    CHECK(parse(file_bytes(R"({"__metadata__":{"framework":"pt"}}     )", 0)).tensors.empty());
  }
}

TEST_CASE("safetensors header: quantized layouts read as stored") {
  // A GPTQ linear of in 64, out 32, 4 bits, group 32 (AutoGPTQ QuantLinear): qweight int32 [64 / 32 * 4, 32]
  // = 8 x 32 x 4 = 1,024 B at 0; qzeros int32 [2, 32 / 32 * 4] = 32 B at 1,024; scales float16 [2, 32] = 128
  // B at 1,056; g_idx int32 [64] = 256 B at 1,184; ends at 1,440. Written out of order on purpose: the crate
  // sorts by offsets.
  const std::string header = R"({"l.scales":{"dtype":"F16","shape":[2,32],"data_offsets":[1056,1184]},)"
                             R"("l.qweight":{"dtype":"I32","shape":[8,32],"data_offsets":[0,1024]},)"
                             R"("l.g_idx":{"dtype":"I32","shape":[64],"data_offsets":[1184,1440]},)"
                             R"("l.qzeros":{"dtype":"I32","shape":[2,4],"data_offsets":[1024,1056]}})";
  const SafetensorsHeader h = parse(file_bytes(header, 1440));
  REQUIRE(h.tensors.size() == 4);
  CHECK(h.tensors[0].name == "l.qweight");
  CHECK(h.tensors[1].name == "l.qzeros");
  CHECK(h.tensors[3].name == "l.g_idx");
  // bitsandbytes 4-bit: a 64 x 32 weight packs into uint8 [1024, 1]; absmax float32 per 64 values [32];
  // fp8: float8_e4m3 [32, 64] with a float32 weight_scale_inv [1, 1]; F4 (two values a byte) [4, 4] = 8 B.
  const std::string mixed =
      R"({"b.weight":{"dtype":"U8","shape":[1024,1],"data_offsets":[0,1024]},)"
      R"("b.weight.absmax":{"dtype":"F32","shape":[32],"data_offsets":[1024,1152]},)"
      R"("f.weight":{"dtype":"F8_E4M3","shape":[32,64],"data_offsets":[1152,3200]},)"
      R"("f.weight_scale_inv":{"dtype":"F32","shape":[1,1],"data_offsets":[3200,3204]},)"
      R"("n.weight":{"dtype":"F4","shape":[4,4],"data_offsets":[3204,3212]}})";
  const SafetensorsHeader m = parse(file_bytes(mixed, 3212));
  REQUIRE(m.tensors.size() == 5);
  CHECK(m.tensors[2].dtype == "F8_E4M3");
  CHECK(m.tensors[4].size_bytes() == 8);
  CHECK(safetensors_dtype_bits("F4") == 4);
  CHECK(safetensors_dtype_bits("F6_E2M3") == 6);
  CHECK(safetensors_dtype_bits("C64") == 64);
  CHECK(safetensors_dtype_bits("F8_E4M3FN") == 0);  // torch's name, not the crate's
}

TEST_CASE("safetensors header: every refusal names the file, the byte and the problem") {
  const std::string t = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  SECTION("too short for the length: HeaderTooSmall") {
    CHECK(error_of(std::string(5, '\0')) ==
          "m.safetensors: byte 0: a file of 5 bytes has no 8-byte header length (not a safetensors file?)");
  }
  SECTION("a length over 100,000,000: HeaderTooLarge (a pickle or a zip read as safetensors)") {
    CHECK(error_of(prefixed("{}", ~std::uint64_t{0})) ==
          "m.safetensors: byte 0: header length 18446744073709551615 is over safetensors' limit of 100000000 "
          "bytes (not a safetensors file?)");
    CHECK(error_of(prefixed("{}", 100'000'001)).find("header length 100000001 is over") != std::string::npos);
  }
  SECTION("a length past the end of the file: InvalidHeaderLength (a truncated download)") {
    CHECK(error_of(prefixed(t.substr(0, 20), t.size())) ==
          "m.safetensors: byte 0: header length 54 runs past the end of the file (28 bytes)");
  }
  SECTION("bad JSON: the offset is the file's (8 for the header's first byte)") {
    // {"a":}  -> '{' at 8, '"' 9, 'a' 10, '"' 11, ':' 12, '}' 13: the value is missing at byte 13.
    const std::string e = error_of(file_bytes(R"({"a":})", 0));
    CHECK(e.starts_with("m.safetensors: byte 13: invalid JSON: "));
    CHECK(error_of(file_bytes("[]", 0)) == "m.safetensors: byte 8: the header is not a JSON object");
  }
  SECTION("an unknown dtype") {
    // the entry "w" begins at byte 8 + 1 = 9
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': unknown dtype \"F128\" (safetensors' Dtype: BOOL, F4, F6_E2M3, "
          "F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, "
          "U64)");
  }
  SECTION("overlapping, gapped, reversed and out-of-range data_offsets: InvalidOffset") {
    // "b" begins at byte 8 + 54 = 62 in both headers below (the first entry is 54 characters with its comma)
    CHECK(error_of(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12)) ==
          "m.safetensors: byte 62: tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    CHECK(error_of(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              12)) ==
          "m.safetensors: byte 62: tensor 'b': data_offsets [8, 12] leave bytes 4..8 of the data unclaimed");
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': data_offsets [8, 0] end before they begin");
    // data_offsets past the file's 4 bytes of data; the header is 54 bytes, so the data begins at 62 and the
    // file ends at 66
    CHECK(error_of(file_bytes(t, 4)) ==
          "m.safetensors: byte 66: the tensors' data ends at byte 8 of the data, past the file's 4 bytes of "
          "data (truncated file?)");
    // bytes after the last tensor: MetadataIncompleteBuffer; the unclaimed byte is at 62 + 8 = 70
    CHECK(error_of(file_bytes(t, 9)) ==
          "m.safetensors: byte 70: the file has 9 bytes of data after the header but the tensors claim 8");
  }
  SECTION("shape x dtype size against the span: TensorInvalidInfo, ValidationOverflow, MisalignedSlice") {
    CHECK(
        error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", 8)) ==
        "m.safetensors: byte 9: tensor 'w': shape [2, 2] of F32 is 16 bytes but data_offsets [0, 8] span 8");
    // 2^32 x 2^32 x 4 elements: the product wraps 64 bits
    CHECK(error_of(file_bytes(
              R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': shape x dtype size overflows 64 bits");
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2)) ==
          "m.safetensors: byte 9: tensor 'w': 3 elements of F4 are not a whole number of bytes");
  }
  SECTION("entries of the wrong shape") {
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': shape must be non-negative integers");
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': data_offsets must be non-negative integers");
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': needs \"dtype\", \"shape\" and \"data_offsets\"");
    CHECK(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)) ==
          "m.safetensors: byte 9: tensor 'w': data_offsets must be [begin, end]");
    CHECK(error_of(file_bytes(R"({"__metadata__":{"format":1}})", 0)) ==
          "m.safetensors: byte 9: __metadata__ must map strings to strings");
  }
}

TEST_CASE("safetensors header: truncations and byte flips never crash, and a truncated file is refused") {
  const std::string good = file_bytes(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                                      R"("b":{"dtype":"I32","shape":[2],"data_offsets":[12,20]}})",
                                      20);
  REQUIRE(parse(good).tensors.size() == 2);
  // Every proper prefix is a truncated file: some rule must refuse it (the data no longer matches).
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK(error_of(good.substr(0, n)).starts_with("m.safetensors: byte "));
  }
  // Random single-byte changes: parsed or refused with a located message, never anything else.
  vramsim::test::Rng rng{41};
  for (int i = 0; i < 4000; ++i) {
    std::string bad = good;
    bad[rng.below(bad.size() - 20)] = static_cast<char>(rng.below(256));
    try {
      parse(bad);
    } catch (const InputError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).starts_with("m.safetensors: byte "));
    }
  }
}

TEST_CASE("safetensors header: read from a file, only the header") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "vramsim_safetensors_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "model.safetensors";
  std::ofstream(path, std::ios::binary)
      << file_bytes(R"({"w":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]}})", 64);
  const SafetensorsHeader h = read_safetensors_header(path.string());
  REQUIRE(h.tensors.size() == 1);
  CHECK(h.tensors[0].size_bytes() == 64);
  CHECK(h.path == path.string());
  std::filesystem::resize_file(path, 70);  // 8 + 58 header bytes + 4 of the 64 data bytes
  CHECK_THROWS_WITH(read_safetensors_header(path.string()), Catch::Contains("model.safetensors: byte ") &&
                                                                Catch::Contains("past the file's 4 bytes"));
  CHECK_THROWS_WITH(read_safetensors_header(dir.string()), dir.string() + ": not a readable file");
  std::filesystem::remove_all(dir);
}
