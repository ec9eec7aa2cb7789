// safetensors: round trips of every dtype and metadata, f16/bf16 -> f32, and hostile files: every
// bad input throws pylon::Error naming the file (never crashes), including 2000 random mutations.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace pylon {
namespace {

constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8, DType::u8,
                          DType::i16, DType::u16, DType::i32, DType::u32, DType::i64};

// A file from a header text and a data buffer, as any writer could make it.
std::string raw_file(const std::string& header, const std::string& data = "") {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Expects SafetensorsReader to throw pylon::Error whose message starts with the path.
void expect_rejected(const std::string& path, const std::string& why = "") {
  try {
    SafetensorsReader r(path);
    ADD_FAILURE() << "accepted a bad file: " << why;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

void expect_header_rejected(const test::TempDir& dir, const std::string& header,
                            const std::string& data = std::string(64, '\0')) {
  const std::string path = dir.file("bad.safetensors");
  test::write_bytes(path, raw_file(header, data));
  expect_rejected(path, header);
}

std::string tensor_json(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  test::TempDir dir;
  const std::string path = dir.file("all.safetensors");
  std::mt19937 rng(7);
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<TensorToWrite> tensors;
  for (DType d : kAll) {
    TensorToWrite t{std::string("t_") + dtype_name(d), d, {2, 3}, nullptr};
    bytes.emplace_back(6 * dtype_size(d));
    for (auto& b : bytes.back()) b = static_cast<unsigned char>(rng());
    tensors.push_back(t);
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = bytes[i].data();
  const float scalar = 3.5f;
  tensors.push_back({"scalar", DType::f32, {}, &scalar});
  tensors.push_back({"empty", DType::i64, {0, 4}, nullptr});
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo \"q\"\n"}};
  write_safetensors(path, tensors, meta);

  // The data starts on an 8-byte boundary.
  uint64_t header_len = 0;
  std::memcpy(&header_len, test::read_bytes(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), meta);
  ASSERT_EQ(r.tensors().size(), tensors.size());
  for (size_t i = 0; i < std::size(kAll); ++i) {
    const TensorView* t = r.find(tensors[i].name);
    ASSERT_NE(t, nullptr) << tensors[i].name;
    EXPECT_EQ(t->dtype, kAll[i]);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t->numel(), 6);
    ASSERT_EQ(t->nbytes, bytes[i].size());
    EXPECT_EQ(std::memcmp(t->data, bytes[i].data(), t->nbytes), 0) << t->name;
  }
  float s = 0;
  r.read_f32("scalar", {}, &s);
  EXPECT_EQ(s, 3.5f);
  EXPECT_EQ(r.find("empty")->nbytes, 0u);
  EXPECT_EQ(r.find("nope"), nullptr);
}

TEST(Safetensors, DtypeNamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::bf16), "BF16");
  EXPECT_STREQ(dtype_name(DType::i64), "I64");
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(shape_text({3, 4}), "(3, 4)");
  EXPECT_EQ(shape_text({}), "()");
}

