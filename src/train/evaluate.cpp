#include "train/evaluate.h"

#include <vector>

#include "train/data_loader.h"

namespace pylon {

EvalResult evaluate(MiniLLM& model, const float* params, const TokenFile& data, int batch, int seq,
                    int64_t steps) {
  DataLoader loader(data, batch, seq);
  const size_t n = static_cast<size_t>(batch) * seq;
  std::vector<int32_t> inputs(n), targets(n);
  double sum = 0;
  for (int64_t s = 0; s < steps; ++s) {
    loader.load(s, inputs.data(), targets.data());
    sum += model.forward(params, inputs.data(), targets.data(), batch, seq);
  }
  return {steps > 0 ? sum / static_cast<double>(steps) : 0.0, steps * static_cast<int64_t>(n)};
}

}  // namespace pylon
