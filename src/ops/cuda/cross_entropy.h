// Softmax cross-entropy on bf16 logits, fused with its backward: the loss per row in fp32 and the
// logits overwritten by their gradient; and the deterministic mean loss.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pylon::cuda {

// losses (N) = logsumexp(z_row) − z_row[target];  logits_inout (N, V) <- scale·(softmax(z_row) −
// onehot(target)). Targets in [0, V). Statistics in fp32; no fp32 copy of the logits is made.
void cross_entropy_forward_backward(float* losses /* (N) */, __nv_bfloat16* logits_inout /* (N, V) */,
                                    const int32_t* targets /* (N) */, int N, int V, float scale,
                                    cudaStream_t stream);
// The same on fp32 logits (the --dtype fp32 model).
void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                    float scale, cudaStream_t stream);

// Bytes of workspace loss_mean needs.
size_t loss_mean_workspace_bytes(int N);
// out_scalar (1) = Σ losses / N, in a fixed order; stays on the device.
void loss_mean(float* out_scalar /* (1) */, const float* losses /* (N) */, int N, void* workspace,
               cudaStream_t stream);

}  // namespace pylon::cuda
