// The MiniLLM step on a CUDA stream (Act = bf16, or float for --dtype fp32), told as a story.
// Saved per block (recompute selective, the default): its input x, qkv (after RoPE), the attention
// output and log-sum-exp, x_mid and the FFN pre-activation f1; the normalised inputs and SiLU(f1)
// are recomputed in backward (cheap, and saves 12·N·D bytes a block in bf16). none keeps those too;
// full keeps only x and redoes the block up to f1.
// Backward recomputes SiLU(f1) in the kernel that forms df1, writing it over f1.
#include "model/cuda/minillm_cuda.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "ops/cuda/column_sum.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/silu.h"
#include "profile/tracer.h"

namespace pylon::cuda {
namespace {

// Carves aligned slices from one allocation: first a sizing pass (base == nullptr), then real.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    offset_ = (offset_ + 255) & ~size_t(255);
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += count * sizeof(T);
    return p;
  }
  size_t used() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// C (M, N) = op(A)·op(B) [+ bias] in the activation type: bf16 operands and C, or fp32 throughout
// (cuBLASLt in true fp32, not TF32).
void gemm_act(Gemm& g, bool ta, bool tb, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
              bf16* C, int ldc, const bf16* bias, cudaStream_t s) {
  g.run(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, GemmOut::kBf16, ldc, bias, s);
}
void gemm_act(Gemm& g, bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
              float* C, int ldc, const float* bias, cudaStream_t s) {
  g.run(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc, bias, s);
}
// A weight gradient: fp32 C (M, N) = op(A)·op(B) + beta·C.
void gemm_grad(Gemm& g, bool ta, bool tb, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
               float beta, float* C, int ldc, cudaStream_t s) {
  g.run(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, GemmOut::kF32, ldc, nullptr, s);
}
void gemm_grad(Gemm& g, bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc, cudaStream_t s) {
  g.run(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc, nullptr, s);
}

}  // namespace

template <typename Act>
MiniLLMCuda<Act>::MiniLLMCuda(const ModelConfig& config, int B, int T, Recompute recompute)
    : config_(config), table_(param_table(config)), B_(B), T_(T), N_(B * T), recompute_(recompute) {
  config_.validate();
  PYLON_CHECK(config_.preset.naming == Naming::torch, "--device cuda trains the seed and causal presets so far; the ",
              config_.preset.name, " preset trains on the CPU");
  const size_t N = N_, D = config.dim, V = config.vocab, H = config.heads;
  const int L = config.layers;
  workspace_bytes_ = std::max({embedding_backward_workspace_bytes(N_, config.dim, config.vocab),
                               rmsnorm_backward_workspace_bytes(N_, config.dim),
                               bias_backward_workspace_bytes(N_, 3 * config.dim),
                               loss_mean_workspace_bytes(N_),
                               attention_backward_workspace_bytes(B, T, config.dim, config.heads)});
  auto plan = [&](Carver& c) {
    auto take_saved = [&](Layer& l) {  // what backward reads besides x
      l.qkv = c.take<Act>(N * 3 * D), l.att = c.take<Act>(N * D);
      l.x_mid = c.take<Act>(N * D), l.f1 = c.take<Act>(N * 4 * D);
      l.rstd1 = c.take<float>(N), l.rstd2 = c.take<float>(N), l.lse = c.take<float>(B * H * T);
      if (recompute == Recompute::none)
        l.h1 = c.take<Act>(N * D), l.h2 = c.take<Act>(N * D), l.act = c.take<Act>(N * 4 * D);
    };
    Layer shared{};  // full: one block's worth, refilled by backward's recompute
    if (recompute == Recompute::full) take_saved(shared);
    layers_.assign(static_cast<size_t>(L), shared);
    for (auto& l : layers_) {
      l.x = c.take<Act>(N * D);
      if (recompute != Recompute::full) take_saved(l);
    }
    x_last_ = c.take<Act>(N * D), logits_ = c.take<Act>(N * V);
    h_ = c.take<Act>(N * D), wide_ = c.take<Act>(N * 4 * D), tmp_ = c.take<Act>(N * D);
    dx_ = c.take<Act>(N * D), dx_mid_ = c.take<Act>(N * D), dh_ = c.take<Act>(N * D);
    datt_ = c.take<Act>(N * D), dqkv_ = c.take<Act>(N * 3 * D);
    losses_ = c.take<float>(N), rstd_tmp_ = c.take<float>(N), loss_tmp_ = c.take<float>(1);
    workspace_ = c.take<char>(workspace_bytes_);
  };
  Carver sizing(nullptr);
  plan(sizing);
  arena_ = DeviceBuffer(sizing.used());
  Carver real(arena_.as<char>());
  plan(real);
}

template <typename Act>
void MiniLLMCuda<Act>::linear_forward(Act* out, const Act* in, const Act* W, const Act* b, int I,
                                 int O, cudaStream_t s) {
  gemm_act(gemm_, false, true, N_, O, I, in, I, W, I, out, O, b, s);
}

