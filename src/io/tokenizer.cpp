// Tokenizer over SentencePiece; without it (PYLON_HAVE_SENTENCEPIECE unset) every call throws.
#include "io/tokenizer.h"

#include "core/error.h"

#ifdef PYLON_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "io/atomic_file.h"
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

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer Tokenizer::load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->sp.Load(path);
  PYLON_CHECK(status.ok(), path, ": cannot load SentencePiece model: ", one_line(status.ToString()));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_bytes(const std::string& bytes, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  const auto status = impl->sp.LoadFromSerializedProto(bytes);
  PYLON_CHECK(status.ok(), source, ": cannot load SentencePiece model: ", one_line(status.ToString()));
  return Tokenizer(std::move(impl));
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  PYLON_CHECK(status.ok(), "tokenizer: cannot encode: ", one_line(status.ToString()));
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  const auto status = impl_->sp.Decode(ids, &text);
  PYLON_CHECK(status.ok(), "tokenizer: cannot decode: ", one_line(status.ToString()));
  return text;
}

int Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int Tokenizer::bos_id() const { return impl_->sp.bos_id(); }
int Tokenizer::eos_id() const { return impl_->sp.eos_id(); }

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
      {"minloglevel", "1"},  // warnings and errors only
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

namespace {
[[noreturn]] void no_sentencepiece() {
  throw Error("built without SentencePiece: apt install libsentencepiece-dev and rebuild");
}
}  // namespace

struct Tokenizer::Impl {};

Tokenizer Tokenizer::load(const std::string&) { no_sentencepiece(); }
Tokenizer Tokenizer::from_bytes(const std::string&, const std::string&) { no_sentencepiece(); }
std::vector<int> Tokenizer::encode(const std::string&) const { no_sentencepiece(); }
std::string Tokenizer::decode(const std::vector<int>&) const { no_sentencepiece(); }
int Tokenizer::vocab_size() const { no_sentencepiece(); }
int Tokenizer::bos_id() const { no_sentencepiece(); }
int Tokenizer::eos_id() const { no_sentencepiece(); }
void train_tokenizer(const std::string&, const std::string&, const TokenizerTrainOptions&) {
  no_sentencepiece();
}

#endif  // PYLON_HAVE_SENTENCEPIECE

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int> encode_by_lines(const Tokenizer& tokenizer, const std::string& text) {
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
