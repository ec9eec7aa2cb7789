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
//   DIR/step_000100/checksums.json               size and XXH3-64 of every other file of the folder
//                                                (io/checksum.h; docs/formats.md)
// Every rank writes its shard into DIR/.step_000100.tmp; after a barrier rank 0 renames the
// folder into place and replaces `latest` atomically, so a crash never leaves a broken checkpoint.
// With several nodes, DIR must be on a filesystem every node sees. Every file is checked against
// checksums.json before it is used: the small files and the shards on --resume, the weights (and
// config and tokenizer) when a step folder or its model.safetensors is loaded. Folders from before
// checksums load with a warning. Loading works at any world
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
  bool checksums = false;      // has checksums.json (false: written before checksums, not verified)
};

// Reads the metadata of the checkpoint DIR/latest points at (or DIR itself when it is a step
// folder). Throws pylon::Error for a missing or malformed checkpoint, or one whose small files
// (layout.json, trainer.json, tokenizer, config.json) differ from their checksums.
CheckpointInfo read_checkpoint_info(const std::string& dir);

// Fills this rank's parameter and AdamW shards for `to` (any world size) from the checkpoint's
// shard files. Throws pylon::Error when the checkpoint's model differs from `to`'s or a shard
// file it needs is missing, malformed, differs from its checksum or holds NaN or Inf.
void load_checkpoint_shards(const CheckpointInfo& c, const ShardLayout& to, int rank,
                            std::vector<UnitShards>& out);

// Checks every shard file of the checkpoint against its checksums.json (no-op without one). The
// launcher does, so that a corrupted shard is one line rather than an error on each rank that
// reads it (and a collective failure on the others). Throws pylon::Error naming the file.
void verify_checkpoint_shards(const CheckpointInfo& c);

// Resolves a --model argument: a .safetensors file, a folder of weights (a step folder, a Hugging
// Face folder: SafetensorsReader reads either), or a save directory (its latest step folder).
// Returns the file or folder to open with SafetensorsReader; `tokenizer` gets the folder's
// tokenizer.json, else its tokenizer.model, else "".
std::string resolve_model_path(const std::string& arg, std::string* tokenizer = nullptr);

// Checks what loading `path` (resolve_model_path's result: a weights file or folder) reads against
// the checksums.json beside it: a folder's files but the optimizer's shards, or the one file.
// Throws pylon::Error naming a file that differs. Returns false for a Pylon step folder (or a file
// in one) without checksums.json, whose files go unverified; true otherwise (a Hugging Face
// folder or a lone file has no manifest: only the NaN/Inf and shape checks of loading apply).
bool verify_checkpoint_files(const std::string& path);
// The one line to print when verify_checkpoint_files returns false.
std::string checkpoint_without_checksums_warning(const std::string& path);

std::string shard_file_name(int rank, int world);  // "shard-00001-of-00004.safetensors"

}  // namespace pylon
