// Moving MiniLLM parameters between the flat fp32 buffer and safetensors files, by PyTorch name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/params.h"

namespace pylon {

// A piece's shape in files: (rows, the parameter's columns), or (rows) for a 1-D parameter.
std::vector<int64_t> piece_shape(const ParamInfo& p, const ParamPiece& piece);
// The flat elements [begin, end) of parameter p (row-major, its pieces stacked along dim 0) from
// the file's tensors that p.pieces name, into out[0, end - begin); begin == end only checks that
// they are there with their shapes. Throws pylon::Error naming the file and the tensor.
void read_param_range(const SafetensorsReader& file, const ParamInfo& p, int64_t begin, int64_t end, float* out);
// Throws pylon::Error naming the file and the tensor when it holds one that is no piece of the
// table's parameters.
void check_no_unexpected_tensors(const SafetensorsReader& file, const ParamTable& table);

// Reads every parameter of the table (F32/F16/BF16 in the file) into flat. Throws pylon::Error
// naming the file and the tensor for a missing tensor, a wrong shape or an unexpected tensor.
void load_weights(const SafetensorsReader& file, const ParamTable& table, float* flat);

// Views of the flat buffer as named tensors (prefix + each piece's name), ready for write_safetensors.
std::vector<TensorToWrite> weight_tensors(const ParamTable& table, const float* flat,
                                          const std::string& prefix = "");

// The model configuration a weights file describes: all of it from the file's pylon.* metadata
// when Pylon wrote it (a flag given on the command line must agree); else, for a PyTorch state dict
// of the nn.MultiheadAttention presets, the sizes from the tensor shapes and the preset and heads
// from `fallback` (the command line). Throws pylon::Error when they do not form a model.
ModelConfig config_from_weights(const SafetensorsReader& file, const ModelConfig& fallback,
                                bool preset_given, bool heads_given);

}  // namespace pylon
