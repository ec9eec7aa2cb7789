// Fuzzes a checkpoint's metadata as --resume reads it (train/checkpoint.h): the input is a
// layout.json, then optionally a NUL and a trainer.json. read_checkpoint_info() reads them; a
// checkpoint that passes is loaded at world size 2 for a small model, from shard files this target
// writes once (zeros, world sizes 1 to 3, the layout a small model has), as a resume would.
#include <vector>

#include "dist/shard_layout.h"
#include "fuzz_util.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "train/checkpoint.h"

namespace {

pylon::ModelConfig small_model() {
  pylon::ModelConfig c;
  c.vocab = 29, c.dim = 12, c.heads = 2, c.layers = 2;
  return c;
}

void write_zero_shards(const std::filesystem::path& folder) {
  const pylon::ParamTable table = pylon::param_table(small_model());
  for (int world = 1; world <= 3; ++world) {
    const pylon::ShardLayout layout(table, world);
    for (int rank = 0; rank < world; ++rank) {
      std::vector<std::vector<float>> zeros;
      std::vector<pylon::TensorToWrite> tensors;
      zeros.reserve(layout.units().size());  // tensors point into it
      for (const pylon::ShardUnit& u : layout.units()) {
        zeros.emplace_back(static_cast<size_t>(u.shard), 0.f);
        for (const char* what : {"param", "exp_avg", "exp_avg_sq"})
          tensors.push_back({u.name + "." + what, pylon::DType::f32, {u.shard}, zeros.back().data()});
      }
      auto meta = small_model().to_metadata();
      meta["pylon.rank"] = std::to_string(rank);
      meta["pylon.world"] = std::to_string(world);
      pylon::write_safetensors((folder / pylon::shard_file_name(rank, world)).string(), tensors, meta);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::filesystem::create_directories(pylon::fuzz::scratch_dir() / "step_000001");
  write_zero_shards(pylon::fuzz::scratch_dir() / "step_000001");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pylon::ShardLayout two(pylon::param_table(small_model()), 2);
  const auto [layout, trainer] = pylon::fuzz::split_at_nul(data, size);
  pylon::fuzz::write_scratch("step_000001/layout.json", layout);
  pylon::fuzz::write_scratch("step_000001/trainer.json", trainer);
  pylon::fuzz::expect_clean([&] {
    const pylon::CheckpointInfo info = pylon::read_checkpoint_info((pylon::fuzz::scratch_dir() / "step_000001").string());
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<pylon::UnitShards> shards;
      pylon::load_checkpoint_shards(info, two, rank, shards);
    }
  });
  return 0;
}
