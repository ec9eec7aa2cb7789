// Tokenizer: a tokenizer.json (io/hf_tokenizer.h) or SentencePiece; without SentencePiece
// (PYLON_HAVE_SENTENCEPIECE unset) its models and training throw.
#include "io/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/hf_tokenizer.h"

#ifdef PYLON_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <sstream>
#include <unordered_map>
#endif

namespace pylon {

#ifdef PYLON_HAVE_SENTENCEPIECE

namespace {

// SentencePiece statuses may span lines; our errors are one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Feeds the trainer one line at a time ('\n' removed), so no path goes through its flag parser.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& path) : in_(path, std::ios::binary) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !std::getline(in_, line_); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (in_.bad()) return {sentencepiece::util::StatusCode::kDataLoss, "read failed"};
    return {};
  }

 private:
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
};

}  // namespace

// The SentencePiece backend of Tokenizer.
struct SentencePieceTokenizer {
  sentencepiece::SentencePieceProcessor sp;
  std::string bytes;
};

namespace {

std::unique_ptr<SentencePieceTokenizer> load_sentencepiece(const std::string& bytes, const std::string& source) {
  auto t = std::make_unique<SentencePieceTokenizer>();
  const auto status = t->sp.LoadFromSerializedProto(bytes);
  PYLON_CHECK(status.ok(), source, ": cannot load SentencePiece model: ", one_line(status.ToString()));
  t->bytes = bytes;
  return t;
}

std::vector<int> sentencepiece_encode(const SentencePieceTokenizer& t, const std::string& text) {
  std::vector<int> ids;
  const auto status = t.sp.Encode(text, &ids);
  PYLON_CHECK(status.ok(), "tokenizer: cannot encode: ", one_line(status.ToString()));
  return ids;
}

std::string sentencepiece_decode(const SentencePieceTokenizer& t, const std::vector<int>& ids) {
  std::string text;
  const auto status = t.sp.Decode(ids, &text);
  PYLON_CHECK(status.ok(), "tokenizer: cannot decode: ", one_line(status.ToString()));
  return text;
}

int sentencepiece_vocab_size(const SentencePieceTokenizer& t) { return t.sp.GetPieceSize(); }
int sentencepiece_bos_id(const SentencePieceTokenizer& t) { return t.sp.bos_id(); }
int sentencepiece_eos_id(const SentencePieceTokenizer& t) { return t.sp.eos_id(); }

}  // namespace

void train_tokenizer(const std::string& text_path, const std::string& model_prefix,
                     const TokenizerTrainOptions& options) {
  PYLON_CHECK(options.vocab_size > 0, "tokenizer vocabulary size must be positive, got ",
              options.vocab_size);
  std::error_code ec;
  const auto size = std::filesystem::file_size(text_path, ec);
  PYLON_CHECK(!ec, text_path, ": cannot read: ", ec.message());
  PYLON_CHECK(size > 0, text_path, ": no text to train a tokenizer on");
  // Byte fallback: any byte sequence encodes, so no <unk> ever reaches the model. Identity
  // normalization with whitespace kept and no dummy prefix: decode(encode(t)) == t, and texts
  // may be encoded line by line (no piece spans a newline).
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", "1"},  // SentencePiece is deterministic only single-threaded
      {"minloglevel", "2"},  // errors only: a failure comes back as the status, in our one line
  };
  sentencepiece::SetRandomGeneratorSeed(20240520);
  LineIterator lines(text_path);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  PYLON_CHECK(status.ok(), text_path, ": tokenizer training failed: ", one_line(status.ToString()));

  sentencepiece::SentencePieceProcessor sp;
  PYLON_ASSERT(sp.LoadFromSerializedProto(model).ok(), "trained model does not load");
  std::ostringstream vocab;
  for (int i = 0; i < sp.GetPieceSize(); ++i) vocab << sp.IdToPiece(i) << '\t' << sp.GetScore(i) << '\n';
  write_file_atomic(model_prefix + ".model", model);
  write_file_atomic(model_prefix + ".vocab", vocab.str());
}

#else  // !PYLON_HAVE_SENTENCEPIECE

struct SentencePieceTokenizer {
  std::string bytes;
};

