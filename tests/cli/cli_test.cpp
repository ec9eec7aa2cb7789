// The command line as users and outside checks drive it: the contract command lines of the
// foundation issue, and bad input giving one clear line and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/token_file.h"
#include "support/golden.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

using testing::expect_clear_error;
using testing::run_pylon;

using testing::kGolden;
using testing::kSeedModel;
const std::string kSeedArgsForProgress = "train " + kSeedModel + " --batch 2 --seq 16";

std::string train_args(const std::string& extra, const std::string& init = kGolden + "/init.safetensors",
                       const std::string& data = kGolden + "/tokens.bin") {
  return "train " + kSeedModel + " --batch 2 --seq 16 --steps 3 --lr 1e-3 --weight-decay 0.01 " +
         "--lr-schedule constant --grad-clip 0 --init-from " + init + " --data " + data +
         " --device cpu --dtype fp32 " + extra;
}

// A failure: exit code 1, and stderr is exactly one line naming the problem.
TEST(Cli, ContractTrainCommandMatchesPyTorch) {
  testing::TempDir tmp;
  const auto r = run_pylon(train_args("--metrics " + tmp.file("m.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream e(kGolden + "/expected.json");
  const auto expected = nlohmann::json::parse(e)["losses"];
  std::ifstream m(tmp.file("m.jsonl"));
  int i = 0;
  for (std::string line; std::getline(m, line); ++i) {
    const auto row = nlohmann::json::parse(line);
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "peak_mem_bytes"})
      EXPECT_TRUE(row.contains(key)) << key;
    const double want = expected[i];
    EXPECT_NEAR(row["loss"].get<double>(), want, 1e-4 * want) << "step " << i;  // the contract
  }
  EXPECT_EQ(i, 3);
}

TEST(Cli, ContractEvalCommandPrintsJsonLast) {
  const auto r = run_pylon("eval --model " + kGolden + "/init.safetensors --preset seed --heads 4 --data " +
                           kGolden + "/tokens.bin --batch 2 --seq 16 --steps 3 --device cpu --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(testing::last_line(r.out));
  std::ifstream e(kGolden + "/expected.json");
  const double want = nlohmann::json::parse(e)["eval_loss"];
  EXPECT_NEAR(j["loss"].get<double>(), want, 1e-6 * want);
  EXPECT_EQ(j["tokens"].get<int64_t>(), 96);
}

TEST(Cli, HelpExitsZero) {
  for (const char* cmd : {"train", "eval", "generate", "tokenize"}) {
    const auto r = run_pylon(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("usage: pylon"), std::string::npos) << cmd;
  }
  EXPECT_EQ(run_pylon("--help").exit_code, 0);
}

TEST(Cli, BadFlagsAreErrors) {
  expect_clear_error(run_pylon(train_args("--bogus 3")), "unknown flag --bogus");
  expect_clear_error(run_pylon("train --steps abc"), "--steps: expected an integer, got 'abc'");
  expect_clear_error(run_pylon("train --lr 1e-3x"), "--lr: expected a number");
  expect_clear_error(run_pylon("train --steps"), "--steps needs a value");
  expect_clear_error(run_pylon("train --preset gpt"), "--preset: expected one of seed|causal");
  expect_clear_error(run_pylon("train --recompute some"), "--recompute: expected one of none|selective|full");
  expect_clear_error(run_pylon("train --recompute full"), "--recompute applies to --device cuda");
  expect_clear_error(run_pylon("train --reduce-dtype fp16"), "--reduce-dtype: expected one of fp32|bf16");
  for (const char* flag : {"--reduce-dtype bf16", "--whole-root", "--one-gpu-reshard"})
    expect_clear_error(run_pylon(std::string("train ") + flag),
                       "--reduce-dtype, --whole-root and --one-gpu-reshard apply to --device cuda");
  expect_clear_error(run_pylon(train_args("--cuda-graph")), "--cuda-graph needs --device cuda");
  expect_clear_error(run_pylon("train stray"), "unexpected argument 'stray'");
  expect_clear_error(run_pylon("train --dim 30 --heads 4 --data x.bin"), "not divisible by heads");
  expect_clear_error(run_pylon("train --steps 1 --steps 2"), "given twice");
  expect_clear_error(run_pylon("eval --data x.bin"), "--model is required");
  const auto r = run_pylon("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
}

// Every numeric flag's range is checked when the command line is parsed (cli/args.h): values that
// were once accepted and trained or exported nonsense, numbers a type cannot hold, and text that
// is no number are one line naming the flag, before any file is written.
TEST(Cli, NumericFlagsOutsideTheirRangesAreErrors) {
  testing::TempDir tmp;
  const std::string outputs = " --save " + tmp.file("ckpt") + " --metrics " + tmp.file("m.jsonl");
  const std::string train = "train " + kSeedModel + " --batch 2 --seq 16 --init-from " + kGolden +
                            "/init.safetensors --data " + kGolden + "/tokens.bin" + outputs + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--weight-decay -1", "--weight-decay -1: must be >= 0"},
      {"--adam-eps -1", "--adam-eps -1: must be > 0"},
      {"--adam-eps 0", "--adam-eps 0: must be > 0"},
      {"--min-lr-frac -1", "--min-lr-frac -1: must be in [0, 1]"},
      {"--min-lr-frac 1.5", "--min-lr-frac 1.5: must be in [0, 1]"},
      {"--eval-every -1", "--eval-every -1: must be >= 0"},
      {"--eval-steps 0", "--eval-steps 0: must be >= 1"},
      {"--grad-clip -1", "--grad-clip -1: must be >= 0"},
      {"--grad-clip 1e-300", "--grad-clip: 1e-300 is too small for a 32-bit float"},  // it became 0: off
      {"--lr 1e39", "--lr: 1e39 is too large for a 32-bit float"},
      {"--lr 1e400", "--lr: 1e400 is out of a 64-bit float's range"},
      {"--lr nan", "--lr: expected a number, got 'nan'"},
      {"--lr inf", "--lr: inf is out of a 64-bit float's range"},
      {"--lr=", "--lr: expected a number, got ''"},
      {"--beta2 1", "--beta2 1: must be in [0, 1)"},
      {"--steps 99999999999999999999", "--steps: 99999999999999999999 is outside a 64-bit integer's range"},
      {"--grad-accum 0x10", "--grad-accum: expected an integer, got '0x10'"},
      {"--grad-accum 99999999999", "--grad-accum: 99999999999 is outside a 32-bit integer's range"},
      {"--save-every -1", "--save-every -1: must be >= 0"},
      {"--dist-timeout 1e300", "--dist-timeout 1e300: must be in [0.001, 1000000]"},
      {"--dist-timeout 1e-300", "--dist-timeout 1e-300: must be in [0.001, 1000000]"},  // was 0 ms
      {"--nproc-per-node 2147483647", "--nproc-per-node 2147483647: must be in [1, 1024]"},
      {"--master-port 70000", "--master-port 70000: must be in [0, 65535]"},
  };
  for (const auto& [flag, message] : cases) {
    SCOPED_TRACE(flag);
    expect_clear_error(run_pylon(train + flag), message);
  }
  // wait + warmup once wrapped negative (UBSan) and the run traced nothing without a word.
  expect_clear_error(run_pylon(train + "--steps 3 --profile " + tmp.file("prof") +
                               " --profile-wait 9223372036854775807 --profile-warmup 9223372036854775807"),
                     "--profile: wait 9223372036854775807 + warmup 9223372036854775807 steps leave no active step");
  // The data position of the last step in 64 bits.
  expect_clear_error(run_pylon(train + "--steps 9223372036854775807"),
                     "--steps x --grad-accum x --batch x --seq tokens overflows a 64-bit integer");
  // A --save directory that cannot be made failed at the first save, after the training.
  std::ofstream(tmp.file("a_file")) << "x";
  expect_clear_error(run_pylon(train_args("--save " + tmp.file("a_file") + "/ckpt")),
                     tmp.file("a_file") + " is not a directory");
  // A garbage --tokenizer was copied into every checkpoint and failed only at generate.
  std::ofstream(tmp.file("garbage.model")) << "not a SentencePiece model";
  expect_clear_error(run_pylon(train + "--tokenizer " + tmp.file("garbage.model")),
                     "garbage.model: cannot load SentencePiece model");
  // --layers 0 once trained and exported an edge file that Pylon's own reader refused.
  expect_clear_error(run_pylon("train --preset seed --vocab 97 --dim 32 --layers 0 --heads 4" + outputs),
                     "--layers 0: must be >= 1");
  EXPECT_FALSE(std::filesystem::exists(tmp.file("ckpt")));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("m.jsonl")));

  const std::string model = "--model " + kGolden + "/init.safetensors --preset seed --heads 4";
  const std::string data = " --data " + kGolden + "/tokens.bin";
  expect_clear_error(run_pylon("eval " + model + data + " --steps -1"), "--steps -1: must be >= 1");
  expect_clear_error(run_pylon("eval " + model + data + " --batch 0"), "--batch 0: must be >= 1");
  expect_clear_error(run_pylon("eval " + model + data + " --steps 9223372036854775807"),
                     "--steps x --batch x --seq tokens overflows a 64-bit integer");
  expect_clear_error(run_pylon("eval " + model + data + " --batch 2147483647 --seq 1", "", 30),
                     "--device cpu: a --batch x --seq forward needs ");
  expect_clear_error(run_pylon("generate " + model + " --top-p 0"), "--top-p 0: must be in (0, 1]");
  expect_clear_error(run_pylon("generate " + model + " --temperature -1"), "--temperature -1: must be >= 0");
  expect_clear_error(run_pylon("generate " + model + " --context 0"), "--context 0: must be >= 1");
  // prompt + max-new-tokens once wrapped in int (UBSan) and passed the context check.
  expect_clear_error(run_pylon("generate " + model + " --max-new-tokens 2147483647"),
                     "--max-new-tokens 2147483647 leaves no room in --context 1024");
  expect_clear_error(run_pylon("export " + model + " --out " + tmp.file("x.edge") + " --group-size 16"),
                     "--group-size 16: must be in [32, 64]");
  expect_clear_error(run_pylon("tokenize --input x --out y --val-fraction 1"), "--val-fraction 1: must be in [0, 1)");
  expect_clear_error(run_pylon("tokenize --input x --out y --width u16 --train-vocab 70000"),
                     "--width u16: --train-vocab 70000 does not fit in uint16");  // once found after training
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.edge")));
}

