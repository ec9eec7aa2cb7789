// The model's configuration: its preset (the traits every path reads: model/preset.h) and its sizes
// and per-model options (grouped-query heads, the MLP's width, biases, a tied head: a Llama folder's
// config.json sets them; the seed and causal presets keep PyTorch's nn.MultiheadAttention model).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/rope_scaling.h"
#include "model/preset.h"

namespace pylon {

struct ModelConfig {
  Preset preset = find_preset("causal");
  int vocab = 32000;
  int dim = 2048;
  int layers = 12;
  int heads = 16;
  int kv_heads = 0;   // key/value heads; 0: heads (multi-head). Must divide heads
  int head_size = 0;  // 0: dim / heads
  int ffn_dim = 0;    // the MLP's hidden width; 0: 4 · dim
  bool qkv_bias = true, out_bias = true;  // biases on q, k, v and on the output projection
  bool tied_head = false;                 // the head is the embedding table
  float norm_eps = 1.1920929e-07f;  // torch.finfo(float32).eps, nn.RMSNorm's default
  float rope_theta = 10000.0f;      // Positions::rope only
  RopeScaling rope_scaling;         // Positions::rope only; none by default (Llama 3's from a config.json)

  // The preset's default sizes and options (DESIGN §1).
  static ModelConfig with_preset(std::string_view name);
  // Sets the preset and the options it gives a default to (biases).
  void set_preset(const Preset& p);

  int kv_head_count() const { return kv_heads ? kv_heads : heads; }
  int head_dim() const { return head_size ? head_size : dim / heads; }
  int ffn_hidden() const { return ffn_dim ? ffn_dim : 4 * dim; }
  int q_dim() const { return heads * head_dim(); }
  int kv_dim() const { return kv_head_count() * head_dim(); }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }  // the attention inputs of a token
  int64_t num_params() const;
  // Throws pylon::Error naming the bad field.
  void validate() const;
  // "causal V=32000 D=2048 L=12 H=16": for messages.
  std::string describe() const;

  // Round trip through string metadata (safetensors __metadata__).
  std::map<std::string, std::string> to_metadata() const;
  // Fields absent from `meta` keep their current values (a preset key sets that preset's defaults
  // first).
  void update_from_metadata(const std::map<std::string, std::string>& meta);
};

}  // namespace pylon
