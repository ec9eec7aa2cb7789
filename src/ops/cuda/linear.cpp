// Linear forward and backward as three GEMMs and a column sum.
#include "ops/cuda/linear.h"

#include "ops/cuda/column_sum.h"

namespace pylon::cuda {

void linear_forward(Gemm& gemm, __nv_bfloat16* out, const __nv_bfloat16* in, const __nv_bfloat16* W,
                    const __nv_bfloat16* b, int N, int I, int O, cudaStream_t stream) {
  gemm.run(false, true, N, O, I, 1.f, in, I, W, I, 0.f, out, GemmOut::kBf16, O, b, stream);
}

size_t linear_backward_workspace_bytes(int N, int O) { return bias_backward_workspace_bytes(N, O); }

void linear_backward(Gemm& gemm, __nv_bfloat16* din, float* dW, float dW_beta, float* db,
                     const __nv_bfloat16* dout, const __nv_bfloat16* in, const __nv_bfloat16* W, int N, int I,
                     int O, void* workspace, cudaStream_t stream) {
  if (din) gemm.run(false, false, N, I, O, 1.f, dout, O, W, I, 0.f, din, GemmOut::kBf16, I, nullptr, stream);
  gemm.run(true, false, O, I, N, 1.f, dout, O, in, I, dW_beta, dW, GemmOut::kF32, I, nullptr, stream);
  if (db) bias_backward(db, dout, N, O, workspace, stream);
}

}  // namespace pylon::cuda
