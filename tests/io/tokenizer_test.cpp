// Tokenizer: train a tiny BPE model on generated text, exact encode/decode round trips, determinism.
#include "io/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace pylon {
namespace {

// Sentences of made-up words, one per line, with some punctuation, digits and tabs.
std::string generated_text(int lines) {
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and",
                         "then", "runs", "away", "from", "a", "small", "cat", "naïve", "café"};
  std::mt19937 rng(1);
  std::string text;
  for (int i = 0; i < lines; ++i) {
    const int n = 3 + static_cast<int>(rng() % 10);
    for (int w = 0; w < n; ++w) text += std::string(w ? " " : "") + words[rng() % std::size(words)];
    text += rng() % 5 == 0 ? ", " + std::to_string(rng() % 1000) + ".\n" : ".\n";
    if (rng() % 7 == 0) text += "\t-- someone\n";
  }
  return text;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef PYLON_HAVE_SENTENCEPIECE
    GTEST_SKIP() << "built without SentencePiece";
#endif
    write_file_atomic(dir_.file("text.txt"), generated_text(2000));
    TokenizerTrainOptions options;
    options.vocab_size = 400;
    train_tokenizer(dir_.file("text.txt"), dir_.file("m"), options);
  }
  test::TempDir dir_;
};

TEST_F(TokenizerTest, TrainsAModelOfTheAskedSize) {
  const Tokenizer t = Tokenizer::load(dir_.file("m.model"));
  EXPECT_EQ(t.vocab_size(), 400);
  EXPECT_GE(t.bos_id(), 0);
  EXPECT_GE(t.eos_id(), 0);
  EXPECT_FALSE(read_text_file(dir_.file("m.vocab")).empty());
}

TEST_F(TokenizerTest, EncodeDecodeRoundTripsAnyText) {
  const Tokenizer t = Tokenizer::load(dir_.file("m.model"));
  const std::string texts[] = {
      "the quick brown fox jumps over the lazy dog.\n",
      "  leading spaces,\ttabs\tand  double  spaces \n\n\nblank lines",
      "unseen: Zürich, 東京, emoji 🙂, bytes \x01\x7f, digits 1234567890",
      "naïve café", "", "\n"};
  for (const std::string& text : texts) {
    const std::vector<int> ids = t.encode(text);
    for (int id : ids) EXPECT_TRUE(id >= 0 && id < t.vocab_size());
    EXPECT_EQ(t.decode(ids), text);
    EXPECT_EQ(encode_long_text(t, text), ids) << text;
  }
  EXPECT_LT(t.encode("the quick brown fox").size(), 10u);  // merges were learned
}

TEST_F(TokenizerTest, TrainingIsDeterministic) {
  TokenizerTrainOptions options;
  options.vocab_size = 400;
  train_tokenizer(dir_.file("text.txt"), dir_.file("again"), options);
  EXPECT_EQ(read_text_file(dir_.file("again.model")), read_text_file(dir_.file("m.model")));
}

TEST_F(TokenizerTest, ErrorsAreUserErrors) {
  EXPECT_THROW(Tokenizer::load(dir_.file("missing.model")), Error);
  EXPECT_THROW(Tokenizer::load(dir_.file("text.txt")), Error);  // not a model
  TokenizerTrainOptions options;
  EXPECT_THROW(train_tokenizer(dir_.file("missing.txt"), dir_.file("x"), options), Error);
  write_file_atomic(dir_.file("empty.txt"), "");
  EXPECT_THROW(train_tokenizer(dir_.file("empty.txt"), dir_.file("x"), options), Error);
  options.vocab_size = 100;  // smaller than the 256 byte pieces
  EXPECT_THROW(train_tokenizer(dir_.file("text.txt"), dir_.file("x"), options), Error);
}

#ifndef PYLON_HAVE_SENTENCEPIECE
TEST(TokenizerWithoutSentencePiece, Throws) {
  EXPECT_THROW(Tokenizer::load("x.model"), Error);
}
#endif

}  // namespace
}  // namespace pylon
