// The default training data (DESIGN §2): English text from Debian's `fortunes` package, tokenized
// once with a BPE model trained on it and cached as uint16 token files.
#pragma once

#include <string>

namespace pylon {

struct DefaultData {
  std::string train_bin, val_bin, tokenizer_model;  // paths inside the cache folder
};

// Returns the cached files, building them on first use (prints "preparing default data: ..." to
// stderr): every plain fortune file in /usr/share/games/fortunes (not off/, *.dat, *.u8, links)
// without its '%' lines, a BPE tokenizer of vocab_size, the first 95% of tokens as train and the
// last 5% as val. The cache folder, e.g. <root>/fortunes-bpe4096/, appears whole or not at all.
// Throws pylon::Error("no default training text: apt install fortunes (or pass --data FILE)").
DefaultData ensure_default_data(int vocab_size = 4096);

// $PYLON_DATA_DIR if set, else $XDG_CACHE_HOME/pylon, else $HOME/.cache/pylon.
std::string default_data_cache_root();

// ensure_default_data with explicit folders (tests use a small fortune folder).
DefaultData ensure_fortunes_data(const std::string& fortune_dir, const std::string& cache_root,
                                 int vocab_size);

}  // namespace pylon
