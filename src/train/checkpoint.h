// Sharded training checkpoints (DESIGN §4). Layout of a save directory DIR:
//   DIR/latest                                   name of the newest complete checkpoint
//   DIR/step_000100/layout.json                  model config, world size W, units: parameters
//                                                (name, shape, offset in the unit buffer, numel),
//                                                unit numel, padded size, each rank's [begin, end)
//   DIR/step_000100/shard-00000-of-0000W.safetensors   rank r's slices: for each unit U ("root",
//                                                "layers.i") flat F32 tensors U.param,
//                                                U.exp_avg, U.exp_avg_sq of the shard length
//   DIR/step_000100/model.safetensors            the full fp32 parameters with PyTorch names and
//                                                pylon.* metadata (export; eval and generate)
//   DIR/step_000100/trainer.json                 step count, world size, options
//   DIR/step_000100/tokenizer.model              when the run knew its tokenizer: a SentencePiece
//   DIR/step_000100/tokenizer.json               model, or a tokenizer.json (with the
//                                                tokenizer_config.json that was beside it)
// Every rank writes its shard into DIR/.step_000100.tmp; after a barrier rank 0 renames the
// folder into place and replaces `latest` atomically, so a crash never leaves a broken checkpoint.
// With several nodes, DIR must be on a filesystem every node sees. Loading works at any world
// size: each rank reads its new slices from the old shard files that overlap them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/fsdp.h"
#include "model/config.h"

namespace pylon {

struct CheckpointMeta {
  ModelConfig config;
  int64_t step = 0;            // completed optimizer steps
  nlohmann::json trainer;      // free-form trainer state (options)
  std::string tokenizer_path;  // a tokenizer file or a folder with one (io/tokenizer.h); empty if none
};

// Collective (every rank calls it): writes DIR/step_<step>/ and points DIR/latest at it.
// Returns the step folder's path.
std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta, FsdpModel& model);

struct CheckpointInfo {
  std::string folder;          // the step folder
  ModelConfig config;
  int64_t step = 0;
  int world = 0;               // world size that wrote it
  nlohmann::json trainer, layout;
  std::string tokenizer_path;  // empty if none
};

// Reads the metadata of the checkpoint DIR/latest points at (or DIR itself when it is a step
// folder). Throws pylon::Error for a missing or malformed checkpoint.
CheckpointInfo read_checkpoint_info(const std::string& dir);

// Fills this rank's parameter and AdamW shards for `to` (any world size) from the checkpoint's
// shard files. Throws pylon::Error when the checkpoint's model differs from `to`'s or a shard
// file it needs is missing or malformed.
void load_checkpoint_shards(const CheckpointInfo& c, const ShardLayout& to, int rank,
                            std::vector<UnitShards>& out);

// Resolves a --model argument: a .safetensors file, a folder of weights (a step folder, a Hugging
// Face folder: SafetensorsReader reads either), or a save directory (its latest step folder).
// Returns the file or folder to open with SafetensorsReader; `tokenizer` gets the folder's
// tokenizer.json, else its tokenizer.model, else "".
std::string resolve_model_path(const std::string& arg, std::string* tokenizer = nullptr);

std::string shard_file_name(int rank, int world);  // "shard-00001-of-00004.safetensors"

}  // namespace pylon