// Sizes whose model or batch cannot fit are refused from the memory plan (train/memory_plan.h),
// before any file is read or buffer allocated: they once aborted in the allocator (std::bad_alloc,
// SIGABRT).
TEST(Cli, ModelsThatCannotFitAreRefusedBeforeAllocating) {
  testing::TempDir tmp;
  const std::string outputs = " --save " + tmp.file("ckpt") + " --metrics " + tmp.file("m.jsonl");
  const std::string base = "train --preset seed --dim 32 --heads 4 --data " + kGolden + "/tokens.bin" + outputs;
  for (const std::string& sizes : {std::string(" --vocab 2147483647 --layers 2 --batch 2 --seq 16"),
                                   std::string(" --vocab 97 --layers 2147483647 --batch 2 --seq 16"),
                                   std::string(" --vocab 97 --layers 2 --batch 2147483647 --seq 1")}) {
    SCOPED_TRACE(sizes);
    const auto r = run_pylon(base + sizes, "", 30);
    expect_clear_error(r, "--device cpu: the model needs ");
    EXPECT_NE(r.err.find("but this machine has"), std::string::npos) << r.err;
  }
  // (B, H, T, T) attention probabilities overflow 64 bits; B x T rows overflow the step's int index.
  expect_clear_error(run_pylon(base + " --vocab 97 --layers 2 --batch 1 --seq 2147483647", "", 30),
                     "--device cpu: the model does not fit: the batch's activation size overflows a 64-bit integer");
  expect_clear_error(run_pylon(base + " --vocab 97 --layers 2 --batch 2147483647 --seq 2", "", 30),
                     "--device cpu: the model does not fit: --batch 2147483647 x --seq 2 rows exceed");
  EXPECT_FALSE(std::filesystem::exists(tmp.file("ckpt")));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("m.jsonl")));

  // Decoding: the KV cache of --context tokens, an edge file's rows of --seq tokens.
  const std::string causal = std::string(PYLON_GOLDEN_DIR) + "/causal_small/init.safetensors";
  expect_clear_error(run_pylon("generate --model " + causal + " --heads 4 --context 2000000000", "", 30),
                     "--device cpu: --context 2000000000 needs ");
  const auto exported = run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " +
                                  tmp.file("s.edge"));
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  expect_clear_error(run_pylon("eval --model " + tmp.file("s.edge") + " --data " + kGolden +
                                   "/tokens.bin --batch 1 --steps 1 --seq 2147483647", "", 30),
                     "--device cpu: --seq 2147483647 needs ");
}

