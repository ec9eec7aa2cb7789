// A Hugging Face tokenizer.json through the commands: tokenize encodes a text whole with it; a run
// given it (or fine-tuning from a folder that has one) stores it with tokenizer_config.json in its
// step folders; generate reads it from the checkpoint and from the edge file that export embeds it
// in, with the eos token of tokenizer_config.json.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/load_model.h"
#include "io/atomic_file.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "io/unicode_regex.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

namespace fs = std::filesystem;
using testing::expect_clear_error;
using testing::run_pylon;

const std::string kTokenizer = std::string(PYLON_GOLDEN_DIR) + "/../io/tokenizer_golden/llama3";

std::string some_text() {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "The quick brown fox, line " + std::to_string(i) + ": don't stop.\n" + (i % 7 ? "" : "\n\n  \n");
  return text + "東京 🙂 café <|eot_id|>";
}

std::vector<int> read_ids(const std::string& path) {
  const TokenFile file(path);
  std::vector<int> ids;
  for (int64_t i = 0; i < file.size(); ++i) ids.push_back(static_cast<int>(file[i]));
  return ids;
}

class HfTokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UnicodeRegex::available()) GTEST_SKIP() << "built without PCRE2";
  }
};

TEST_F(HfTokenizerCli, TokenizeEncodesTheWholeText) {
  testing::TempDir tmp;
  write_file_atomic(tmp.file("in.txt"), some_text());
  const auto r = run_pylon("tokenize --input " + tmp.file("in.txt") + " --model " + kTokenizer + " --out " +
                           tmp.file("d.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(vocab 584, u16)"), std::string::npos) << r.out;
  const Tokenizer tok = Tokenizer::load(kTokenizer + "/tokenizer.json");
  const std::vector<int> ids = read_ids(tmp.file("d.bin"));
  EXPECT_EQ(ids, tok.encode(some_text()));  // not line by line: "\n\n  \n" is one piece
  EXPECT_EQ(tok.decode(ids), some_text());
  write_file_atomic(tmp.file("bad.txt"), "caf\xe9\n");  // Latin-1, not UTF-8
  expect_clear_error(run_pylon("tokenize --input " + tmp.file("bad.txt") + " --model " + kTokenizer + " --out " +
                               tmp.file("e.bin")), "not UTF-8");
}

TEST_F(HfTokenizerCli, CheckpointsAndEdgeFilesCarryIt) {
  testing::TempDir tmp;
  write_file_atomic(tmp.file("in.txt"), some_text());
  ASSERT_EQ(run_pylon("tokenize --input " + tmp.file("in.txt") + " --model " + kTokenizer + " --out " +
                      tmp.file("d.bin")).exit_code, 0);
  const auto train = run_pylon("train --preset causal --vocab 600 --dim 32 --layers 2 --heads 4 --batch 4 --seq 32 "
                               "--steps 20 --lr 1e-2 --data " + tmp.file("d.bin") + " --tokenizer " + kTokenizer +
                               " --eval-every 0 --save " + tmp.file("ckpt") + " --device cpu");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path step = fs::path(tmp.file("ckpt")) / "step_000020";
  EXPECT_TRUE(fs::is_regular_file(step / "tokenizer.json"));
  EXPECT_TRUE(fs::is_regular_file(step / "tokenizer_config.json"));
  EXPECT_FALSE(fs::exists(step / "tokenizer.model"));

  const std::string gen = " --prompt 'The quick' --max-new-tokens 12 --temperature 0 --device cpu";
  const auto a = run_pylon("generate --model " + tmp.file("ckpt") + gen);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out.rfind("The quick", 0), 0u) << a.out;

  const std::string edge = tmp.file("m.edge");
  const auto e = run_pylon("export --model " + tmp.file("ckpt") + " --out " + edge);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto i = run_pylon("inspect " + edge);
  EXPECT_NE(i.out.find("tokenizer: Hugging Face tokenizer.json"), std::string::npos) << i.out;
  const LoadedModel m = load_model(edge, {}, false, false);
  const Tokenizer embedded = Tokenizer::from_bytes(m.tokenizer_model, edge);
  EXPECT_EQ(embedded.eos_id(), 581);  // <|end_of_text|>, from tokenizer_config.json
  EXPECT_EQ(embedded.bos_id(), 580);
  const auto b = run_pylon("generate --model " + edge + gen);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out.rfind("The quick", 0), 0u) << b.out;

}

TEST_F(HfTokenizerCli, LlamaFolderGeneratesWithItsTokenizer) {
  // A llama run's step folder is a Hugging Face folder; its four files alone generate and tokenize.
  testing::TempDir tmp;
  write_file_atomic(tmp.file("in.txt"), some_text());
  ASSERT_EQ(run_pylon("tokenize --input " + tmp.file("in.txt") + " --model " + kTokenizer + " --out " +
                      tmp.file("d.bin")).exit_code, 0);
  const auto train = run_pylon("train --preset llama --vocab 584 --dim 32 --layers 2 --heads 4 --kv-heads 2 "
                               "--batch 4 --seq 32 --steps 10 --lr 1e-2 --data " + tmp.file("d.bin") +
                               " --tokenizer " + kTokenizer + " --eval-every 0 --save " + tmp.file("ckpt") +
                               " --device cpu");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path step = fs::path(tmp.file("ckpt")) / "step_000010";
  const fs::path hf = tmp.file("hf");
  fs::create_directories(hf);
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(step / name, hf / name);
  const auto g = run_pylon("generate --model " + hf.string() +
                           " --prompt 'caf\u00e9 \U0001F642' --max-new-tokens 16 --temperature 0 --device cpu");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("caf\u00e9 \U0001F642", 0), 0u) << g.out;
  ASSERT_EQ(run_pylon("tokenize --input " + tmp.file("in.txt") + " --model " + hf.string() + " --out " +
                      tmp.file("e.bin")).exit_code, 0);
  EXPECT_EQ(read_ids(tmp.file("e.bin")), read_ids(tmp.file("d.bin")));
}

TEST_F(HfTokenizerCli, FineTuningFromAFolderKeepsItsTokenizer) {
  testing::TempDir tmp;
  const std::string golden = std::string(PYLON_GOLDEN_DIR) + "/llama_small";
  const fs::path hf = tmp.file("hf");
  fs::create_directories(hf);
  fs::copy_file(golden + "/config.json", hf / "config.json");
  fs::copy_file(golden + "/init.safetensors", hf / "model.safetensors");
  fs::copy_file(kTokenizer + "/tokenizer.json", hf / "tokenizer.json");
  fs::copy_file(kTokenizer + "/tokenizer_config.json", hf / "tokenizer_config.json");
  const auto r = run_pylon("train --init-from " + hf.string() + " --data " + golden + "/tokens.bin --batch 2 --seq 16 "
                           "--steps 1 --eval-every 0 --save " + tmp.file("ckpt") + " --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path step = fs::path(tmp.file("ckpt")) / "step_000001";
  EXPECT_EQ(read_text_file((step / "tokenizer.json").string()), read_text_file((hf / "tokenizer.json").string()));
  EXPECT_TRUE(fs::is_regular_file(step / "tokenizer_config.json"));
}

}  // namespace
}  // namespace pylon
