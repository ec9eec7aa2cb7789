// A Hugging Face tokenizer.json whose model is byte-level BPE (the GPT-2, Llama 3, Qwen2 and
// SmolLM families). Encoding follows the tokenizers library: added tokens are matched as whole
// strings first (leftmost-longest; those marked normalized after the normalizer), the normalizer
// (NFC, or none), the pre-tokenizer (Split and Digits steps, then ByteLevel, with GPT-2's pattern
// when use_regex), then BPE. Decoding is byte-level. The post-processor is not applied: encode()
// adds no BOS or EOS, as with SentencePiece. Whatever the file declares and this class does not
// implement is refused with one line naming the file and the field, never encoded differently.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/byte_level_bpe.h"
#include "io/unicode_regex.h"

namespace pylon {

class HfTokenizer {
 public:
  // `json_text`: a tokenizer.json, named `source` in errors. The bos and eos tokens come from the
  // record serialize() adds, else from `config_text` (a tokenizer_config.json's bos_token and
  // eos_token, named `config_source`; may be empty).
  HfTokenizer(const std::string& json_text, const std::string& source, const std::string& config_text = "",
              const std::string& config_source = "");
  // A tokenizer.json's text read from `path`, with the tokenizer_config.json beside it, if any.
  static std::unique_ptr<HfTokenizer> load(const std::string& json_text, const std::string& path);

  std::vector<int> encode(std::string_view text) const;  // throws pylon::Error for text that is not UTF-8
  std::string decode(const std::vector<int>& ids) const;  // ill-formed bytes become U+FFFD
  int vocab_size() const { return vocab_size_; }          // 1 + the largest id
  int bos_id() const { return bos_id_; }                  // -1 when unknown
  int eos_id() const { return eos_id_; }

  // The tokenizer.json text, with the bos and eos tokens recorded under "pylon_special_tokens"
  // when they came from a tokenizer_config.json (the tokenizers library ignores that key).
  std::string serialize() const;

 private:
  struct AddedToken {
    std::string content, match;  // match: the content, normalized when the token is
    int id = 0;
    bool lstrip = false, rstrip = false, normalized = false;
  };
  // The strings of a set of added tokens, for leftmost-longest matching.
  class Trie {
   public:
    void add(std::string_view text, int token);
    // The longest string at text[at]: (its length, its token), or (0, -1).
    std::pair<size_t, int> longest_at(std::string_view text, size_t at) const;
    bool empty() const { return nodes_.size() == 1; }

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int>> children;  // byte -> node
      int token = -1;
    };
    std::vector<Node> nodes_{1};
  };
  struct SplitStep {
    UnicodeRegex regex;
    bool invert = false, removed = false;  // removed: the matches go; else each is a piece of its own
  };
  struct Work;  // one encoding's cache and scratch

  void read_model(const nlohmann::json& j);
  void read_normalizer(const nlohmann::json& n, const std::string& where);
  void read_pre_tokenizer(const nlohmann::json& p, const std::string& where, bool& byte_level_seen);
  void read_added_tokens(const nlohmann::json& j);
  void read_special_tokens(const nlohmann::json& j, const std::string& config_text, const std::string& config_source);
  template <typename OnPiece>
  void split_added(std::string_view text, const Trie& trie, OnPiece on_piece) const;
  void pre_tokenize(std::string_view piece, size_t step, Work& w, std::vector<int>& ids) const;

  std::string text_, source_;
  std::unique_ptr<ByteLevelBpe> model_;
  std::vector<AddedToken> added_;
  Trie raw_trie_, normalized_trie_;  // added tokens matched before / after the normalizer
  bool nfc_ = false;
  std::vector<SplitStep> splits_;
  bool prefix_space_ = false;                    // ByteLevel's add_prefix_space
  std::optional<UnicodeRegex> byte_level_regex_;  // GPT-2's pattern, when use_regex
  std::vector<std::string> id_bytes_;             // what each id decodes to
  std::vector<char> has_id_;
  int vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
  std::optional<std::string> bos_token_, eos_token_;
  bool special_tokens_recorded_ = false;  // the file carries them already
};

}  // namespace pylon
