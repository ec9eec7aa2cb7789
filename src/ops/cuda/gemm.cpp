// Row-major GEMM through column-major cuBLASLt: a row-major (R, S) matrix with row stride ld is a
// column-major (S, R) matrix with leading dimension ld, so C (M, N) row-major is Cᵀ (N, M)
// column-major and we ask cuBLASLt for Cᵀ = op(B)ᵀ·op(A)ᵀ: its "A" is our B and its "B" our A,
// each with the same transpose flag, and its bias (per row of Cᵀ) is our per-column bias.
#include "ops/cuda/gemm.h"

#include <utility>

#include "core/error.h"
#include "ops/cuda/check.h"

namespace pylon::cuda {
namespace {

// The largest power of two (<= 256) that divides the address: what the algorithm may assume.
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  PYLON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm() : workspace_(kWorkspaceBytes) { PYLON_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Gemm(Gemm&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), workspace_(std::move(o.workspace_)), plans_(std::move(o.plans_)) {}

Gemm& Gemm::operator=(Gemm&& o) noexcept {
  std::swap(handle_, o.handle_);
  std::swap(workspace_, o.workspace_);
  std::swap(plans_, o.plans_);
  return *this;
}

const Gemm::Plan& Gemm::plan(const Key& key, const void* A, const void* B, const void* C, const void* bias) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const bool trans_a = key[0] != 0, trans_b = key[1] != 0, has_bias = key[9] != 0;
  const auto M = static_cast<uint64_t>(key[2]), N = static_cast<uint64_t>(key[3]), K = static_cast<uint64_t>(key[4]);
  const int64_t lda = key[5], ldb = key[6], ldc = key[7];
  const cudaDataType_t c_type = key[8] == static_cast<int64_t>(GemmOut::kF32) ? CUDA_R_32F : CUDA_R_16BF;
  const auto in_type = static_cast<cudaDataType_t>(key[14]);

  auto p = std::make_unique<Plan>();
  PYLON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (has_bias) {
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // its alignment guides the heuristic
  }
  // Stored shapes, column-major: our B is (N, K) if not trans_b else (K, N); our A is (K, M) if
  // not trans_a else (M, K); Cᵀ is (N, M).
  PYLON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_type, trans_b ? K : N, trans_b ? N : K, ldb));
  PYLON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_type, trans_a ? M : K, trans_a ? K : M, lda));
  PYLON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, c_type, N, M, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  PYLON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws_bytes = kWorkspaceBytes;
  const auto align_a = static_cast<uint32_t>(alignment(B)), align_b = static_cast<uint32_t>(alignment(A));
  const auto align_c = static_cast<uint32_t>(alignment(C));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // Split-K partial sums only in fp32 for bf16 outputs (what PyTorch does when reduced-precision
  // reductions are disallowed): the INPLACE and OUTPUT_TYPE schemes round partials to bf16.
  const uint32_t reductions = c_type == CUDA_R_32F ? uint32_t{CUBLASLT_REDUCTION_SCHEME_MASK}
                                                   : uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &ws_bytes, sizeof(ws_bytes));
  for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}}) {
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
  }
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PYLON_CUBLAS_CHECK(status);
  PYLON_CHECK(found > 0, "cuBLASLt has no algorithm for the GEMM M=", M, " N=", N, " K=", K,
              " trans_a=", trans_a, " trans_b=", trans_b, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void Gemm::run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const __nv_bfloat16* A, int lda,
               const __nv_bfloat16* B, int ldb, float beta, void* C, GemmOut out, int ldc,
               const __nv_bfloat16* bias, cudaStream_t stream) {
  PYLON_CHECK(!bias || out == GemmOut::kBf16, "gemm: a bias needs a bf16 output");
  run_typed(CUDA_R_16BF, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, out, ldc, bias, stream);
}

void Gemm::run(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc, const float* bias, cudaStream_t stream) {
  run_typed(CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, GemmOut::kF32, ldc, bias,
            stream);
}

void Gemm::run_typed(cudaDataType_t in_type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                     const void* A, int lda, const void* B, int ldb, float beta, void* C, GemmOut out, int ldc,
                     const void* bias, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  PYLON_CHECK(K > 0, "gemm: K must be positive, got ", K);
  PYLON_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
              "gemm: a row stride is shorter than its row (lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, static_cast<int64_t>(out), bias != nullptr,
                alignment(A), alignment(B), alignment(C), bias ? alignment(bias) : 0, static_cast<int64_t>(in_type)};
  const Plan& p = plan(key, A, B, C, bias);
  if (bias) set_attr(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  PYLON_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                    workspace_.get(), kWorkspaceBytes, stream));
}

}  // namespace pylon::cuda
