// Text <-> token ids: a SentencePiece model (Debian's libsentencepiece; training makes a BPE model)
// or a Hugging Face tokenizer.json whose model is byte-level BPE (io/hf_tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pylon {

enum class TokenizerKind { sentencepiece, byte_level_bpe };
const char* tokenizer_kind_name(TokenizerKind kind);  // "SentencePiece", "tokenizer.json (byte-level BPE)"

// Whether a tokenizer's bytes are a tokenizer.json (a JSON object, maybe after whitespace) rather
// than a SentencePiece model (a protobuf: byte 0x0A, '\n', then the length of its first piece's
// record, that of <unk>: a few bytes, never the 123 of '{').
bool is_tokenizer_json(std::string_view bytes);

// The tokenizer file a path names: the path itself, or a folder's tokenizer.json, else its
// tokenizer.model. Throws pylon::Error for a folder with neither.
std::string resolve_tokenizer_path(const std::string& path);

// Loads the tokenizer `path` names (resolve_tokenizer_path) to check that it is one, before it is
// stored anywhere (a checkpoint); throws pylon::Error naming the file when it does not load. A
// SentencePiece model is checked only in builds with SentencePiece (others cannot read it).
void check_tokenizer_file(const std::string& path);

class Tokenizer {
 public:
  // Loads a tokenizer.json (with the bos and eos tokens of the tokenizer_config.json beside it) or
  // a SentencePiece .model, told apart by their bytes, or a folder's (resolve_tokenizer_path).
  // Throws pylon::Error naming the file if it cannot.
  static Tokenizer load(const std::string& path);
  // The same from a file's bytes (e.g. embedded in an edge file); `source` names it in errors.
  static Tokenizer from_bytes(const std::string& bytes, const std::string& source);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The text's ids, without BOS or EOS. Throws pylon::Error for text a tokenizer.json cannot take
  // (not UTF-8).
  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;  // -1 if the model has none
  int eos_id() const;
  TokenizerKind kind() const;
  // Bytes from_bytes reads back as this tokenizer (what an edge file embeds).
  std::string to_bytes() const;

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

// Encodes a long text (a corpus): a SentencePiece model one line at a time ('\n' stays with its
// line; for models made by train_tokenizer the ids equal encode(text), at a fraction of the memory);
// a tokenizer.json all at once (its split pattern may join whitespace across lines).
std::vector<int> encode_long_text(const Tokenizer& tokenizer, const std::string& text);

}  // namespace pylon
