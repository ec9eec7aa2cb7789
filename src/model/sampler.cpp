#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace pylon {

int sample_token(const float* logits, int vocab, const SamplerOptions& o, Rng& rng) {
  PYLON_CHECK(o.temperature >= 0, "temperature must be >= 0");
  PYLON_CHECK(o.top_p > 0 && o.top_p <= 1, "top-p must be in (0, 1]");
  if (o.temperature == 0.f) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  order.resize(static_cast<size_t>(k));
  std::vector<double> p(order.size());
  const double mx = logits[order[0]];
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i)
    sum += (p[i] = std::exp((logits[order[i]] - mx) / o.temperature));
  // Nucleus: keep the shortest prefix (by probability) whose mass reaches top_p.
  size_t keep = 0;
  double mass = 0;
  while (keep < p.size() && mass < o.top_p * sum) mass += p[keep++];
  const double r = static_cast<double>(rng.uniform()) * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i)
    if ((acc += p[i]) > r) return order[i];
  return order[keep - 1];
}

}  // namespace pylon
