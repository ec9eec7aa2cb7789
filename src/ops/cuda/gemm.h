// cuBLASLt GEMM with the row-major semantics of cpu::gemm: C (M, N) = alpha·op(A)·op(B) + beta·C,
// bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 C, optional bf16 bias per
// column of C (the BIAS epilogue); or fp32 operands, C and bias throughout. Descriptors and the heuristic's algorithm are cached per shape.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <map>
#include <memory>

#include "ops/cuda/runtime.h"

namespace pylon::cuda {

enum class GemmOut { kBf16, kF32 };

// Owns a cuBLASLt handle and a 32 MiB workspace. Calls run in stream order; the workspace is
// shared, so use one Gemm per stream when streams run concurrently. Not thread-safe.
class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  Gemm();
  ~Gemm();
  Gemm(Gemm&&) noexcept;
  Gemm& operator=(Gemm&&) noexcept;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are the row strides (elements) of the
  // stored matrices, as in cpu::gemm. C's dtype is `out`; bias (N) only with GemmOut::kBf16.
  // With a bf16 C and beta != 0, cuBLASLt rounds alpha·op(A)·op(B) to bf16 before adding beta·C
  // (seen on the H200 with every algorithm its heuristic offered): accumulate into an fp32 C where
  // that matters (weight gradients).
  void run(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
           const __nv_bfloat16* A /* (M, K) or (K, M) if trans_a */, int lda,
           const __nv_bfloat16* B /* (K, N) or (N, K) if trans_b */, int ldb, float beta,
           void* C /* (M, N) */, GemmOut out, int ldc, const __nv_bfloat16* bias /* (N) or nullptr */,
           cudaStream_t stream);
  // The same with fp32 operands, C and bias (the --dtype fp32 model). Computed with
  // CUBLAS_COMPUTE_32F on fp32 inputs: true fp32 products and sums, not TF32 (which would be
  // CUBLAS_COMPUTE_32F_FAST_TF32 and round the operands to 10-bit mantissas).
  void run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc, const float* bias /* (N) or nullptr */,
           cudaStream_t stream);

 private:
  struct Plan;  // descriptors and algorithm for one shape
  // trans_a, trans_b, M, N, K, lda, ldb, ldc, out, has_bias, alignments of A, B, C, bias, operand type.
  using Key = std::array<int64_t, 15>;
  void run_typed(cudaDataType_t in_type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                 const void* A, int lda, const void* B, int ldb, float beta, void* C, GemmOut out, int ldc,
                 const void* bias, cudaStream_t stream);
  const Plan& plan(const Key& key, const void* A, const void* B, const void* C, const void* bias);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace pylon::cuda