TEST(Safetensors, ReadF32ConvertsF16AndBf16) {
  test::TempDir dir;
  const std::string path = dir.file("half.safetensors");
  const float inf = std::numeric_limits<float>::infinity();
  // f16: 1, -2, max, smallest subnormal, largest subnormal, 0.5, -0.5, -0
  const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x3800, 0xB800, 0x8000};
  const float f16_want[] = {1.f, -2.f, 65504.f, std::ldexp(1.f, -24), std::ldexp(1023.f, -24),
                            0.5f, -0.5f, -0.f};
  // bf16: 1, -3, 2^-133 (subnormal), max, 2
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x0001, 0x7F7F, 0x4000};
  const float bf16_want[] = {1.f, -3.f, std::ldexp(1.f, -133), std::bit_cast<float>(0x7F7F0000u), 2.f};
  // Non-finite weights are refused by name (issue 38): f16 nan, bf16 nan, f16 -inf, bf16 inf, f32 inf.
  const uint16_t nans[] = {0x7E00, 0x7FC0, 0xFC00, 0x7F80};
  const float f32[] = {0.25f, -7.f}, f32_inf[] = {1.f, inf};
  write_safetensors(path, {{"h", DType::f16, {2, 4}, f16},
                           {"b", DType::bf16, {5}, bf16},
                           {"hn", DType::f16, {1}, &nans[0]},
                           {"bn", DType::bf16, {1}, &nans[1]},
                           {"hi", DType::f16, {1}, &nans[2]},
                           {"bi", DType::bf16, {1}, &nans[3]},
                           {"fi", DType::f32, {2}, f32_inf},
                           {"f", DType::f32, {2}, f32}});
  SafetensorsReader r(path);
  float out[8];
  r.read_f32("h", {2, 4}, out);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], f16_want[i]) << i;
    EXPECT_EQ(std::signbit(out[i]), std::signbit(f16_want[i])) << i;
  }
  r.read_f32("b", {5}, out);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], bf16_want[i]) << i;
  for (const auto& [name, what] : std::vector<std::pair<std::string, std::string>>{
           {"hn", "tensor hn holds NaN at element 0"}, {"bn", "tensor bn holds NaN at element 0"},
           {"hi", "tensor hi holds Inf at element 0"}, {"bi", "tensor bi holds Inf at element 0"}}) {
    try {
      r.read_f32(name, {1}, out);
      ADD_FAILURE() << name << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(r.read_f32("fi", {2}, out), Error);
  r.read_f32_range("fi", {2}, 0, 1, out);  // the finite part of it
  EXPECT_EQ(out[0], 1.f);
  r.read_f32("f", {2}, out);
  EXPECT_EQ(out[0], 0.25f);
  EXPECT_EQ(out[1], -7.f);
}

TEST(Safetensors, ReadF32RejectsMissingWrongShapeAndWrongDtype) {
  test::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const float w[6] = {};
  const int32_t ints[2] = {1, 2};
  write_safetensors(path, {{"w", DType::f32, {2, 3}, w}, {"i", DType::i32, {2}, ints}});
  SafetensorsReader r(path);
  float out[6];
  try {
    r.read_f32("x", {2, 3}, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": tensor x is missing");
  }
  try {
    r.read_f32("w", {3, 2}, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": tensor w has shape (2, 3), expected (3, 2)");
  }
  EXPECT_THROW(r.read_f32("w", {6}, out), Error);
  EXPECT_THROW(r.read_f32("i", {2}, out), Error);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  test::TempDir dir;
  const float x = 1;
  const std::string path = dir.file("w.safetensors");
  EXPECT_THROW(write_safetensors(path, {{"a", DType::f32, {1}, &x}, {"a", DType::f32, {1}, &x}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", DType::f32, {1}, &x}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"a", DType::f32, {-1}, &x}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"bad\xff", DType::f32, {1}, &x}}), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A small valid file with metadata, several dtypes and an empty tensor at the end.
std::string small_valid_file(const test::TempDir& dir) {
  const std::string path = dir.file("valid.safetensors");
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t h[3] = {0x3C00, 0x4000, 0x4200};
  const int64_t ids[2] = {-1, 7};
  write_safetensors(path,
                    {{"w", DType::f32, {2, 3}, w},
                     {"h", DType::bf16, {3}, h},
                     {"ids", DType::i64, {2}, ids},
                     {"z", DType::f16, {0}, nullptr}},
                    {{"k", "v"}});
  return test::read_bytes(path);
}

TEST(Safetensors, EveryTruncationIsRejected) {
  test::TempDir dir;
  const std::string valid = small_valid_file(dir);
  const std::string path = dir.file("cut.safetensors");
  for (size_t len = 0; len < valid.size(); ++len) {
    test::write_bytes(path, valid.substr(0, len));
    expect_rejected(path, "truncated to " + std::to_string(len));
  }
  test::write_bytes(path, valid);
  EXPECT_NO_THROW(SafetensorsReader{path});
}

TEST(Safetensors, HeaderLengthIsChecked) {
  test::TempDir dir;
  const std::string path = dir.file("len.safetensors");
  std::string file = raw_file("{}");
  const uint64_t too_big = 100'000'001;
  std::memcpy(file.data(), &too_big, 8);
  test::write_bytes(path, file);
  expect_rejected(path, "header over 100 MB");
  const uint64_t past_end = 3;  // "{}" is 2 bytes
  std::memcpy(file.data(), &past_end, 8);
  test::write_bytes(path, file);
  expect_rejected(path, "header past the end");
  const uint64_t huge = ~0ull;
  std::memcpy(file.data(), &huge, 8);
  test::write_bytes(path, file);
  expect_rejected(path, "header length 2^64-1");
  test::write_bytes(path, raw_file("{}  "));  // no tensors, padded: valid
  EXPECT_NO_THROW(SafetensorsReader{path});
}

TEST(Safetensors, BadJsonIsRejected) {
  test::TempDir dir;
  const std::vector<std::string> headers = {"", "{", "[]", "nul", "\"s\"", "42", "{\"a\":}", "{} x",
                                            "{\"t\":\"\xff\"}", std::string(4, '\0')};
  for (const std::string& header : headers) expect_header_rejected(dir, header);
  expect_header_rejected(dir, std::string(100000, '['));  // deep nesting must not overflow
  expect_header_rejected(dir, std::string(100000, '[') + std::string(100000, ']'));
}

TEST(Safetensors, BadEntriesAreRejected) {
  test::TempDir dir;
  const std::string ok_shape = "[2]", ok_offsets = "[0,8]";
  test::write_bytes(dir.file("ok"), raw_file(tensor_json("\"F32\"", ok_shape, ok_offsets), std::string(8, '\0')));
  EXPECT_NO_THROW(SafetensorsReader{dir.file("ok")});

  expect_header_rejected(dir, R"({"t":5})");
  expect_header_rejected(dir, R"({"t":{"shape":[2],"data_offsets":[0,8]}})");
  expect_header_rejected(dir, R"({"t":{"dtype":"F32","data_offsets":[0,8]}})");
  expect_header_rejected(dir, R"({"t":{"dtype":"F32","shape":[2]}})");
  // dtype
  expect_header_rejected(dir, tensor_json("\"F8_E4M3\"", ok_shape, ok_offsets));
  expect_header_rejected(dir, tensor_json("\"f32\"", ok_shape, ok_offsets));
  expect_header_rejected(dir, tensor_json("32", ok_shape, ok_offsets));
  // shape
  expect_header_rejected(dir, tensor_json("\"F32\"", "[-2]", ok_offsets));
  expect_header_rejected(dir, tensor_json("\"F32\"", "[2.0]", ok_offsets));
  expect_header_rejected(dir, tensor_json("\"F32\"", "[\"2\"]", ok_offsets));
  expect_header_rejected(dir, tensor_json("\"F32\"", "2", ok_offsets));
  expect_header_rejected(dir, tensor_json("\"F32\"", "[4611686018427387904,4611686018427387904]", "[0,0]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", "[4611686018427387904]", "[0,0]"));
  expect_header_rejected(dir, tensor_json("\"U8\"", "[18446744073709551615]", "[0,0]"));
  // offsets: out of range, backwards, wrong size, malformed
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[60,68]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[18446744073709551608,0]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[8,0]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[0,12]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[0,4]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[0]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[0,8,16]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "[-8,0]"));
  expect_header_rejected(dir, tensor_json("\"F32\"", ok_shape, "{}"));
  // overlapping tensors
  expect_header_rejected(dir, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})");
  expect_header_rejected(dir, R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})");
  expect_header_rejected(dir, R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})");
  // metadata
  expect_header_rejected(dir, R"({"__metadata__":{"k":1}})");
  expect_header_rejected(dir, R"({"__metadata__":{"k":null}})");
  expect_header_rejected(dir, R"({"__metadata__":["k"]})");
}