template <typename Act>
void MiniLLMCuda<Act>::linear_backward(Act* din, float* dW, float* db, const Act* dout, const Act* in,
                                  const Act* W, int I, int O, float beta, cudaStream_t s) {
  gemm_grad(gemm_, true, false, O, I, N_, dout, O, in, I, beta, dW, I, s);
  if (db) bias_backward(db, dout, N_, O, workspace_, s);
  if (din) gemm_act(gemm_, false, false, N_, I, O, dout, O, W, I, din, I, nullptr, s);
}

template <typename Act>
void MiniLLMCuda<Act>::block_forward_to_f1(const std::vector<const Act*>& P, int l, const Act* h1, cudaStream_t s) {
  const int D = config_.dim, H = config_.heads;
  const auto W = block_params(table_, P, l);
  Layer& a = layers_[l];
  linear_forward(a.qkv, h1, W[kQkv], W[kQkvBias], D, 3 * D, s);  // (N, 3D)
  if (config_.preset.positions == Positions::rope) rope_forward(a.qkv, B_, T_, D, H, config_.rope_theta, 0, s);
  attention_forward(a.att, a.lse, a.qkv, B_, T_, D, H, config_.preset.mask == Mask::causal, s);  // (N, D)
  linear_forward(tmp_, a.att, W[kOut], W[kOutBias], D, D, s);
  // x_mid = x + proj; h2 = RMSNorm2(x_mid)
  Act* h2 = a.h2 ? a.h2 : h_;
  residual_rmsnorm_forward(a.x_mid, h2, a.rstd2, a.x, tmp_, W[kNorm2], N_, D, config_.norm_eps, s);
  linear_forward(a.f1, h2, W[kFfnIn], nullptr, D, 4 * D, s);  // (N, 4D)
}

