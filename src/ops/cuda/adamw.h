// The optimizer step on the GPU: gradient-clipping coefficient and AdamW over one flat fp32 buffer
// (PyTorch's torch.optim.AdamW semantics, ops/adamw.h; identical to cpu::adamw_update).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pylon::cuda {

// coef (1) = min(1, max_norm / (sqrt(sumsq_total) + 1e-6)), or 1 when max_norm <= 0
// (torch.nn.utils.clip_grad_norm_); on the device, no synchronisation.
void clip_coefficient(float* coef /* (1) */, const float* sumsq_total /* (1) */, float max_norm,
                      cudaStream_t stream);

// Where adamw_update also sums the squares of the gradient it reads (no pass of its own for the
// grad norm): *sumsq += Σ grads² (before grad_scale), in fp64 per block and a fixed tree, so the
// value depends on n alone; workspace of grad_sumsq_workspace_bytes(n).
struct GradSumOfSquares {
  float* sumsq;  // (1), on the device
  void* workspace;
};
size_t grad_sumsq_workspace_bytes(int64_t n);

// The constants of one AdamW step (1-based `step`), computed on the host exactly as
// ops/adamw.h says (bias corrections in fp64, rounded to fp32). adamw_update reads them from
// device memory, so a captured graph replays the same kernel for every step.
struct AdamWConstants {
  float beta1, beta2, eps;
  float step_size;  // lr / (1 − β1ᵗ)
  float decay;      // 1 − lr·wd
  float bc2_sqrt;   // sqrt(1 − β2ᵗ)
};
AdamWConstants adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step);

// One AdamW step over n parameters, g = grads · (*grad_scale) when grad_scale is given:
//   p -= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//   p -= lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps);  p_bf16 = bf16(p) when given.
// norm (may be null): also add Σ grads² into norm->sumsq, from the same loads.
void adamw_update(float* params /* (n) */, float* m /* (n) */, float* v /* (n) */,
                  const float* grads /* (n) */, __nv_bfloat16* params_bf16 /* (n) or nullptr */,
                  int64_t n, const AdamWConstants* constants /* (1), on the device */,
                  const float* grad_scale /* (1) or nullptr */, cudaStream_t stream,
                  const GradSumOfSquares* norm = nullptr);

}  // namespace pylon::cuda
