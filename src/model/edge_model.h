// An edge file read as a model: the file mapped and validated (io/edge_format.h), its header's
// config read into a ModelConfig, and its tensors checked to be exactly that model's parameters
// with their shapes. The header's config: {preset, vocab, dim, layers, heads, kv_heads, head_dim,
// ffn_dim, qkv_bias, out_bias, tied_head, norm_eps, rope_theta[, rope_scaling: {factor,
// low_freq_factor, high_freq_factor, original_max_positions}]} (files from before the per-model
// options have the preset's defaults for them; without rope_scaling: none).
#pragma once

#include <string>
#include <vector>

#include "io/edge_format.h"
#include "model/config.h"

namespace pylon {

struct EdgeModel {
  // Throws pylon::Error with one line naming the file (and the field or tensor) for anything that
  // is not such a model. check_data: also read every tensor once (EdgeFile::verify_tensors: the
  // checksums of version 2 files, NaN and Inf in f32/f16 data), which loading does; inspect
  // reads the header alone.
  explicit EdgeModel(const std::string& path, bool check_data = true);
  EdgeFile file;
  ModelConfig config;
};

// Writes the edge file of `config` (atomically; tokenizer: Tokenizer::to_bytes, or empty).
void write_edge_model(const std::string& path, const ModelConfig& config,
                      const std::vector<EdgeTensorToWrite>& tensors, std::string_view tokenizer);

}  // namespace pylon