template <typename Act>
void MiniLLMCuda<Act>::forward(const std::vector<const Act*>& P, const int32_t* inputs,
                          const int32_t* targets, float* loss_sum, cudaStream_t s,
                          UnitHooks* hooks) {
  const int D = config_.dim, V = config_.vocab, L = config_.layers;
  const float eps = config_.norm_eps;
  inputs_ = inputs;
  const int64_t N = N_;
  PYLON_RANGE("model", "forward");
  if (hooks) hooks->before_forward(-1);
  embedding_forward(L ? layers_[0].x : x_last_, inputs, P[table_.embed], N_, D, s);
  // h = RMSNorm1(x_0); later blocks get it fused with the previous block's residual add.
  if (L && hooks) hooks->before_forward(0);
  if (L) {
    Layer& first = layers_[0];
    residual_rmsnorm_forward(nullptr, first.h1 ? first.h1 : h_, first.rstd1, first.x, nullptr,
                             block_params(table_, P, 0)[kNorm1], N_, D, eps, s);
  }
  for (int l = 0; l < L; ++l) {
    const auto W = block_params(table_, P, l);
    profile::Range layer_range("layer", "block_forward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    Layer& a = layers_[l];
    block_forward_to_f1(P, l, a.h1 ? a.h1 : h_, s);
    Act* act = a.act ? a.act : wide_;
    silu_forward(act, a.f1, N * 4 * D, s);
    linear_forward(tmp_, act, W[kFfnOut], nullptr, 4 * D, D, s);
    if (l + 1 < L) {  // x_{l+1} = x_mid + ffn; h = RMSNorm1_{l+1}(x_{l+1})
      if (hooks) hooks->before_forward(l + 1);
      Layer& next = layers_[l + 1];
      residual_rmsnorm_forward(next.x, next.h1 ? next.h1 : h_, next.rstd1, a.x_mid, tmp_,
                               block_params(table_, P, l + 1)[kNorm1], N_, D, eps, s);
    } else {
      residual_add(x_last_, a.x_mid, tmp_, N * D, s);
    }
    if (hooks) hooks->after_forward(l);
  }
  linear_forward(logits_, x_last_, P[table_.head_or_embed()], nullptr, D, V, s);  // (N, V)
  // Loss per position; the logits become d(loss_scale·Σ loss)/d(logits) in place.
  cross_entropy_forward_backward(losses_, logits_, targets, N_, V, loss_scale_, s);
  loss_mean(loss_tmp_, losses_, N_, workspace_, s);
  add_scalar(loss_sum, loss_tmp_, s);
  if (hooks) hooks->after_forward(-1);
}

template <typename Act>
void MiniLLMCuda<Act>::backward(const std::vector<const Act*>& P, const std::vector<float*>& G,
                           bool accumulate, cudaStream_t s, UnitHooks* hooks) {
  const int D = config_.dim, H = config_.heads, V = config_.vocab, L = config_.layers;
  const float eps = config_.norm_eps;
  const int64_t N = N_;
  const float beta = accumulate ? 1.f : 0.f;
  PYLON_RANGE("model", "backward");
  // A unit's gradients that kernels add into (embedding, norms, biases) start at zero unless
  // accumulating; the GEMM-written ones are overwritten (beta 0). Zeroed once the unit is entered.
  auto zero_added_grads = [&](int unit) {
    if (accumulate) return;
    for (size_t i = 0; i < table_.params.size(); ++i) {
      const ParamInfo& p = table_.params[i];
      const bool gemm_written = p.shape.size() == 2 && static_cast<int>(i) != table_.embed;
      if (p.unit == unit && !gemm_written)
        PYLON_CUDA_CHECK(cudaMemsetAsync(G[i], 0, static_cast<size_t>(p.numel) * sizeof(float), s));
    }
  };
  // Head: dx = dlogits·W_head; dW_head += dlogitsᵀ·x_L. (The root's kernel-added gradient, the
  // embedding's, is zeroed only after the last block: unit_hooks.h.)
  if (hooks) hooks->before_backward(-1);
  linear_backward(dx_, G[table_.head_or_embed()], nullptr, logits_, x_last_, P[table_.head_or_embed()], D, V, beta, s);
  for (int l = L - 1; l >= 0; --l) {
    const auto W = block_params(table_, P, l);
    const auto dW = block_params(table_, G, l);
    profile::Range layer_range("layer", "block_backward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    Layer& a = layers_[l];
    if (hooks) hooks->before_backward(l);
    zero_added_grads(l);
    if (recompute_ == Recompute::full && l + 1 < L) {  // the shared buffers hold block L-1 after forward
      residual_rmsnorm_forward(nullptr, h_, a.rstd1, a.x, nullptr, W[kNorm1], N_, D, eps, s);
      block_forward_to_f1(P, l, h_, s);
    }
    // FFN branch: x_out = x_mid + W2·SiLU(W1·h2), h2 = RMSNorm2(x_mid).
    // da = dx·W2 first: a recomputed SiLU(f1) is formed in the same pass as df1 and overwrites f1,
    // which backward reads for the last time there.
    gemm_act(gemm_, false, false, N_, 4 * D, D, dx_, D, W[kFfnOut], 4 * D, wide_, 4 * D, nullptr, s);  // da = dx·W2
    const Act* act = a.act ? a.act : a.f1;
    if (a.act)
      silu_backward(wide_, wide_, a.f1, N * 4 * D, s);                             // df1
    else
      silu_recompute_backward(a.f1, wide_, wide_, a.f1, N * 4 * D, s);             // SiLU(f1), df1
    gemm_grad(gemm_, true, false, D, 4 * D, N_, dx_, D, act, 4 * D, beta, dW[kFfnOut], 4 * D, s);  // dW2 += dxᵀ·a
    if (!a.h2) residual_rmsnorm_forward(nullptr, h_, rstd_tmp_, a.x_mid, nullptr, W[kNorm2], N_, D, eps, s);
    linear_backward(dh_, dW[kFfnIn], nullptr, wide_, a.h2 ? a.h2 : h_, W[kFfnIn], D, 4 * D, beta, s);
    // db_out += Σ rows of dx_mid, summed by the norm's backward as it writes dx_mid.
    rmsnorm_backward(dx_mid_, dW[kNorm2], dh_, dx_, a.x_mid, W[kNorm2], a.rstd2, N_, D, workspace_, s,
                     dW[kOutBias]);
    // Attention branch: x_mid = x + W_out·att + b_out.
    linear_backward(datt_, dW[kOut], nullptr, dx_mid_, a.att, W[kOut], D, D, beta, s);
    attention_backward(dqkv_, datt_, a.qkv, a.att, a.lse, B_, T_, D, H, config_.preset.mask == Mask::causal,
                       workspace_, workspace_bytes_, s);
    if (config_.preset.positions == Positions::rope) rope_backward(dqkv_, B_, T_, D, H, config_.rope_theta, 0, s);
    if (!a.h1) residual_rmsnorm_forward(nullptr, h_, rstd_tmp_, a.x, nullptr, W[kNorm1], N_, D, eps, s);
    linear_backward(dh_, dW[kQkv], dW[kQkvBias], dqkv_, a.h1 ? a.h1 : h_, W[kQkv], D, 3 * D, beta, s);
    rmsnorm_backward(dx_, dW[kNorm1], dh_, dx_mid_, a.x, W[kNorm1], a.rstd1, N_, D, workspace_, s);
    if (hooks) hooks->after_backward(l);
  }
  zero_added_grads(-1);
  embedding_backward(G[table_.embed], dx_, inputs_, N_, D, V, workspace_, s);
  if (hooks) hooks->after_backward(-1);
}

template class MiniLLMCuda<bf16>;
template class MiniLLMCuda<float>;

}  // namespace pylon::cuda