// --grad-accum 2147483647 fits: the CPU step loads each micro-batch just before its forward, so
// its tokens are one micro-batch's and the first micro-steps run at once. The loop once filled a
// buffer of every micro-step's tokens first (at --batch 2 --seq 16, 550 GB: then refused by the
// memory plan; at --batch 1 --seq 1, 17 GB, filled for minutes before the first forward).
TEST(Cli, LargeGradAccumStartsAtOnce) {
  const auto r = run_pylon(kSeedArgsForProgress + " --data " + kGolden + "/tokens.bin --steps 1 --grad-accum 2147483647",
                           "PYLON_TEST_PROGRESS_MS=100", 10);
  EXPECT_EQ(r.exit_code, 124) << r.err;  // stopped by timeout's SIGTERM
  EXPECT_NE(r.out.find("step 1: micro-steps: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/2147483647 (eta "), std::string::npos) << r.out;
}

// --eval-steps 2147483647 ran 2^31 forwards without a line (a hang to the user); a long
// validation or evaluation now says how far it is, and a signal stops it.
TEST(Cli, LongValidationsShowProgressAndStop) {
  const std::string data = kGolden + "/tokens.bin";
  const auto train = run_pylon(kSeedArgsForProgress + " --data " + data + " --val-data " + data +
                                   " --steps 1 --eval-every 1 --eval-steps 2147483647",
                               "PYLON_TEST_PROGRESS_MS=100", 10);
  EXPECT_EQ(train.exit_code, 124) << train.err;  // stopped by timeout's SIGTERM
  EXPECT_NE(train.out.find("validation: micro-batches: "), std::string::npos) << train.out;
  const auto eval = run_pylon("eval --model " + kGolden + "/init.safetensors --preset seed --heads 4 --data " + data +
                                  " --batch 2 --seq 16 --steps 2147483647",
                              "PYLON_TEST_PROGRESS_MS=100", 10);
  EXPECT_EQ(eval.exit_code, 124) << eval.err;
  EXPECT_NE(eval.out.find("eval: micro-batches: "), std::string::npos) << eval.out;
}

