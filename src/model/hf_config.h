// Hugging Face's config.json for the llama preset: read from a folder (LlamaForCausalLM,
// Qwen2ForCausalLM, MistralForCausalLM without a sliding window) and written beside a checkpoint's
// model.safetensors, so that the folder loads in Pylon and in Hugging Face's loader alike.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace pylon {

// Whether `dir` is a folder with a config.json.
bool has_hf_config(const std::string& dir);

// The model dir/config.json describes. Throws pylon::Error with one line naming the file and the
// field that does not fit (an unknown model_type, an activation other than SiLU, a rope_scaling
// Pylon does not implement, heads that do not divide, ...).
ModelConfig read_hf_config(const std::string& dir);

// config.json for a llama-preset model: model_type llama (biases on all of q, k, v, o or none), or
// qwen2 (q, k, v biases only). Throws pylon::Error for another preset.
nlohmann::json hf_config_json(const ModelConfig& config);
void write_hf_config(const std::string& dir, const ModelConfig& config);

}  // namespace pylon
