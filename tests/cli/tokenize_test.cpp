// pylon tokenize: trains a model, writes train and .val token files, and rejects bad flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "../io/test_util.h"

namespace pylon {
namespace {

int tokenize(std::vector<std::string> args) {
  args.insert(args.begin(), {"pylon", "tokenize"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return run_tokenize(static_cast<int>(argv.size()), argv.data());
}

std::string some_text() {
  const char* words[] = {"red", "green", "blue", "sky", "sea", "under", "over", "the", "a", "is"};
  std::mt19937 rng(3);
  std::string text;
  for (int line = 0; line < 1500; ++line) {
    for (int w = 0; w < 8; ++w) text += std::string(w ? " " : "") + words[rng() % std::size(words)];
    text += "\n";
  }
  return text;
}

class TokenizeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef PYLON_HAVE_SENTENCEPIECE
    GTEST_SKIP() << "built without SentencePiece";
#endif
    write_file_atomic(dir_.file("in.txt"), some_text());
  }
  test::TempDir dir_;
};

TEST_F(TokenizeCommand, TrainsAndSplits) {
  EXPECT_EQ(tokenize({"--input", dir_.file("in.txt"), "--train-vocab", "300", "--out",
                      dir_.file("d.bin"), "--val-fraction", "0.1"}),
            0);
  const Tokenizer tok = Tokenizer::load(dir_.file("d.model"));  // --model-out defaults to --out
  TokenFile train(dir_.file("d.bin")), val(dir_.file("d.val.bin"));
  const int64_t total = train.size() + val.size();
  EXPECT_EQ(val.size(), static_cast<int64_t>(static_cast<double>(total) * 0.1));
  std::vector<int> ids;
  for (int64_t i = 0; i < train.size(); ++i) ids.push_back(static_cast<int>(train[i]));
  for (int64_t i = 0; i < val.size(); ++i) ids.push_back(static_cast<int>(val[i]));
  EXPECT_EQ(tok.decode(ids), some_text());

  // An existing model, u32 output.
  EXPECT_EQ(tokenize({"--input", dir_.file("in.txt"), "--model", dir_.file("d.model"), "--out",
                      dir_.file("e.bin"), "--width", "u32"}),
            0);
  TokenFile wide(dir_.file("e.bin"));
  EXPECT_EQ(wide.bytes_per_token(), 4);
  EXPECT_EQ(wide.size(), total);
}

TEST_F(TokenizeCommand, RejectsBadArguments) {
  const std::string in = dir_.file("in.txt"), out = dir_.file("o.bin");
  EXPECT_EQ(tokenize({"--help"}), 0);
  EXPECT_THROW(tokenize({"--out", out}), Error);
  EXPECT_THROW(tokenize({"--input", in}), Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--model", "m", "--train-vocab", "300"}), Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--model", "m", "--model-out", "p"}), Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--val-fraction", "1.5"}), Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--width", "u8"}), Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--bogus", "1"}), Error);
  EXPECT_THROW(tokenize({"--input", dir_.file("missing.txt"), "--out", out, "--train-vocab", "300"}),
               Error);
  EXPECT_THROW(tokenize({"--input", in, "--out", out, "--model", dir_.file("missing.model")}), Error);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace pylon