TEST(Cli, MissingFilesAreErrors) {
  expect_clear_error(run_pylon(train_args("", kGolden + "/init.safetensors", "/nonexistent/tokens.bin")), "/nonexistent/tokens.bin");
  expect_clear_error(run_pylon(train_args("", "/nonexistent/w.safetensors")),
                     "/nonexistent/w.safetensors");
  expect_clear_error(run_pylon("eval --model /nonexistent --data x.bin"), "/nonexistent");
}

TEST(Cli, CorruptWeightsAreErrors) {
  testing::TempDir tmp;
  std::ifstream in(kGolden + "/init.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(tmp.file("truncated.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_clear_error(run_pylon(train_args("", tmp.file("truncated.safetensors"))),
                     "truncated.safetensors");
  std::string garbage = bytes;
  for (size_t i = 8; i < 40; ++i) garbage[i] = '#';  // break the JSON header
  std::ofstream(tmp.file("garbage.safetensors"), std::ios::binary) << garbage;
  expect_clear_error(run_pylon(train_args("", tmp.file("garbage.safetensors"))),
                     "garbage.safetensors");
}

TEST(Cli, WrongShapesAndNamesAreErrors) {
  testing::TempDir tmp;
  // The golden weights have D=32: asking for D=64 must name the tensor and both shapes.
  auto r = run_pylon("train --preset seed --vocab 97 --dim 64 --layers 2 --heads 4 --steps 1 --init-from " +
                     kGolden + "/init.safetensors --data " + kGolden + "/tokens.bin");
  expect_clear_error(r, "embed.weight");
  EXPECT_NE(r.err.find("(97, 32)"), std::string::npos) << r.err;
  // A file with one tensor renamed.
  const SafetensorsReader src(kGolden + "/init.safetensors");
  std::vector<std::vector<float>> store;
  std::vector<TensorToWrite> tensors;
  for (const auto& t : src.tensors()) {
    store.emplace_back(static_cast<size_t>(t.numel()));
    src.read_f32(t.name, t.shape, store.back().data());
  }
  for (size_t i = 0; i < src.tensors().size(); ++i) {
    const auto& t = src.tensors()[i];
    tensors.push_back({t.name == "head.weight" ? "lm_head.weight" : t.name, DType::f32, t.shape,
                       store[i].data()});
  }
  write_safetensors(tmp.file("renamed.safetensors"), tensors);
  expect_clear_error(run_pylon(train_args("", tmp.file("renamed.safetensors"))), "head.weight");
}

// Zero heads, from the flag (a PyTorch state dict) or from a checkpoint's metadata, is one line in
// eval, export and generate (it once divided by zero: SIGFPE).
TEST(Cli, ZeroHeadsAreErrors) {
  testing::TempDir tmp;
  const std::string init = kGolden + "/init.safetensors", data = " --data " + kGolden + "/tokens.bin";
  const SafetensorsReader src(init);
  std::vector<std::vector<float>> store;
  std::vector<TensorToWrite> tensors;
  for (const auto& t : src.tensors()) {
    store.emplace_back(static_cast<size_t>(t.numel()));
    src.read_f32(t.name, t.shape, store.back().data());
    tensors.push_back({t.name, DType::f32, t.shape, store.back().data()});
  }
  write_safetensors(tmp.file("zero.safetensors"), tensors,
                    {{"pylon.preset", "seed"}, {"pylon.vocab", "97"}, {"pylon.dim", "32"},
                     {"pylon.layers", "2"}, {"pylon.heads", "0"}});
  for (const std::string& model : {init + " --heads 0", tmp.file("zero.safetensors")}) {
    SCOPED_TRACE(model);
    expect_clear_error(run_pylon("eval --model " + model + data + " --batch 2 --seq 8 --steps 1"), "heads");
    expect_clear_error(run_pylon("export --model " + model + " --out " + tmp.file("x.edge")), "heads");
    expect_clear_error(run_pylon("generate --model " + model + " --prompt hi --max-new-tokens 1"), "heads");
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("x.edge")));
}

