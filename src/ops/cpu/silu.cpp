// SiLU activation x·sigmoid(x) and its derivative.
#include <cmath>

#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void silu_forward(T* out, const T* in, int64_t n) {
  PYLON_RANGE_SHAPES("op", "silu_forward", {n});
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] / (T(1) + std::exp(-in[i]));
}

template <typename T>
void silu_backward(T* din, const T* dout, const T* in, int64_t n) {
  PYLON_RANGE_SHAPES("op", "silu_backward", {n});
  // d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x)))
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + std::exp(-in[i]));
    din[i] = dout[i] * s * (T(1) + in[i] * (T(1) - s));
  }
}

#define PYLON_INSTANTIATE(T)                                        \
  template void silu_forward<T>(T*, const T*, int64_t);             \
  template void silu_backward<T>(T*, const T*, const T*, int64_t);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
