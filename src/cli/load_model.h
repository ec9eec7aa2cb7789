// Shared by eval, generate and export: resolve --model (safetensors file, edge model file, step
// folder or save directory), read its configuration and fp32 weights.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#if PYLON_HAVE_VULKAN
#include "model/vulkan/vulkan_decoder.h"
#endif

namespace pylon {

struct LoadedModel {
  ModelConfig config;
  std::vector<float> params;  // flat, table order
  std::string tokenizer;        // the folder's tokenizer.json or tokenizer.model, or ""
  std::string tokenizer_model;  // an edge file's tokenizer bytes (Tokenizer::from_bytes), or ""
};

// True for an edge model file (a regular file with the edge magic).
bool is_edge_file(const std::string& arg);

// An edge file carries its config and is dequantized to fp32 here (export); eval and generate on
// the CPU read edge files in place instead (model/decoder.h).
// fallback carries --preset/--heads for files without pylon.* metadata (PyTorch exports).
LoadedModel load_model(const std::string& arg, const ModelConfig& fallback, bool preset_given,
                       bool heads_given);

#if PYLON_HAVE_VULKAN
// The Vulkan decoder's options from --device vulkan[:N], --no-coopmat and --weights-path, and the
// test hook PYLON_TEST_VK_FAIL_ALLOC=N (the N-th device allocation fails; docs/environment.md).
VulkanOptions vulkan_options_from_flags(const std::string& device, bool no_coopmat, const std::string& weights);
#endif

}  // namespace pylon
