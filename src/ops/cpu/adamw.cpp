#include "ops/cpu/adamw.h"

#include <cmath>

namespace pylon::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  const AdamWConfig& c, int64_t t) {
  const double td = static_cast<double>(t);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), td));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), td)));
  const float step_size = lr / bc1, decay = 1.f - lr * c.weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = c.beta1 * m[i] + (1.f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.f - c.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + c.eps;
    params[i] = params[i] * decay - step_size * m[i] / denom;
  }
}

double sum_of_squares(const float* g, int64_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

void scale_in_place(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace pylon::cpu
