#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "train/data_loader.h"
#include "train/progress.h"

namespace pylon {

EvalResult evaluate(MiniLLM& model, const float* params, const TokenFile& data, int batch, int seq,
                    int64_t steps) {
  DataLoader loader(data, batch, seq);
  const size_t n = static_cast<size_t>(batch) * seq;
  std::vector<int32_t> inputs(n), targets(n);
  double sum = 0;
  ProgressLine progress("eval: micro-batches", steps, true);
  for (int64_t s = 0; s < steps; ++s) {
    progress.done(s);
    loader.load(s, inputs.data(), targets.data());
    sum += model.forward(params, inputs.data(), targets.data(), batch, seq);
  }
  return {steps > 0 ? sum / static_cast<double>(steps) : 0.0, steps * static_cast<int64_t>(n)};
}

EvalResult evaluate_rows(const RowScorer& score, int vocab, const TokenFile& data, int batch,
                         int seq, int64_t steps) {
  DataLoader loader(data, batch, seq);
  const size_t n = static_cast<size_t>(batch) * seq;
  const int V = vocab;
  std::vector<int32_t> inputs(n), targets(n);
  std::vector<float> logits(static_cast<size_t>(seq) * V);
  double sum = 0;
  ProgressLine progress("eval: micro-batches", steps, true);
  for (int64_t s = 0; s < steps; ++s) {
    progress.done(s);
    loader.load(s, inputs.data(), targets.data());
    double step_loss = 0;
    for (int b = 0; b < batch; ++b) {
      score(inputs.data() + static_cast<size_t>(b) * seq, seq, logits.data());
      for (int t = 0; t < seq; ++t) {  // cross-entropy in double: log-sum-exp minus the target's
        const float* row = logits.data() + static_cast<size_t>(t) * V;
        const float mx = *std::max_element(row, row + V);
        double z = 0;
        for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
        step_loss += std::log(z) + mx - row[targets[static_cast<size_t>(b) * seq + t]];
      }
    }
    sum += step_loss / static_cast<double>(n);
  }
  return {steps > 0 ? sum / static_cast<double>(steps) : 0.0, steps * static_cast<int64_t>(n)};
}

}  // namespace pylon