namespace {
[[noreturn]] void no_sentencepiece() {
  throw Error("built without SentencePiece: apt install libsentencepiece-dev and rebuild");
}
std::unique_ptr<SentencePieceTokenizer> load_sentencepiece(const std::string&, const std::string&) {
  no_sentencepiece();
}
std::vector<int> sentencepiece_encode(const SentencePieceTokenizer&, const std::string&) { no_sentencepiece(); }
std::string sentencepiece_decode(const SentencePieceTokenizer&, const std::vector<int>&) { no_sentencepiece(); }
int sentencepiece_vocab_size(const SentencePieceTokenizer&) { no_sentencepiece(); }
int sentencepiece_bos_id(const SentencePieceTokenizer&) { no_sentencepiece(); }
int sentencepiece_eos_id(const SentencePieceTokenizer&) { no_sentencepiece(); }
}  // namespace

void train_tokenizer(const std::string&, const std::string&, const TokenizerTrainOptions&) {
  no_sentencepiece();
}

#endif  // PYLON_HAVE_SENTENCEPIECE

// One of the two backends.
struct Tokenizer::Impl {
  std::unique_ptr<SentencePieceTokenizer> sp;
  std::unique_ptr<HfTokenizer> hf;
};

const char* tokenizer_kind_name(TokenizerKind kind) {
  return kind == TokenizerKind::sentencepiece ? "SentencePiece" : "tokenizer.json (byte-level BPE)";
}

bool is_tokenizer_json(std::string_view bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

std::string resolve_tokenizer_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return path;
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(fs::path(path) / name)) return (fs::path(path) / name).string();
  throw Error(path + ": no tokenizer.json or tokenizer.model in this folder");
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string file = resolve_tokenizer_path(path);
  PYLON_CHECK(fs::is_regular_file(file), file, ": no such tokenizer file");
  auto impl = std::make_unique<Impl>();
  const std::string bytes = read_text_file(file);
  if (!is_tokenizer_json(bytes)) {
    impl->sp = load_sentencepiece(bytes, file);
    return Tokenizer(std::move(impl));
  }
  try {
    impl->hf = HfTokenizer::load(bytes, file);
  } catch (const Error& e) {
    // A folder with a tokenizer.json of another kind (Llama 2's) may have the SentencePiece model too.
    const fs::path model = fs::path(path) / "tokenizer.model";
    if (fs::is_directory(path) && fs::is_regular_file(model))
      throw Error(std::string(e.what()) + "; the folder's tokenizer.model may serve: give " + model.string());
    throw;
  }
  return Tokenizer(std::move(impl));
}

void check_tokenizer_file(const std::string& path) {
  const std::string file = resolve_tokenizer_path(path);
#ifndef PYLON_HAVE_SENTENCEPIECE
  if (!is_tokenizer_json(read_text_file(file))) return;
#endif
  Tokenizer::load(file);
}

Tokenizer Tokenizer::from_bytes(const std::string& bytes, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  if (is_tokenizer_json(bytes))
    impl->hf = std::make_unique<HfTokenizer>(bytes, source);
  else
    impl->sp = load_sentencepiece(bytes, source);
  return Tokenizer(std::move(impl));
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  return impl_->hf ? impl_->hf->encode(text) : sentencepiece_encode(*impl_->sp, text);
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  return impl_->hf ? impl_->hf->decode(ids) : sentencepiece_decode(*impl_->sp, ids);
}

int Tokenizer::vocab_size() const { return impl_->hf ? impl_->hf->vocab_size() : sentencepiece_vocab_size(*impl_->sp); }
int Tokenizer::bos_id() const { return impl_->hf ? impl_->hf->bos_id() : sentencepiece_bos_id(*impl_->sp); }
int Tokenizer::eos_id() const { return impl_->hf ? impl_->hf->eos_id() : sentencepiece_eos_id(*impl_->sp); }
TokenizerKind Tokenizer::kind() const { return impl_->hf ? TokenizerKind::byte_level_bpe : TokenizerKind::sentencepiece; }
std::string Tokenizer::to_bytes() const { return impl_->hf ? impl_->hf->serialize() : impl_->sp->bytes; }

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int> encode_long_text(const Tokenizer& tokenizer, const std::string& text) {
  if (tokenizer.kind() == TokenizerKind::byte_level_bpe) return tokenizer.encode(text);
  std::vector<int> ids;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::vector<int> line = tokenizer.encode(text.substr(begin, end - begin));
    ids.insert(ids.end(), line.begin(), line.end());
    begin = end;
  }
  return ids;
}

}  // namespace pylon
