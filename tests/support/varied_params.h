// Test weights: the tensors that the training init leaves constant (biases at 0, norm weights at
// 1) set to deterministic varied values, so that a path that skips one or takes the wrong one
// fails its comparison.
#pragma once

#include <cmath>

#include "model/params.h"

namespace pylon::testing {

inline void vary_constant_params(const ParamTable& t, float* flat) {
  for (const ParamInfo& p : t.params)
    for (int64_t i = 0; i < p.numel; ++i) {
      const double x = 0.37 * static_cast<double>(i) + 0.011 * static_cast<double>(p.offset);
      if (p.init == Init::zeros) flat[p.offset + i] = static_cast<float>(0.05 * std::sin(x));
      if (p.init == Init::ones) flat[p.offset + i] = static_cast<float>(1.0 + 0.2 * std::cos(x));
    }
}

}  // namespace pylon::testing
