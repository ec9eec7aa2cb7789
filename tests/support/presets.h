// The presets each path runs so far, for the tests that loop over presets: every path runs the
// nn.MultiheadAttention presets (seed, causal); the llama preset trains and evaluates on the CPU
// (model/minillm.h), while the decoders and the CUDA step refuse it with a line saying so.
#pragma once

#include <vector>

#include "model/preset.h"

namespace pylon::testing {

inline std::vector<Preset> multi_head_presets() {
  std::vector<Preset> out;
  for (const Preset& p : presets())
    if (p.naming == Naming::torch) out.push_back(p);
  return out;
}

}  // namespace pylon::testing
