// Row-major GEMM for the CPU reference: C = alpha * op(A) * op(B) + beta * C, with op(X) = X or
// Xᵀ. Through CBLAS (OpenBLAS, multithreaded) when built with it, else plain loops.
#pragma once

namespace pylon::cpu {

// op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are row strides of the stored matrices.
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// The same by plain loops: the fallback without BLAS, and BLAS's test oracle.
template <typename T>
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
                    const T* B, int ldb, T beta, T* C, int ldc);

}  // namespace pylon::cpu
