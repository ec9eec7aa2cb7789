// Token files: u16 and u32 round trips, llm.c header detection, bad sizes, check_vocab's message.
#include "io/token_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "test_util.h"

namespace pylon {
namespace {

std::string le_bytes(const void* p, size_t n) { return {static_cast<const char*>(p), n}; }

std::string llmc_file(int32_t version, int32_t count, const std::string& tokens) {
  int32_t header[256] = {20240520, version, count};
  return le_bytes(header, sizeof header) + tokens;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected pylon::Error";
  return "";
}

TEST(TokenFile, ParsesWidths) {
  EXPECT_EQ(parse_token_width("auto"), TokenWidth::automatic);
  EXPECT_EQ(parse_token_width("u16"), TokenWidth::u16);
  EXPECT_EQ(parse_token_width("u32"), TokenWidth::u32);
  EXPECT_THROW(parse_token_width("u8"), Error);
}

TEST(TokenFile, U16RoundTripIsRawNanoGptFormat) {
  test::TempDir dir;
  const std::string path = dir.file("train.bin");
  const std::vector<uint32_t> tokens = {0, 1, 65535, 42, 300};
  write_token_file(path, tokens, TokenWidth::u16);
  EXPECT_EQ(test::read_bytes(path).size(), 10u);
  TokenFile f(path);
  EXPECT_EQ(f.size(), 5);
  EXPECT_EQ(f.bytes_per_token(), 2);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(f[static_cast<int64_t>(i)], tokens[i]);
  EXPECT_THROW(write_token_file(path, {1, 65536}, TokenWidth::u16), Error);
}

TEST(TokenFile, U32IsWrittenWithAHeaderAndDetected) {
  test::TempDir dir;
  const std::string path = dir.file("big.bin");
  const std::vector<uint32_t> tokens = {70000, 5, 4000000000u};
  write_token_file(path, tokens, TokenWidth::automatic);  // does not fit u16 -> u32
  EXPECT_EQ(test::read_bytes(path).size(), 1024u + 12u);
  TokenFile f(path);
  EXPECT_EQ(f.size(), 3);
  EXPECT_EQ(f.bytes_per_token(), 4);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(f[static_cast<int64_t>(i)], tokens[i]);
  EXPECT_THROW(TokenFile(path, TokenWidth::u16), Error);  // the header says u32
}

TEST(TokenFile, RawU32ByNameOrFlag) {
  test::TempDir dir;
  const uint32_t tokens[] = {100000, 2};
  test::write_bytes(dir.file("x.u32"), le_bytes(tokens, 8));
  TokenFile by_name(dir.file("x.u32"));
  EXPECT_EQ(by_name.size(), 2);
  EXPECT_EQ(by_name[0], 100000u);
  test::write_bytes(dir.file("x.bin"), le_bytes(tokens, 8));
  TokenFile by_flag(dir.file("x.bin"), TokenWidth::u32);
  EXPECT_EQ(by_flag[1], 2u);
  EXPECT_EQ(TokenFile(dir.file("x.bin")).size(), 4);  // read as u16 by default
}

TEST(TokenFile, DetectsLlmcHeader) {
  test::TempDir dir;
  const uint16_t tokens[] = {7, 8, 9};
  test::write_bytes(dir.file("v1.bin"), llmc_file(1, 3, le_bytes(tokens, 6)));
  TokenFile f(dir.file("v1.bin"));
  EXPECT_EQ(f.size(), 3);
  EXPECT_EQ(f.bytes_per_token(), 2);
  EXPECT_EQ(f[2], 9u);

  test::write_bytes(dir.file("count.bin"), llmc_file(1, 4, le_bytes(tokens, 6)));
  const std::string msg = message_of([&] { TokenFile g(dir.file("count.bin")); });
  EXPECT_NE(msg.find("says 4 tokens"), std::string::npos) << msg;
  test::write_bytes(dir.file("neg.bin"), llmc_file(1, -1, le_bytes(tokens, 6)));
  EXPECT_THROW(TokenFile(dir.file("neg.bin")), Error);
  test::write_bytes(dir.file("version.bin"), llmc_file(3, 3, le_bytes(tokens, 6)));
  EXPECT_THROW(TokenFile(dir.file("version.bin")), Error);
  test::write_bytes(dir.file("none.bin"), llmc_file(1, 0, ""));
  EXPECT_THROW(TokenFile(dir.file("none.bin")), Error);
}

TEST(TokenFile, RejectsBadSizesAndMissingFiles) {
  test::TempDir dir;
  test::write_bytes(dir.file("odd.bin"), "abc");
  const std::string msg = message_of([&] { TokenFile f(dir.file("odd.bin")); });
  EXPECT_EQ(msg.rfind(dir.file("odd.bin") + ": ", 0), 0u) << msg;
  test::write_bytes(dir.file("six.u32"), "abcdef");
  EXPECT_THROW(TokenFile(dir.file("six.u32")), Error);
  test::write_bytes(dir.file("empty.bin"), "");
  EXPECT_THROW(TokenFile(dir.file("empty.bin")), Error);
  EXPECT_THROW(TokenFile(dir.file("missing.bin")), Error);
}

TEST(TokenFile, CheckVocabNamesTheFirstBadToken) {
  test::TempDir dir;
  const std::string path = dir.file("t.bin");
  write_token_file(path, {1, 2, 3, 500, 9, 600}, TokenWidth::u16);
  TokenFile f(path);
  EXPECT_NO_THROW(f.check_vocab(601));
  const std::string msg = message_of([&] { f.check_vocab(500); });
  EXPECT_EQ(msg, path + ": token at position 3 has id 500, outside the vocabulary of 500");
}

}  // namespace
}  // namespace pylon
