// Text <-> token ids through SentencePiece (Debian's libsentencepiece). Training makes a BPE model.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace pylon {

class Tokenizer {
 public:
  // Loads a SentencePiece .model file; throws pylon::Error naming the path if it cannot.
  static Tokenizer load(const std::string& path);
  // The same from a model's bytes (e.g. embedded in an edge file); `source` names it in errors.
  static Tokenizer from_bytes(const std::string& bytes, const std::string& source);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;  // -1 if the model has none
  int eos_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TokenizerTrainOptions {
  int vocab_size = 32000;
  std::string model_type = "bpe";
  int64_t max_sentences = 2000000;  // input sentences sampled for training
};

// Trains a model on a UTF-8 text file; writes <model_prefix>.model and <model_prefix>.vocab.
// Byte fallback, identity normalization, no dummy prefix: decode(encode(t)) == t for any t.
// Seeded and single-threaded, so the same text gives the same model.
void train_tokenizer(const std::string& text_path, const std::string& model_prefix,
                     const TokenizerTrainOptions& options);

// Encodes a long text one line at a time ('\n' stays with its line): for models made by
// train_tokenizer the ids equal encode(text), at a fraction of the memory.
std::vector<int> encode_by_lines(const Tokenizer& tokenizer, const std::string& text);

}  // namespace pylon
