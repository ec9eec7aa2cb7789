// Default data: built once from a small fake fortune folder, cached whole, reused; cache folder rules.
#include "io/default_data.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace pylon {
namespace {

namespace fs = std::filesystem;

std::string fortunes(int count, unsigned seed) {
  const char* words[] = {"a", "wise", "man", "once", "said", "that", "time", "is", "money", "but",
                         "love", "and", "luck", "never", "wait", "for", "anyone", "today"};
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < count; ++i) {
    for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[rng() % std::size(words)];
    text += ".\n\t\t-- Someone\n%\n";
  }
  return text;
}

// A fortune folder with two files, plus what must be skipped: .dat, .u8 and other links, off/.
void make_fortune_dir(const fs::path& dir) {
  fs::create_directories(dir / "off");
  write_file_atomic((dir / "zeta").string(), fortunes(300, 1));
  write_file_atomic((dir / "alpha").string(), fortunes(300, 2));
  write_file_atomic((dir / "alpha.dat").string(), "SKIPPED_DAT\n");
  fs::create_symlink("alpha", dir / "alpha.u8");
  write_file_atomic((dir / "off" / "rude").string(), "SKIPPED_OFF\n%\n");
  write_file_atomic((dir.parent_path() / "outside").string(), "SKIPPED_LINK\n%\n");
  fs::create_symlink(dir.parent_path() / "outside", dir / "linked");
}

class DefaultDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef PYLON_HAVE_SENTENCEPIECE
    GTEST_SKIP() << "built without SentencePiece";
#endif
  }
};

TEST_F(DefaultDataTest, BuildsOnceAndReuses) {
  test::TempDir tmp;
  make_fortune_dir(tmp.path() / "fortunes");
  const std::string cache = (tmp.path() / "cache").string();
  const DefaultData d = ensure_fortunes_data((tmp.path() / "fortunes").string(), cache, 400);
  EXPECT_EQ(fs::path(d.train_bin).parent_path(), fs::path(cache) / "fortunes-bpe400");

  const std::string corpus = read_text_file((fs::path(cache) / "fortunes-bpe400" / "corpus.txt").string());
  // Files in name order; each '%' line becomes the empty line that ends a fortune.
  std::string expected;
  for (char c : fortunes(300, 2) + fortunes(300, 1))
    if (c != '%') expected += c;  // "%\n" -> "\n"; the generated fortunes hold no other '%'
  EXPECT_EQ(corpus, expected);
  EXPECT_EQ(corpus.find("SKIPPED"), std::string::npos);

  const Tokenizer tok = Tokenizer::load(d.tokenizer_model);
  EXPECT_EQ(tok.vocab_size(), 400);
  TokenFile train(d.train_bin), val(d.val_bin);
  const int64_t total = train.size() + val.size();
  EXPECT_EQ(train.size(), total * 95 / 100);
  train.check_vocab(400);
  val.check_vocab(400);
  std::vector<int> ids;
  for (int64_t i = 0; i < train.size(); ++i) ids.push_back(static_cast<int>(train[i]));
  for (int64_t i = 0; i < val.size(); ++i) ids.push_back(static_cast<int>(val[i]));
  EXPECT_EQ(tok.decode(ids), corpus);

  // Cached: the second call returns the same files without rebuilding; no temporaries remain.
  const auto stamp = fs::last_write_time(d.train_bin);
  const DefaultData again = ensure_fortunes_data((tmp.path() / "fortunes").string(), cache, 400);
  EXPECT_EQ(again.train_bin, d.train_bin);
  EXPECT_EQ(fs::last_write_time(d.train_bin), stamp);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(cache)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST(DefaultData, MissingFortunesSayWhatToInstall) {
  test::TempDir tmp;
  fs::create_directories(tmp.path() / "empty");
  for (const std::string& dir : std::vector<std::string>{"/nonexistent/fortunes", (tmp.path() / "empty").string()}) {
    try {
      ensure_fortunes_data(dir, (tmp.path() / "cache").string(), 400);
      FAIL() << dir;
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "no default training text: apt install fortunes (or pass --data FILE)");
    }
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "cache" / "fortunes-bpe400"));
}

TEST(DefaultDataCache, RootFollowsTheEnvironment) {
  const char* names[] = {"PYLON_DATA_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* n : names)
    if (const char* v = std::getenv(n)) saved.emplace_back(n, v);
  ::unsetenv("PYLON_DATA_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(default_data_cache_root(), "/h/.cache/pylon");
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(default_data_cache_root(), "/x/pylon");
  ::setenv("PYLON_DATA_DIR", "/p", 1);
  EXPECT_EQ(default_data_cache_root(), "/p");
  for (const char* n : names) ::unsetenv(n);
  for (const auto& [n, v] : saved) ::setenv(n.c_str(), v.c_str(), 1);
}

}  // namespace
}  // namespace pylon
