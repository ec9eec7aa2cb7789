// Linear layer y = x·Wᵀ + b through the CPU GEMM.
#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void linear_forward(T* out, const T* in, const T* W, const NoDeduce<T>* b, int N, int I, int O) {
  PYLON_RANGE_SHAPES("op", "linear_forward", {N, I}, {O, I});
  gemm<T>(false, true, N, O, I, T(1), in, I, W, I, T(0), out, O);
  if (!b) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = out + static_cast<int64_t>(n) * O;
    for (int o = 0; o < O; ++o) row[o] += b[o];
  }
}

template <typename T>
void linear_backward(NoDeduce<T>* din, T* dW, NoDeduce<T>* db, const T* dout, const T* in,
                     const T* W, int N, int I, int O) {
  PYLON_RANGE_SHAPES("op", "linear_backward", {N, O}, {N, I}, {O, I});
  if (din) gemm<T>(false, false, N, I, O, T(1), dout, O, W, I, T(0), din, I);
  gemm<T>(true, false, O, I, N, T(1), dout, O, in, I, T(1), dW, I);
  if (!db) return;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < O; ++o) {
    T sum = 0;
    for (int n = 0; n < N; ++n) sum += dout[static_cast<int64_t>(n) * O + o];
    db[o] += sum;
  }
}

#define PYLON_INSTANTIATE(T)                                                               \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);        \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
