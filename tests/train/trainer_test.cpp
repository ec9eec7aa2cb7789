// Trainer properties: resume is bit-identical, gradient accumulation equals a larger batch,
// checkpoints are complete or absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/token_file.h"
#include "support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace pylon {
namespace {

TrainOptions small_run(const testing::TempDir& tmp, const Preset& preset) {
  std::vector<uint32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 3 * i) % 53);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  TrainOptions o;
  o.model.preset = preset;
  o.model.vocab = 53, o.model.dim = 16, o.model.layers = 2, o.model.heads = 2;
  o.batch = 2, o.seq = 8, o.steps = 6, o.grad_accum = 1;
  o.adamw.lr = 3e-3f;
  o.schedule.kind = LrSchedule::cosine, o.schedule.lr = 3e-3f, o.schedule.warmup = 2;
  o.grad_clip = 1.0f;
  o.data = tmp.file("data.bin");
  o.log_every = 0;
  return o;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"]);
  return out;
}

std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Trainer, ResumeIsBitIdentical) {
  testing::TempDir tmp;
  TrainOptions full = small_run(tmp, find_preset("causal"));
  full.save_dir = tmp.file("full");
  full.save_every = 3;
  full.metrics_path = tmp.file("full.jsonl");
  train(full);

  TrainOptions resumed = small_run(tmp, find_preset("causal"));
  resumed.resume_dir = tmp.file("full/step_000003");
  resumed.save_dir = tmp.file("resumed");
  resumed.metrics_path = tmp.file("resumed.jsonl");
  train(resumed);

  const auto a = losses(full.metrics_path), b = losses(resumed.metrics_path);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[3 + i], b[i]) << "step " << 4 + i;  // bitwise
  EXPECT_EQ(bytes(tmp.file("full/step_000006/model.safetensors")),
            bytes(tmp.file("resumed/step_000006/model.safetensors")));
  EXPECT_EQ(bytes(tmp.file("full/step_000006/shard-00000-of-00001.safetensors")),
            bytes(tmp.file("resumed/step_000006/shard-00000-of-00001.safetensors")));
}

TEST(Trainer, GradAccumulationEqualsLargerBatch) {
  testing::TempDir tmp;
  TrainOptions big = small_run(tmp, find_preset("seed"));
  big.batch = 4;
  big.metrics_path = tmp.file("big.jsonl");
  train(big);
  TrainOptions accum = small_run(tmp, find_preset("seed"));
  accum.batch = 2, accum.grad_accum = 2;
  accum.metrics_path = tmp.file("accum.jsonl");
  train(accum);
  const auto a = losses(big.metrics_path), b = losses(accum.metrics_path);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST(Trainer, CheckpointLeavesNoTemporaryFiles) {
  testing::TempDir tmp;
  TrainOptions o = small_run(tmp, find_preset("causal"));
  o.steps = 2;
  o.save_dir = tmp.file("ckpt");
  train(o);
  for (const auto& e : std::filesystem::directory_iterator(o.save_dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  const CheckpointInfo c = read_checkpoint_info(o.save_dir);
  EXPECT_EQ(c.step, 2);
  EXPECT_EQ(c.config.dim, 16);
  EXPECT_EQ(c.world, 1);
}

TEST(Trainer, BadCheckpointsAreClearErrors) {
  testing::TempDir tmp;
  EXPECT_THROW(read_checkpoint_info(tmp.file("missing")), Error);
  std::filesystem::create_directories(tmp.file("empty"));
  EXPECT_THROW(read_checkpoint_info(tmp.file("empty")), Error);
  std::ofstream(tmp.file("empty/latest")) << "step_000009\n";  // names a folder that is not there
  EXPECT_THROW(read_checkpoint_info(tmp.file("empty")), Error);
}

TEST(Trainer, TokenIdsOutsideTheVocabAreRejected) {
  testing::TempDir tmp;
  TrainOptions o = small_run(tmp, find_preset("seed"));
  o.model.vocab = 20;  // the data holds ids up to 52
  EXPECT_THROW(train(o), Error);
}

// A replayed CUDA graph enqueues no host ranges or launches: tracing it would show nothing of the
// step's structure, so the two options exclude each other (before any device is needed).
TEST(Trainer, CudaGraphExcludesProfiling) {
  testing::TempDir tmp;
  TrainOptions o = small_run(tmp, find_preset("seed"));
  o.device = "cuda", o.cuda_graph = true, o.profile.dir = tmp.file("prof");
  try {
    check_train_options(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda-graph and --profile exclude each other"), std::string::npos)
        << e.what();
  }
  o.profile.dir.clear();
  EXPECT_NO_THROW(check_train_options(o));
}

}  // namespace
}  // namespace pylon
