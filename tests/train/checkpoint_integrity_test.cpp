// Checkpoint integrity (issue 38): every file of a step folder is checked against checksums.json
// before it is used, so a flipped byte in a shard, shifted or swapped offsets in layout.json or an
// edited trainer.json step is named instead of trained on; NaN in a shard is refused by tensor
// name; checkpoints from before checksums still resume.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace pylon {
namespace {
namespace fs = std::filesystem;

TrainOptions small_run(const testing::TempDir& tmp) {
  std::vector<uint32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 3 * i) % 53);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  TrainOptions o;
  o.model.preset = find_preset("causal");
  o.model.vocab = 53, o.model.dim = 16, o.model.layers = 2, o.model.heads = 2;
  o.batch = 2, o.seq = 8, o.steps = 4, o.grad_accum = 1;
  o.adamw.lr = 3e-3f;
  o.schedule.lr = 3e-3f;
  o.data = tmp.file("data.bin");
  o.log_every = 0;
  return o;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Trains 2 steps into DIR/ckpt; returns its step folder.
std::string saved_checkpoint(const testing::TempDir& tmp) {
  TrainOptions o = small_run(tmp);
  o.steps = 2;
  o.save_dir = tmp.file("ckpt");
  train(o);
  return tmp.file("ckpt/step_000002");
}

// Resuming DIR to step 4 throws pylon::Error holding every needle.
void expect_resume_refused(const testing::TempDir& tmp, const std::string& dir, std::vector<std::string> needles) {
  TrainOptions o = small_run(tmp);
  o.resume_dir = dir;
  try {
    train(o);
    FAIL() << "resumed from a corrupted checkpoint";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << n << " not in: " << what;
  }
}

TEST(CheckpointIntegrity, ManifestListsEveryFileWithItsChecksum) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const ChecksumManifest m(step);
  ASSERT_TRUE(m.present());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(step)) {
    const std::string name = e.path().filename().string();
    if (name == kChecksumManifestName) continue;
    ++files;
    ASSERT_TRUE(m.lists(name)) << name;
    EXPECT_EQ(m.files().at(name), file_digest(e.path().string())) << name;  // hashed while written
  }
  EXPECT_EQ(m.files().size(), files);
  EXPECT_TRUE(read_checkpoint_info(step).checksums);
  EXPECT_TRUE(verify_checkpoint_files(step));
  EXPECT_TRUE(verify_checkpoint_files(step + "/model.safetensors"));
}

TEST(CheckpointIntegrity, FlippedByteInAShardsDataIsNamedOnResume) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const std::string shard = step + "/shard-00000-of-00001.safetensors";
  std::string bytes = read_bytes(shard);
  bytes[bytes.size() - 5] ^= 0x01;  // the last tensor's data: the header still parses
  write_bytes(shard, bytes);
  expect_resume_refused(tmp, tmp.file("ckpt"), {"shard-00000-of-00001.safetensors", "checksum mismatch"});
}

TEST(CheckpointIntegrity, ShiftedOrSwappedLayoutOffsetsAreNamed) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const std::string layout = step + "/layout.json";
  const std::string original = read_bytes(layout);
  nlohmann::json l = nlohmann::json::parse(original);
  nlohmann::json& params = l["units"][0]["params"];
  ASSERT_GE(params.size(), 2u);
  std::swap(params[0]["shard_offset"], params[1]["shard_offset"]);  // swapped: still in bounds
  write_bytes(layout, l.dump(1) + "\n");
  expect_resume_refused(tmp, step, {"layout.json", "checksum mismatch"});

  l = nlohmann::json::parse(original);
  l["units"][1]["params"][0]["shard_offset"] = l["units"][1]["params"][0]["shard_offset"].get<int64_t>() + 1;
  write_bytes(layout, l.dump(1) + "\n");  // shifted by one element
  expect_resume_refused(tmp, step, {"layout.json", "checksum mismatch"});
}

TEST(CheckpointIntegrity, EditedTrainerStepIsNamed) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const std::string trainer = step + "/trainer.json";
  nlohmann::json t = nlohmann::json::parse(read_bytes(trainer));
  ASSERT_EQ(t["step"], 2);
  t["step"] = 1;
  write_bytes(trainer, t.dump(2) + "\n");
  expect_resume_refused(tmp, step, {"trainer.json", "checksum mismatch"});
  EXPECT_THROW(read_checkpoint_info(step), Error);
}

// NaN written into a shard: the checksum names the file; in a checkpoint without checksums
// (from before them) the load names the tensor.
TEST(CheckpointIntegrity, NanInAShardIsRefused) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const std::string shard = step + "/shard-00000-of-00001.safetensors";
  std::string bytes = read_bytes(shard);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + bytes.size() - 8, &nan, 4);
  write_bytes(shard, bytes);
  expect_resume_refused(tmp, step, {"shard-00000-of-00001.safetensors", "checksum mismatch"});
  fs::remove(step + "/" + kChecksumManifestName);
  expect_resume_refused(tmp, step, {"shard-00000-of-00001.safetensors", "holds NaN", "exp_avg_sq"});
}

TEST(CheckpointIntegrity, CheckpointsWithoutChecksumsStillResume) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  fs::remove(step + "/" + kChecksumManifestName);
  const CheckpointInfo c = read_checkpoint_info(step);
  EXPECT_FALSE(c.checksums);
  EXPECT_FALSE(verify_checkpoint_files(step));  // the caller prints the warning
  EXPECT_NE(checkpoint_without_checksums_warning(step).find("warning: "), std::string::npos);
  TrainOptions o = small_run(tmp);
  o.resume_dir = step;
  EXPECT_EQ(train(o).steps_done, 4);
}

TEST(CheckpointIntegrity, MalformedOrIncompleteManifestIsNamed) {
  testing::TempDir tmp;
  const std::string step = saved_checkpoint(tmp);
  const std::string manifest = step + "/" + kChecksumManifestName;
  const std::string original = read_bytes(manifest);
  write_bytes(manifest, original.substr(0, original.size() / 2));
  expect_resume_refused(tmp, step, {kChecksumManifestName, "malformed"});
  nlohmann::json m = nlohmann::json::parse(original);
  m["files"].erase("trainer.json");
  write_bytes(manifest, m.dump());
  expect_resume_refused(tmp, step, {kChecksumManifestName, "trainer.json"});
  fs::remove(step + "/model.safetensors");
  write_bytes(manifest, original);
  EXPECT_THROW(verify_checkpoint_files(step), Error);  // a listed file that is missing
}

}  // namespace
}  // namespace pylon
