// The model's configuration: its preset (the traits every path reads: model/preset.h) and sizes.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/preset.h"

namespace pylon {

struct ModelConfig {
  Preset preset = find_preset("causal");
  int vocab = 32000;
  int dim = 2048;
  int layers = 12;
  int heads = 16;
  float norm_eps = 1.1920929e-07f;  // torch.finfo(float32).eps, nn.RMSNorm's default
  float rope_theta = 10000.0f;      // Positions::rope only

  // The preset's default sizes (DESIGN §1).
  static ModelConfig with_preset(std::string_view name);

  int head_dim() const { return dim / heads; }
  int64_t num_params() const;
  // Throws pylon::Error naming the bad field.
  void validate() const;
  // "causal V=32000 D=2048 L=12 H=16": for messages.
  std::string describe() const;

  // Round trip through string metadata (safetensors __metadata__).
  std::map<std::string, std::string> to_metadata() const;
  // Fields absent from `meta` keep their current values.
  void update_from_metadata(const std::map<std::string, std::string>& meta);
};

}  // namespace pylon
