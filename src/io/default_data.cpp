// Builds and caches the default fortunes corpus, tokenizer and token files.
#include "io/default_data.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/token_file.h"
#include "io/tokenizer.h"

namespace pylon {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFortuneDir = "/usr/share/games/fortunes";
constexpr const char* kNoText = "no default training text: apt install fortunes (or pass --data FILE)";

DefaultData files_in(const fs::path& dir) {
  return {(dir / "train.bin").string(), (dir / "val.bin").string(),
          (dir / "tokenizer.model").string()};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Regular files directly in `dir` (so no off/ and no other-language folders), no links, no
// strfile indexes (*.dat) or UTF-8 aliases (*.u8); sorted by name.
std::vector<fs::path> fortune_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink() || !entry.is_regular_file() || ends_with(name, ".dat") ||
        ends_with(name, ".u8"))
      continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The fortunes, each followed by one empty line; the '%' separator lines are dropped.
std::string corpus_text(const std::vector<fs::path>& files) {
  std::string out;
  for (const auto& file : files) {
    const std::string text = read_text_file(file.string());
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      end = end == std::string::npos ? text.size() : end + 1;
      const std::string_view line(text.data() + begin, end - begin);
      if (line == "%\n" || line == "%") {
        if (!out.empty() && !out.ends_with("\n\n")) out += '\n';
      } else {
        out += line;
        if (!out.ends_with('\n')) out += '\n';
      }
      begin = end;
    }
    if (!out.empty() && !out.ends_with("\n\n")) out += '\n';
  }
  return out;
}

// Removes a half-built folder unless released.
struct RemoveOnExit {
  fs::path dir;
  ~RemoveOnExit() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

void build(const fs::path& fortune_dir, const fs::path& tmp, int vocab_size) {
  const std::vector<fs::path> files = fortune_files(fortune_dir);
  PYLON_CHECK(!files.empty(), kNoText);
  const std::string text = corpus_text(files);
  PYLON_CHECK(!text.empty(), kNoText);
  std::fprintf(stderr, "preparing default data: %zu fortune files from %s (%.1f MB of text)\n",
               files.size(), fortune_dir.c_str(), static_cast<double>(text.size()) / 1e6);
  write_file_atomic((tmp / "corpus.txt").string(), text);

  std::fprintf(stderr, "preparing default data: training a BPE tokenizer (vocab %d)\n", vocab_size);
  TokenizerTrainOptions options;
  options.vocab_size = vocab_size;
  train_tokenizer((tmp / "corpus.txt").string(), (tmp / "tokenizer").string(), options);

  std::fprintf(stderr, "preparing default data: encoding\n");
  const Tokenizer tokenizer = Tokenizer::load((tmp / "tokenizer.model").string());
  const std::vector<int> ids = encode_long_text(tokenizer, text);
  const size_t n_train = ids.size() * 95 / 100;
  PYLON_CHECK(n_train > 0 && n_train < ids.size(), fortune_dir.string(), ": too little text (",
              ids.size(), " tokens)");
  const DefaultData out = files_in(tmp);
  write_token_file(out.train_bin, {ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n_train)},
                   TokenWidth::u16);
  write_token_file(out.val_bin, {ids.begin() + static_cast<ptrdiff_t>(n_train), ids.end()},
                   TokenWidth::u16);
  std::fprintf(stderr, "preparing default data: %zu train + %zu val tokens\n", n_train,
               ids.size() - n_train);
}

}  // namespace

std::string default_data_cache_root() {
  if (const auto dir = env_text("PYLON_DATA_DIR")) return *dir;
  if (const auto dir = env_text("XDG_CACHE_HOME")) return (fs::path(*dir) / "pylon").string();
  const auto home = env_text("HOME");
  PYLON_CHECK(home, "no folder for the data cache: set PYLON_DATA_DIR (or HOME)");
  return (fs::path(*home) / ".cache" / "pylon").string();
}

DefaultData ensure_fortunes_data(const std::string& fortune_dir, const std::string& cache_root,
                                 int vocab_size) {
  PYLON_CHECK(vocab_size > 0 && vocab_size <= 65536, "default data: vocabulary ", vocab_size,
              " must be in [1, 65536] (uint16 token files)");
  const std::string name = "fortunes-bpe" + std::to_string(vocab_size);
  const fs::path dir = fs::path(cache_root) / name;
  const DefaultData out = files_in(dir);
  if (fs::is_directory(dir)) {
    for (const auto& f : {out.train_bin, out.val_bin, out.tokenizer_model})
      PYLON_CHECK(fs::is_regular_file(f), dir.string(), " is incomplete (no ",
                  fs::path(f).filename().string(), "): delete it to rebuild");
    return out;
  }
  std::error_code ec;
  if (!fs::is_directory(fortune_dir, ec)) throw Error(kNoText);

  fs::create_directories(cache_root, ec);
  PYLON_CHECK(!ec, cache_root, ": cannot create the data cache: ", ec.message());
  std::string tmp_template = (fs::path(cache_root) / ("." + name + ".tmp.XXXXXX")).string();
  PYLON_CHECK(::mkdtemp(tmp_template.data()), tmp_template, ": cannot create: ",
              std::strerror(errno));
  RemoveOnExit tmp{tmp_template};
  ::chmod(tmp_template.c_str(), 0755);  // mkdtemp makes it private; the cache may be shared
  build(fortune_dir, tmp.dir, vocab_size);

  // Another process may have finished first: then its folder wins and ours is removed.
  if (std::rename(tmp.dir.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    PYLON_CHECK((err == EEXIST || err == ENOTEMPTY) && fs::is_directory(dir), dir.string(),
                ": cannot move the prepared data into place: ", std::strerror(err));
    return out;
  }
  tmp.dir.clear();
  std::fprintf(stderr, "preparing default data: done, cached in %s\n", dir.c_str());
  return out;
}

DefaultData ensure_default_data(int vocab_size) {
  return ensure_fortunes_data(kFortuneDir, default_data_cache_root(), vocab_size);
}

}  // namespace pylon