// A FIFO given as an input file is refused at once (it once blocked in open() waiting for a writer):
// weights, an edge file, a Hugging Face folder's config, a trace, an ncu export, token data.
TEST(Cli, FifosAreRefusedNotWaitedOn) {
  testing::TempDir tmp;
  const std::string fifo = tmp.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = tmp.file("hf");
  std::filesystem::create_directories(folder);
  ASSERT_EQ(::mkfifo((folder + "/config.json").c_str(), 0600), 0);
  std::filesystem::copy_file(std::string(PYLON_GOLDEN_DIR) + "/llama_small/init.safetensors",
                             folder + "/model.safetensors");
  for (const std::string& args :
       {"eval --model " + fifo + " --data " + kGolden + "/tokens.bin", "inspect " + fifo,
        "eval --model " + folder + " --data " + kGolden + "/tokens.bin", "trace analyze " + fifo,
        "roofline --ncu-csv " + fifo, "train --steps 1 --data " + fifo}) {
    SCOPED_TRACE(args);
    expect_clear_error(run_pylon(args), "not a regular file");
  }
}

TEST(Cli, TokenIdsOutsideTheVocabAreErrors) {
  testing::TempDir tmp;
  write_token_file(tmp.file("big.bin"), {1, 2, 3, 500, 4, 5}, TokenWidth::u16);
  expect_clear_error(run_pylon(train_args("", kGolden + "/init.safetensors", tmp.file("big.bin"))), "500");
  expect_clear_error(run_pylon("eval --model " + kGolden + "/init.safetensors --preset seed --heads 4 --data " +
                               tmp.file("big.bin") + " --batch 1 --seq 2 --steps 1"),
                     "500");
}

TEST(Cli, TrainSaveThenGenerateAndEvalFromCheckpoint) {
  testing::TempDir tmp;
  const auto t = run_pylon(train_args("--save " + tmp.file("ckpt")));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto e = run_pylon("eval --model " + tmp.file("ckpt") + " --data " + kGolden +
                           "/tokens.bin --batch 2 --seq 16 --steps 1 --json");
  EXPECT_EQ(e.exit_code, 0) << e.err;
  // No tokenizer was given to that run: generation must say so, not crash.
  expect_clear_error(run_pylon("generate --model " + tmp.file("ckpt") + " --prompt hi"), "tokenizer");
}

}  // namespace
}  // namespace pylon
