// The fp32 attention's host API (attention_fp32.h): argument checks, then the row-per-warp kernels of
// attention_rowwise.cu at Elem = float.
#include "ops/cuda/attention_fp32.h"

#include "ops/cuda/attention.h"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/check.h"

namespace pylon::cuda {

// float2 accesses to the rows: 8-byte aligned pointers.
constexpr size_t kFp32Alignment = 8;

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, const HeadLayout& heads, bool causal,
                       cudaStream_t stream) {
  check_attention_args("attention_forward (fp32)", B, T, heads, kFp32Alignment, {out, lse, qkv});
  launch_attention_rowwise_forward(out, lse, qkv, B, T, qkv_layout(heads), causal, stream);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, const HeadLayout& heads, bool causal, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  check_attention_args("attention_backward (fp32)", B, T, heads, kFp32Alignment,
                       {dqkv, dout, qkv, out, lse, workspace});
  PYLON_CHECK(workspace_bytes >= attention_backward_workspace_bytes(B, T, heads),
              "attention_backward (fp32): workspace of ", workspace_bytes, " bytes, needs ",
              attention_backward_workspace_bytes(B, T, heads));
  auto* dsum = static_cast<float*>(workspace);  // (B, heads, T), written by the dq pass, read by the dk/dv pass
  launch_attention_rowwise_backward(dqkv, dsum, dout, qkv, out, lse, B, T, qkv_layout(heads), causal, stream);
}

}  // namespace pylon::cuda
