// Token embedding lookup and its scatter-add backward.
#include <cstring>

#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int N, int C) {
  PYLON_RANGE_SHAPES("op", "embedding_forward", {N}, {C});
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    std::memcpy(out + static_cast<int64_t>(n) * C, table + static_cast<int64_t>(ids[n]) * C,
                sizeof(T) * static_cast<size_t>(C));
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int N, int C) {
  PYLON_RANGE_SHAPES("op", "embedding_backward", {N, C});
  // Serial: two rows may share an id. Cheap next to the GEMMs (N*C adds).
  for (int n = 0; n < N; ++n) {
    T* row = dtable + static_cast<int64_t>(ids[n]) * C;
    const T* d = dout + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += d[c];
  }
}

#define PYLON_INSTANTIATE(T)                                                          \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int, int);         \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int, int);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
