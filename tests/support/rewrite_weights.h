// Rewrites a safetensors file as f32 with other metadata and, optionally, one element of one tensor
// replaced (NaN, Inf): inputs for the tests that loading refuses bad weights by name.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace pylon::testing {

struct PoisonedElement {
  std::string tensor;  // "" = none
  size_t index = 0;
  float value = 0;
};

inline void rewrite_weights(const std::string& in_path, const std::string& out,
                            const std::map<std::string, std::string>& metadata, const PoisonedElement& poison = {}) {
  const SafetensorsReader in(in_path);
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (const TensorView& t : in.tensors()) data.emplace_back(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const TensorView& t = in.tensors()[i];
    std::memcpy(data[i].data(), t.data, t.nbytes);
    if (t.name == poison.tensor) data[i].at(poison.index) = poison.value;
    tensors.push_back({t.name, DType::f32, t.shape, data[i].data()});
  }
  write_safetensors(out, tensors, metadata);
}

}  // namespace pylon::testing
