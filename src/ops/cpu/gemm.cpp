#include "ops/cpu/gemm.h"

#include <vector>

#ifdef PYLON_HAVE_BLAS
#include <cblas.h>
#endif

namespace pylon::cpu {
template <typename T>
void gemm_reference(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                int ldb, T beta, T* C, int ldc) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < M; ++i) {
    std::vector<T> row(static_cast<size_t>(N), T(0));
    for (int k = 0; k < K; ++k) {
      const T a = ta ? A[static_cast<long>(k) * lda + i] : A[static_cast<long>(i) * lda + k];
      if (tb) {
        for (int j = 0; j < N; ++j) row[j] += a * B[static_cast<long>(j) * ldb + k];
      } else {
        const T* b = B + static_cast<long>(k) * ldb;
        for (int j = 0; j < N; ++j) row[j] += a * b[j];
      }
    }
    T* c = C + static_cast<long>(i) * ldc;
    for (int j = 0; j < N; ++j) c[j] = alpha * row[j] + (beta == T(0) ? T(0) : beta * c[j]);
  }
}

template <typename T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  if (M == 0 || N == 0) return;
#ifdef PYLON_HAVE_BLAS
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == 4) {
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
#else
  gemm_reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

template void gemm_reference<float>(bool, bool, int, int, int, float, const float*, int,
                                    const float*, int, float, float*, int);
template void gemm_reference<double>(bool, bool, int, int, int, double, const double*, int,
                                     const double*, int, double, double*, int);
template void gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                           double, double*, int);

}  // namespace pylon::cpu
