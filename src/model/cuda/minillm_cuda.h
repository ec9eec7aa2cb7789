// The model's forward and backward (every preset: MiniLLM's seed and causal, and the Llama family's
// grouped-query attention, SwiGLU, final norm and tied head) on one CUDA device with activations
// and weights of type Act: bf16
// (the training path: fp32 accumulation, fp32 parameter gradients) or float (--dtype fp32: fp32
// end to end, comparable with the CPU reference at fp32 tolerance). Weights are read through
// per-parameter device pointers, so the caller decides where they live (one flat buffer, or FSDP's
// gathered unit buffers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/head_layout.h"
#include "model/activation_arena.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"
#include "model/unit_hooks.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/runtime.h"

namespace pylon::cuda {

using bf16 = __nv_bfloat16;

template <typename Act>  // bf16 or float; both instantiated in minillm_cuda.cpp
class MiniLLMCuda {
 public:
  // Plans every activation and workspace buffer for micro-batches of (B, T) up front
  // (model/activation_arena.h); `recompute` decides which activations are kept for backward
  // (model/recompute.h).
  MiniLLMCuda(const ModelConfig& config, int B, int T, Recompute recompute = Recompute::selective);

  // The arena a model of these arguments allocates, computed without allocating (the memory plan
  // sizes a run with it: train/memory_plan.h); its bytes are that model's activation_bytes().
  // Throws pylon::Error when B·T rows overflow an int or a size overflows 64 bits.
  static ActivationArena arena(const ModelConfig& config, int B, int T, Recompute recompute);
  // The kernels' scratch for micro-batches of (B, T): the largest any backward kernel needs.
  static size_t workspace_bytes(const ModelConfig& config, int B, int T);

  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  Recompute recompute() const { return recompute_; }
  // Device bytes of every activation, gradient-of-activation and scratch buffer (one allocation).
  size_t activation_bytes() const { return arena_.bytes(); }
  size_t workspace_bytes() const { return workspace_bytes_; }  // cuBLASLt's scratch, inside the arena

  // params[i]: device pointer to parameter i of table() in Act. inputs/targets: device (B, T).
  // Enqueues on `stream`. forward: the pass alone (evaluation): writes the per-position losses and
  // adds their mean into *loss_sum. forward_backward: the training micro-step: the same, then
  // grads[i] += d(loss_scale·Σ loss)/d(parameter i) when `accumulate`, else = (the weight-gradient
  // GEMMs write with beta 0, so the caller need not zero 4 bytes per parameter first; only the small
  // kernel-accumulated gradients are zeroed here). The head and the loss run between the two passes,
  // in row chunks (ActivationArena::head_rows), each chunk's gradient formed as its loss is.
  // hooks (may be null) are called as model/unit_hooks.h says; forward_backward's head runs after
  // before_backward(−1).
  void forward(const std::vector<const Act*>& params, const int32_t* inputs, const int32_t* targets,
               float* loss_sum, cudaStream_t stream, UnitHooks* hooks = nullptr);
  void forward_backward(const std::vector<const Act*>& params, const std::vector<float*>& grads,
                        const int32_t* inputs, const int32_t* targets, float* loss_sum, bool accumulate,
                        cudaStream_t stream, UnitHooks* hooks = nullptr);
  void set_loss_scale(float s) { loss_scale_ = s; }

 private:
  struct Layer {  // saved for backward; N = B*T rows. full: all but x shared by the blocks
    // qkv (N, Q + 2KV), att (N, Q), f1 (N, F) or (N, 2F) for SwiGLU; after backward f1 holds SiLU(f1)
    // unless act is kept, or, for SwiGLU, df1.
    Act *x, *qkv, *att, *x_mid, *f1;
    float *rstd1, *rstd2, *lse;
    Act *h1 = nullptr, *h2 = nullptr, *act = nullptr;  // none only: RMSNorm1(x), RMSNorm2(x_mid), SiLU(f1)
  };
  // The head's input: the final norm's output, or x_L.
  const Act* head_input() const { return x_final_ ? x_final_ : x_last_; }
  // Embedding, blocks and final norm: up to head_input(). Calls before_forward(−1), not after_forward(−1).
  void forward_blocks(const std::vector<const Act*>& P, const int32_t* inputs, cudaStream_t s, UnitHooks* hooks);
  // Logits and loss over head_rows_ rows at a time (the logits in wide_): losses_, and their mean added
  // into *loss_sum; with dW_head also d_head_input (N, D) = dlogits·W and dW_head (V, D) =
  // beta·dW_head + dlogitsᵀ·head_input().
  void head_and_loss(const std::vector<const Act*>& P, const int32_t* targets, float* loss_sum, Act* d_head_input,
                     float* dW_head, float beta, cudaStream_t s);
  // Block l from h1 = RMSNorm1(x) (in place) to f1: qkv, attention, x_mid, rstd2 and f1 of `a`.
  void block_forward_to_f1(const std::vector<const Act*>& P, int l, const Act* h1, cudaStream_t s);
  // out (rows, O) = in·Wᵀ + b; din (rows, I) = dout·W (skipped when din is null); dW (O, I) = beta·dW +
  // doutᵀ·in; db += Σ rows of dout. bf16: cuda::linear_forward / linear_backward (ops/cuda/linear.h).
  void linear_forward(Act* out, const Act* in, const Act* W, const Act* b, int rows, int I, int O, cudaStream_t s);
  void linear_backward(Act* din, float* dW, float* db, const Act* dout, const Act* in, const Act* W, int rows, int I,
                       int O, float beta, cudaStream_t s);

  ModelConfig config_;
  ParamTable table_;
  HeadLayout heads_{};
  bool swiglu_ = false;
  int B_, T_, N_ = 0;
  int head_rows_ = 0;  // rows of a head chunk (ActivationArena::head_rows)
  Recompute recompute_;
  float loss_scale_ = 1.f;
  Gemm gemm_;
  DeviceBuffer arena_;  // every buffer below lives in it
  std::vector<Layer> layers_;
  Act *x_last_, *h_, *wide_, *tmp_, *dx_, *dx_mid_, *dh_, *datt_, *dqkv_;
  Act* x_final_ = nullptr;  // the final norm's output (N, D), where the preset has one
  float *losses_, *rstd_tmp_, *loss_tmp_;
  float* rstd_final_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_ = 0;
  const int32_t* inputs_ = nullptr;
};

}  // namespace pylon::cuda
