// SiLU activation x·sigmoid(x), SwiGLU (SiLU of the gate times the up projection), and their
// derivatives.
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

template <typename T>
void swiglu_forward(T* out, const T* in, int64_t N, int64_t F) {
  PYLON_RANGE_SHAPES("op", "swiglu_forward", {N, 2 * F});
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const T g = in[r * 2 * F + c], u = in[r * 2 * F + F + c];
      out[r * F + c] = g / (T(1) + std::exp(-g)) * u;
    }
}

template <typename T>
void swiglu_backward(T* din, const T* dout, const T* in, int64_t N, int64_t F) {
  PYLON_RANGE_SHAPES("op", "swiglu_backward", {N, 2 * F});
  // d gate = dout · up · σ(g)(1 + g(1 − σ(g))), d up = dout · g σ(g)
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const T g = in[r * 2 * F + c], u = in[r * 2 * F + F + c], d = dout[r * F + c];
      const T s = T(1) / (T(1) + std::exp(-g));
      din[r * 2 * F + c] = d * u * s * (T(1) + g * (T(1) - s));
      din[r * 2 * F + F + c] = d * g * s;
    }
}

#define PYLON_INSTANTIATE(T)                                              \
  template void silu_forward<T>(T*, const T*, int64_t);                   \
  template void silu_backward<T>(T*, const T*, const T*, int64_t);        \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);        \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
