// pylon tokenize: text -> token file(s), with an existing tokenizer (SentencePiece or tokenizer.json)
// or a newly trained SentencePiece model.
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/token_file.h"
#include "io/tokenizer.h"

namespace pylon {
namespace {

// "dir/x.bin" -> "dir/x.val.bin"; "x" -> "x.val".
std::string val_path_for(const std::string& out) {
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + ".val" + p.extension().string())).string();
}

// "dir/x.bin" -> "dir/x"
std::string without_extension(const std::string& path) {
  return std::filesystem::path(path).replace_extension().string();
}

void write_tokens(const std::string& path, std::vector<int>::const_iterator begin,
                  std::vector<int>::const_iterator end, TokenWidth width, int vocab) {
  const std::vector<uint32_t> tokens(begin, end);
  write_token_file(path, tokens, width);
  std::printf("wrote %zu tokens (vocab %d, %s) to %s\n", tokens.size(), vocab,
              width == TokenWidth::u16 ? "u16" : "u32", path.c_str());
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  std::string input, model, model_out, out, width_text = "auto";
  int train_vocab = 32000;
  double val_fraction = 0;
  ArgParser args("tokenize", "Turn a UTF-8 text file into a token file with a SentencePiece model or a\n"
                             "Hugging Face tokenizer.json; without --model, train a SentencePiece BPE model first.");
  args.add("input", &input, "text file to tokenize (required)");
  args.add("out", &out, "token file to write, e.g. train.bin (required)");
  args.add("model", &model,
           "existing tokenizer: a SentencePiece .model, a tokenizer.json (byte-level BPE) or a folder with either");
  // 2^24 is beyond any tokenizer's vocabulary; SentencePiece's trainer loops over it (2^31-1 took 45 s
  // before it said the text has fewer pieces)
  args.add("train-vocab", &train_vocab, Range::closed(1, 1 << 24), "vocabulary size of the BPE model to train when no --model");
  args.add("model-out", &model_out,
           "prefix of the trained model: PREFIX.model, PREFIX.vocab [default: --out without extension]");
  args.add_choice("width", &width_text, {"auto", "u16", "u32"},
                  "token width; auto = u16 when the vocabulary fits (u32 files carry a header)");
  args.add("val-fraction", &val_fraction, Range::half_open(0, 1),
           "when > 0, also write the last fraction of tokens to OUT with .val before the extension");
  if (!args.parse(argc, argv)) {
    std::printf("%s", args.help().c_str());
    return 0;
  }
  PYLON_CHECK(args.given("input"), "--input TEXT_FILE is required (see pylon tokenize --help)");
  PYLON_CHECK(args.given("out"), "--out FILE.bin is required (see pylon tokenize --help)");
  PYLON_CHECK(!(args.given("model") && args.given("train-vocab")),
              "give --model (use a model) or --train-vocab (train one), not both");
  PYLON_CHECK(!(args.given("model") && args.given("model-out")),
              "--model-out names a model to train; it cannot go with --model");
  PYLON_CHECK(train_vocab > 0, "--train-vocab must be positive, got ", train_vocab);
  PYLON_CHECK(val_fraction >= 0 && val_fraction < 1, "--val-fraction must be in [0, 1), got ",
              val_fraction);

  PYLON_CHECK(args.given("model") || width_text != "u16" || train_vocab <= 65536, "--width u16: --train-vocab ",
              train_vocab, " does not fit in uint16 (at most 65536)");  // known before reading or training
  const std::string text = read_text_file(input);
  if (model.empty()) {
    const std::string prefix = args.given("model-out") ? model_out : without_extension(out);
    std::printf("training a BPE tokenizer (vocab %d) on %s\n", train_vocab, input.c_str());  // stderr: errors
    std::fflush(stdout);
    TokenizerTrainOptions options;
    options.vocab_size = train_vocab;
    train_tokenizer(input, prefix, options);
    model = prefix + ".model";
    std::printf("wrote tokenizer %s\n", model.c_str());
  }
  const Tokenizer tokenizer = Tokenizer::load(model);
  const int vocab = tokenizer.vocab_size();
  TokenWidth width = parse_token_width(width_text);
  if (width == TokenWidth::automatic) width = vocab <= 65536 ? TokenWidth::u16 : TokenWidth::u32;
  PYLON_CHECK(width == TokenWidth::u32 || vocab <= 65536, "--width u16: vocabulary ", vocab,
              " does not fit in uint16");

  const std::vector<int> ids = encode_long_text(tokenizer, text);
  PYLON_CHECK(!ids.empty(), input, ": no text to tokenize");
  const auto n = static_cast<int64_t>(ids.size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  PYLON_CHECK(val_fraction == 0 || (n_val > 0 && n_val < n), "--val-fraction ", val_fraction, " of ",
              n, " tokens leaves an empty train or validation file");
  write_tokens(out, ids.begin(), ids.end() - n_val, width, vocab);
  if (n_val > 0) write_tokens(val_path_for(out), ids.end() - n_val, ids.end(), width, vocab);
  return 0;
}

}  // namespace pylon
