// Training checkpoints. Layout of a save directory DIR:
//   DIR/latest                      name of the newest complete checkpoint ("step_000100")
//   DIR/step_000100/model.safetensors       fp32 parameters, PyTorch names, pylon.* metadata
//   DIR/step_000100/optimizer.safetensors   AdamW state: exp_avg.<name>, exp_avg_sq.<name>
//   DIR/step_000100/trainer.json            step count, options, data position
//   DIR/step_000100/tokenizer.model         when the run knew its tokenizer
// Each step folder is written under a temporary name and renamed when complete; `latest` is then
// replaced atomically. A crash leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/params.h"

namespace pylon {

struct CheckpointData {
  ModelConfig config;
  int64_t step = 0;                      // completed optimizer steps
  std::vector<float> params, m, v;       // flat, table order
  nlohmann::json trainer;                // free-form trainer state (options, metrics so far)
  std::string tokenizer_path;            // empty if none
};

// Writes DIR/step_<step>/ and points DIR/latest at it. Returns the step folder's path.
std::string save_checkpoint(const std::string& dir, const CheckpointData& c);

// Reads the checkpoint DIR/latest points at (or DIR itself when it is a step folder).
CheckpointData load_checkpoint(const std::string& dir);

// Resolves a --model argument: a .safetensors file, a step folder, or a save directory (latest).
// Returns the path of the model.safetensors; `tokenizer` gets the checkpoint's tokenizer or "".
std::string resolve_model_path(const std::string& arg, std::string* tokenizer = nullptr);

}  // namespace pylon
