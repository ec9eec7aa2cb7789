// What scripts/hostile.py found (issue 38; bench/robustness_notes.md), each through the executable as
// the script ran it: before the fix a crash (exit 3), a silently accepted value or file, a command
// that ran on without a word, or an error split over several lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "io/checksum.h"
#include "io/safetensors.h"
#include "support/golden.h"
#include "support/rewrite_weights.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

namespace fs = std::filesystem;
using testing::expect_clear_error;
using testing::read_file;
using testing::run_pylon;

using testing::kGolden;
using testing::kSeedModel;

std::string train_args(const std::string& extra) {
  return "train " + kSeedModel + " --batch 2 --seq 16 --steps 2 --log-every 0 --data " + kGolden + "/tokens.bin " +
         extra;
}

void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  edit(j);
  std::ofstream(path) << j.dump(1);
}

// OMPI_COMM_WORLD_RANK without its SIZE failed an internal assertion (exit 3).
TEST(HostileInputs, OpenMpiRankWithoutSizeIsOneLine) {
  expect_clear_error(run_pylon(train_args(""), "OMPI_COMM_WORLD_RANK=0"),
                     "OMPI_COMM_WORLD_RANK is set without OMPI_COMM_WORLD_SIZE");
}

// strtod reads hexadecimal: --lr 0x10 was 16 and --top-p 0x1p-3 was 0.125, where docs/cli.md says
// hex is refused (as the integer flags refused it).
TEST(HostileInputs, HexadecimalNumbersAreRefusedByRealFlags) {
  expect_clear_error(run_pylon(train_args("--lr 0x10")), "--lr: expected a number, got '0x10'");
  expect_clear_error(run_pylon(train_args("--rope-theta 0x1p-3")), "--rope-theta: expected a number, got '0x1p-3'");
  expect_clear_error(run_pylon("roofline --ncu-csv x.csv --peak-gbs 0X1P+4"), "--peak-gbs: expected a number");
}

// --node-rank 5 with one node trained as if it were 0 (with several nodes the launcher checked it).
TEST(HostileInputs, NodeRankMustBeBelowNnodes) {
  expect_clear_error(run_pylon(train_args("--node-rank 1")), "--node-rank 1 is outside 0..0");
}

// --dist-timeout 1e-300 passed its range and became 0 ms, refused later by every rank (two lines).
TEST(HostileInputs, DistTimeoutBelowAMillisecondIsOutOfRange) {
  expect_clear_error(run_pylon(train_args("--dist-timeout 1e-300")), "--dist-timeout 1e-300: must be in [0.001, 1000000]");
}

// train --init-from FILE read only the tensors: a Pylon file whose metadata says 8 heads (same
// shapes as the flags' 4), heads 0, or a garbage preset trained on without a word.
TEST(HostileInputs, InitFromAPylonFileMustMatchTheFlags) {
  testing::TempDir tmp;
  ASSERT_EQ(run_pylon(train_args("--init-from " + kGolden + "/init.safetensors --save " + tmp.file("ckpt"))).exit_code,
            0);
  const std::string saved = tmp.file("ckpt/step_000002/model.safetensors");
  const auto good = run_pylon(train_args("--init-from " + saved));
  ASSERT_EQ(good.exit_code, 0) << good.err;
  const std::map<std::string, std::string> meta = SafetensorsReader(saved).metadata();
  auto with = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> m = meta;
    m[key] = value;
    const std::string out = tmp.file(key + "-" + value + ".safetensors");
    testing::rewrite_weights(saved, out, m);
    return out;
  };
  expect_clear_error(run_pylon(train_args("--init-from " + with("pylon.heads", "8"))), "pylon.heads-8.safetensors");
  expect_clear_error(run_pylon(train_args("--init-from " + with("pylon.heads", "0"))), "pylon.heads-0.safetensors");
  expect_clear_error(run_pylon(train_args("--init-from " + with("pylon.preset", "gpt5"))), "unknown preset 'gpt5'");
  expect_clear_error(run_pylon(train_args("--init-from " + with("pylon.rope_theta", "20000"))),
                     "pylon.rope_theta 20000, the flags give 10000");
  // A PyTorch state dict (no pylon.* keys) still takes its model from the flags.
  EXPECT_EQ(run_pylon(train_args("--init-from " + kGolden + "/init.safetensors")).exit_code, 0);
}

