// Softmax cross-entropy per row with integer targets.
#include <algorithm>
#include <cmath>

#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void cross_entropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N,
                           int V) {
  PYLON_RANGE_SHAPES("op", "cross_entropy_forward", {N, V});
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<int64_t>(n) * V;
    T* p = probs + static_cast<int64_t>(n) * V;
    const T mx = *std::max_element(z, z + V);
    const T target_logit = z[targets[n]];
    T sum = 0;
    for (int v = 0; v < V; ++v) sum += (p[v] = std::exp(z[v] - mx));
    for (int v = 0; v < V; ++v) p[v] /= sum;
    losses[n] = std::log(sum) + mx - target_logit;
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, int N, int V,
                            T scale) {
  PYLON_RANGE_SHAPES("op", "cross_entropy_backward", {N, V});
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* p = probs + static_cast<int64_t>(n) * V;
    T* d = dlogits + static_cast<int64_t>(n) * V;
    for (int v = 0; v < V; ++v) d[v] = scale * p[v];
    d[targets[n]] -= scale;
  }
}

#define PYLON_INSTANTIATE(T)                                                                 \
  template void cross_entropy_forward<T>(T*, T*, const T*, const int32_t*, int, int);        \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, int, int, T);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
