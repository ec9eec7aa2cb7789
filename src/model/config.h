// MiniLLM configuration and its two presets (DESIGN §1): `seed` (bidirectional, no positions,
// the PyTorch benchmark model) and `causal` (causal mask + rotary embeddings, for real text).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace pylon {

enum class Preset { seed, causal };

struct ModelConfig {
  Preset preset = Preset::causal;
  int vocab = 32000;
  int dim = 2048;
  int layers = 12;
  int heads = 16;
  float norm_eps = 1.1920929e-07f;  // torch.finfo(float32).eps, nn.RMSNorm's default
  float rope_theta = 10000.0f;      // causal preset only

  bool causal() const { return preset == Preset::causal; }
  int head_dim() const { return dim / heads; }
  int64_t num_params() const;
  // Throws pylon::Error naming the bad field.
  void validate() const;

  // Round trip through string metadata (safetensors __metadata__).
  std::map<std::string, std::string> to_metadata() const;
  // Fields absent from `meta` keep their current values.
  void update_from_metadata(const std::map<std::string, std::string>& meta);
};

const char* preset_name(Preset p);
Preset parse_preset(const std::string& name);  // throws pylon::Error on an unknown name
ModelConfig preset_config(Preset p);           // the preset's default sizes

}  // namespace pylon
