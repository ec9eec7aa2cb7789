// Integrity at the command line (issue 38): a corrupted checkpoint file is named by eval, export
// and train --init-from (one line, exit 1), one from before checksums loads with one warning line;
// weights holding NaN are refused by tensor name; a corrupted pylon.preset key and a garbage
// tokenizer are refused when first read. (Edge files' tensor checksums: edge_cli_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
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
const std::string kInit = kGolden + "/init.safetensors";
using testing::kSeedModel;
const std::string kStateDict = "--preset seed --heads 4";  // eval and export: a file without metadata
const std::string kEvalData = " --data " + kGolden + "/tokens.bin --batch 2 --seq 16 --steps 1 --json";

std::string train_args(const std::string& extra, const std::string& init = kInit) {
  return "train " + kSeedModel + " --batch 2 --seq 16 --steps 2 --lr 1e-3 --init-from " + init + " --data " +
         kGolden + "/tokens.bin --device cpu " + extra;
}

// Writes bytes over a file (not atomically: what a disk or an editor does).
void overwrite(const std::string& path, const std::string& bytes) { write_file_atomic(path, bytes); }

// The golden weights rewritten with other metadata, or with element 3 of `nan_tensor` NaN.
void rewrite_weights(const std::string& out, const std::map<std::string, std::string>& metadata,
                     const std::string& nan_tensor = "") {
  testing::rewrite_weights(kInit, out, metadata, {nan_tensor, 3, std::numeric_limits<float>::quiet_NaN()});
}

TEST(IntegrityCli, CorruptedCheckpointWeightsAreNamedByEvalExportAndInitFrom) {
  testing::TempDir tmp;
  ASSERT_EQ(run_pylon(train_args("--save " + tmp.file("ckpt"))).exit_code, 0);
  const std::string weights = tmp.file("ckpt/step_000002/model.safetensors");
  const auto ok = run_pylon("eval --model " + tmp.file("ckpt") + kEvalData);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err, "");  // verified: no warning
  std::string bytes = read_file(weights);
  bytes[bytes.size() - 3] ^= 0x10;  // head.weight's data: a plausible float still
  overwrite(weights, bytes);
  for (const std::string& cmd : {"eval --model " + tmp.file("ckpt") + kEvalData,
                                 "eval --model " + weights + kEvalData,
                                 "export --model " + tmp.file("ckpt/step_000002") + " --out " + tmp.file("m.edge")})
    expect_clear_error(run_pylon(cmd), "model.safetensors: checksum mismatch");
  expect_clear_error(run_pylon(train_args("", weights)), "model.safetensors: checksum mismatch");
  expect_clear_error(run_pylon(train_args("", tmp.file("ckpt/step_000002"))), "model.safetensors: checksum mismatch");
  EXPECT_FALSE(fs::exists(tmp.file("m.edge")));
}

TEST(IntegrityCli, CheckpointWithoutChecksumsLoadsWithOneWarning) {
  testing::TempDir tmp;
  ASSERT_EQ(run_pylon(train_args("--save " + tmp.file("ckpt"))).exit_code, 0);
  fs::remove(tmp.file("ckpt/step_000002/") + kChecksumManifestName);
  const auto e = run_pylon("eval --model " + tmp.file("ckpt") + kEvalData);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  EXPECT_NE(e.err.find("warning: "), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("not verified"), std::string::npos) << e.err;
  const auto t = run_pylon(train_args("", tmp.file("ckpt/step_000002/model.safetensors")));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("not verified"), std::string::npos) << t.out;
}

TEST(IntegrityCli, NanWeightsAreRefusedByTensorName) {
  testing::TempDir tmp;
  rewrite_weights(tmp.file("nan.safetensors"), {}, "layers.1.attn.out_proj.weight");
  expect_clear_error(run_pylon("eval --model " + tmp.file("nan.safetensors") + " " + kStateDict + kEvalData),
                     "tensor layers.1.attn.out_proj.weight holds NaN at element 3");
  expect_clear_error(run_pylon(train_args("", tmp.file("nan.safetensors"))), "layers.1.attn.out_proj.weight holds NaN");
  expect_clear_error(run_pylon("export --model " + tmp.file("nan.safetensors") + " " + kStateDict + " --out " +
                               tmp.file("m.edge")),
                     "holds NaN");
}

// A Pylon file whose pylon.preset key is corrupted was read as a PyTorch state dict with the
// default preset; one whose value is corrupted named no file.
TEST(IntegrityCli, CorruptedPresetKeyIsRefused) {
  testing::TempDir tmp;
  std::map<std::string, std::string> meta = {{"pylon.presfx", "seed"}, {"pylon.vocab", "97"}, {"pylon.dim", "32"},
                                             {"pylon.layers", "2"}, {"pylon.heads", "4"}};
  rewrite_weights(tmp.file("key.safetensors"), meta);
  expect_clear_error(run_pylon("eval --model " + tmp.file("key.safetensors") + kEvalData), "no pylon.preset key");
  meta.erase("pylon.presfx");
  meta["pylon.preset"] = "sefd";
  rewrite_weights(tmp.file("value.safetensors"), meta);
  expect_clear_error(run_pylon("eval --model " + tmp.file("value.safetensors") + kEvalData),
                     "value.safetensors: unknown preset 'sefd'");
  meta["pylon.preset"] = "seed";
  rewrite_weights(tmp.file("good.safetensors"), meta);
  EXPECT_EQ(run_pylon("eval --model " + tmp.file("good.safetensors") + kEvalData).exit_code, 0);
}

// A garbage tokenizer.model was copied into every checkpoint and failed only at generate.
TEST(IntegrityCli, GarbageTokenizerIsRefusedWhenFirstRead) {
  testing::TempDir tmp;
  overwrite(tmp.file("tokenizer.model"), std::string("\x0a\x05garbage, not a SentencePiece model", 36));
  expect_clear_error(run_pylon(train_args("--tokenizer " + tmp.file("tokenizer.model") + " --save " + tmp.file("a"))),
                     tmp.file("tokenizer.model"));
  EXPECT_FALSE(fs::exists(tmp.file("a")));
  // A checkpoint from before checksums that carries one: --resume refuses it before training.
  ASSERT_EQ(run_pylon(train_args("--save " + tmp.file("ckpt"))).exit_code, 0);
  const std::string step = tmp.file("ckpt/step_000002");
  fs::copy_file(tmp.file("tokenizer.model"), step + "/tokenizer.model");
  fs::remove(step + "/" + kChecksumManifestName);
  const std::string resume = "train " + kSeedModel + " --batch 2 --seq 16 --steps 3 --data " + kGolden +
                             "/tokens.bin --device cpu --resume " + tmp.file("ckpt");
  expect_clear_error(run_pylon(resume), step + "/tokenizer.model");
}

}  // namespace
}  // namespace pylon
