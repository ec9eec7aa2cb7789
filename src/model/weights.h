// Moving MiniLLM parameters between the flat fp32 buffer and safetensors files, by PyTorch name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/params.h"

namespace pylon {

// Reads every parameter of the table (F32/F16/BF16 in the file) into flat. Throws pylon::Error
// naming the file and the tensor for a missing tensor, a wrong shape or an unexpected tensor.
void load_weights(const SafetensorsReader& file, const ParamTable& table, float* flat);

// Views of the flat buffer as named tensors (prefix + name), ready for write_safetensors.
std::vector<TensorToWrite> weight_tensors(const ParamTable& table, const float* flat,
                                          const std::string& prefix = "");

// The model configuration a weights file describes: the sizes come from the tensor shapes; the
// preset and heads from the file's pylon.* metadata when present, else from `fallback` (the
// command line). Throws pylon::Error when the file's shapes do not form a MiniLLM.
ModelConfig config_from_weights(const SafetensorsReader& file, const ModelConfig& fallback,
                                bool preset_given, bool heads_given);

}  // namespace pylon