// A checkpoint without checksums.json (from before them) has only its structure checked: a
// shard_offset of 1.5 was read as 1, a step of 2.5 as 2.
TEST(HostileInputs, NonIntegerCheckpointFieldsAreRefused) {
  testing::TempDir tmp;
  ASSERT_EQ(run_pylon(train_args("--init-from " + kGolden + "/init.safetensors --save " + tmp.file("ckpt"))).exit_code,
            0);
  const std::string step = tmp.file("ckpt/step_000002");
  fs::remove(step + "/" + kChecksumManifestName);
  fs::copy(tmp.file("ckpt"), tmp.file("ckpt2"), fs::copy_options::recursive);
  const std::string resume = "train " + kSeedModel + " --batch 2 --seq 16 --steps 3 --log-every 0 --data " + kGolden +
                             "/tokens.bin --resume ";
  edit_json(step + "/layout.json", [](nlohmann::json& j) { j["units"][0]["params"][1]["shard_offset"] = 1.5; });
  expect_clear_error(run_pylon(resume + tmp.file("ckpt")), "\"shard_offset\" is not a 64-bit integer");
  edit_json(tmp.file("ckpt2/step_000002/trainer.json"), [](nlohmann::json& j) { j["step"] = 2.5; });
  expect_clear_error(run_pylon(resume + tmp.file("ckpt2")), "trainer.json: \"step\" is not a 64-bit integer");
}

// inspect --model A B inspected A and ignored B.
TEST(HostileInputs, InspectTakesOneFile) {
  expect_clear_error(run_pylon("inspect --model a.edge b.edge"), "two files: --model a.edge and b.edge");
  expect_clear_error(run_pylon("inspect b.edge --model a.edge --verify"), "two files: --model a.edge and b.edge");
}

// trace's own flags: a repeated --top or --json was taken (the last one won).
TEST(HostileInputs, TraceFlagsGivenTwiceAreErrors) {
  const std::string trace = std::string(PYLON_GOLDEN_DIR) + "/../profile/data/trace_cpu_1rank.json";
  expect_clear_error(run_pylon("trace diff " + trace + " " + trace + " --top 3 --top 4"), "--top given twice");
  expect_clear_error(run_pylon("trace diff " + trace + " " + trace + " --json --json"), "--json given twice");
  expect_clear_error(run_pylon("trace analyze " + trace + " --json --json"), "--json given twice");
}

// A path or flag holding a line break split the one error line in two.
TEST(HostileInputs, LineBreaksInArgumentsStayOnTheErrorLine) {
  expect_clear_error(run_pylon("eval --model 'no\nsuch' --data x.bin"), "no\\nsuch");
  expect_clear_error(run_pylon("inspect 'a\r\nb.edge'"), "a\\r\\nb.edge");
  expect_clear_error(run_pylon("eval --bad'\n'flag"), "unknown flag --bad\\nflag");
}

// SentencePiece's trainer loops over the vocabulary: --train-vocab 2147483647 ran 45 s without a
// line before it said the text has fewer pieces.
TEST(HostileInputs, TrainVocabHasAnUpperBound) {
  testing::TempDir tmp;
  std::ofstream(tmp.file("t.txt")) << "some text to tokenize\n";
  const auto r = run_pylon("tokenize --input " + tmp.file("t.txt") + " --out " + tmp.file("t.bin") +
                           " --train-vocab 2147483647", "", 30);
  expect_clear_error(r, "--train-vocab 2147483647: must be in [1, 16777216]");
  EXPECT_LT(r.seconds, 10);
}

}  // namespace
}  // namespace pylon
