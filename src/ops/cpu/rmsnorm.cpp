// RMSNorm with a learned weight: y = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps).
#include <cmath>

#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* w, int N, int C, T eps) {
  PYLON_RANGE_SHAPES("op", "rmsnorm_forward", {N, C});
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = in + static_cast<int64_t>(n) * C;
    T* y = out + static_cast<int64_t>(n) * C;
    T ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const T r = T(1) / std::sqrt(ss / T(C) + eps);
    for (int c = 0; c < C; ++c) y[c] = x[c] * r * w[c];
    rstd[n] = r;
  }
}

template <typename T>
void rmsnorm_backward(T* din, T* dw, const T* dout, const T* in, const T* w, const T* rstd, int N,
                      int C) {
  PYLON_RANGE_SHAPES("op", "rmsnorm_backward", {N, C});
  // dx = r·(w∘dy) − x·r³/C · Σ(w∘dy∘x);  dw += Σ_rows dy∘x·r.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = in + static_cast<int64_t>(n) * C;
    const T* dy = dout + static_cast<int64_t>(n) * C;
    T* dx = din + static_cast<int64_t>(n) * C;
    const T r = rstd[n];
    T dot = 0;
    for (int c = 0; c < C; ++c) dot += w[c] * dy[c] * x[c];
    const T k = dot * r * r * r / T(C);
    for (int c = 0; c < C; ++c) dx[c] = r * w[c] * dy[c] - k * x[c];
  }
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    T sum = 0;
    for (int n = 0; n < N; ++n)
      sum += dout[static_cast<int64_t>(n) * C + c] * in[static_cast<int64_t>(n) * C + c] * rstd[n];
    dw[c] += sum;
  }
}

#define PYLON_INSTANTIATE(T)                                                                 \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, T);                 \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