TEST(Safetensors, ErrorMessagesAreOneLineWithHostileNames) {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  test::write_bytes(path, raw_file(R"({"line\nbreak":{"dtype":"X","shape":[],"data_offsets":[0,0]}})"));
  expect_rejected(path);
}

// 2000 seeded mutations of a valid file (mostly in the header, where parsing happens): each one
// loads or throws pylon::Error. A loaded file is read end to end.
TEST(Safetensors, MutationFuzz) {
  test::TempDir dir;
  const std::string valid = small_valid_file(dir);
  uint64_t header_len = 0;
  std::memcpy(&header_len, valid.data(), 8);
  const size_t header_end = 8 + static_cast<size_t>(header_len);
  const std::string path = dir.file("fuzz.safetensors");
  std::mt19937_64 rng(20240520);
  const std::string interesting = "{}[]\",:0123456789-.eE \\\x00\xff";
  int loaded = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string f = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      const bool in_header = rng() % 8 != 0 && header_end <= f.size();
      const size_t pos = in_header ? rng() % header_end : rng() % f.size();
      switch (rng() % 6) {
        case 0: f[pos] = static_cast<char>(rng()); break;
        case 1: f[pos] = static_cast<char>(f[pos] ^ (1 << (rng() % 8))); break;
        case 2: f[pos] = interesting[rng() % interesting.size()]; break;
        case 3: f.erase(pos, 1 + rng() % 4); break;
        case 4: f.insert(pos, 1, interesting[rng() % interesting.size()]); break;
        case 5: f.resize(pos); break;
      }
    }
    test::write_bytes(path, f);
    try {
      SafetensorsReader r(path);
      ++loaded;
      std::vector<float> out;
      for (const TensorView& t : r.tensors()) {
        volatile unsigned sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum = sum + static_cast<unsigned>(t.data[i]);
        if (t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16) {
          out.resize(static_cast<size_t>(t.numel()));
          r.read_f32(t.name, t.shape, out.data());
        }
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(loaded, 0);  // some mutations (e.g. in the data) leave a valid file
}

}  // namespace
}  // namespace pylon
