// The step on a CUDA stream (Act = bf16, or float for --dtype fp32), told as a story: embed, L
// pre-norm blocks (attention, then the MLP), [final norm,] then head and loss in row chunks, each
// chunk's gradients formed as its loss is (so only one chunk's logits exist at a time); then the
// gradients in reverse.
// The preset's traits choose the mask, the positions and the MLP (SiLU, or SwiGLU over [gate | up]);
// grouped-query heads, biases and a tied head come from the config, as in model/minillm.cpp.
// Saved per block (recompute selective, the default): its input x, qkv (after RoPE), the attention
// output and log-sum-exp, x_mid and the MLP pre-activation f1; the normalised inputs and act(f1)
// are recomputed in backward (cheap, and saves 12·N·D bytes a block in bf16). none keeps those too
// (SwiGLU's act excepted: recomputed); full keeps only x and redoes the block up to f1.
// Backward recomputes act(f1) in the kernel that forms df1 (SiLU: over f1; SwiGLU: over d(act), with
// df1 over f1).
#include "model/cuda/minillm_cuda.h"

#include <algorithm>
#include <climits>
#include <type_traits>

#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "ops/cuda/column_sum.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/linear.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/silu.h"
#include "profile/tracer.h"

namespace pylon::cuda {
namespace {

// A buffer of the arena at `offset` (ActivationArena::kNone: none).
template <typename P>
P* at(const DeviceBuffer& arena, int64_t offset) {
  return offset == ActivationArena::kNone ? nullptr : reinterpret_cast<P*>(arena.as<char>() + offset);
}

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
size_t MiniLLMCuda<Act>::workspace_bytes(const ModelConfig& config, int B, int T) {
  PYLON_CHECK(int64_t{B} * T <= INT_MAX, "--batch ", B, " x --seq ", T, " rows exceed the CUDA step's 32-bit row index");
  const int N = B * T;
  const HeadLayout heads{config.heads, config.kv_head_count(), config.head_dim()};
  return std::max({embedding_backward_workspace_bytes(N, config.dim, config.vocab),
                   rmsnorm_backward_workspace_bytes(N, config.dim), bias_backward_workspace_bytes(N, heads.row()),
                   loss_mean_workspace_bytes(N), attention_backward_workspace_bytes(B, T, heads)});
}

template <typename Act>
ActivationArena MiniLLMCuda<Act>::arena(const ModelConfig& config, int B, int T, Recompute recompute) {
  return activation_arena(config, B, T, recompute, sizeof(Act), static_cast<int64_t>(workspace_bytes(config, B, T)));
}

template <typename Act>
MiniLLMCuda<Act>::MiniLLMCuda(const ModelConfig& config, int B, int T, Recompute recompute)
    : config_(config), table_(param_table(config)), B_(B), T_(T), recompute_(recompute) {
  config_.validate();
  const ActivationArena a = arena(config_, B, T, recompute);  // checks that B·T rows fit an int
  N_ = B * T;
  heads_ = {config_.heads, config_.kv_head_count(), config_.head_dim()};
  swiglu_ = config_.preset.ffn == Ffn::swiglu;
  workspace_bytes_ = workspace_bytes(config_, B, T);
  arena_ = DeviceBuffer(static_cast<size_t>(a.bytes));
  layers_.resize(static_cast<size_t>(config.layers));
  for (int l = 0; l < config.layers; ++l) {
    Layer& y = layers_[static_cast<size_t>(l)];
    const ActivationArena::Saved s = a.saved_of(l);
    y.x = at<Act>(arena_, a.x_of(l));
    y.qkv = at<Act>(arena_, s.qkv), y.att = at<Act>(arena_, s.att), y.x_mid = at<Act>(arena_, s.x_mid);
    y.f1 = at<Act>(arena_, s.f1);
    y.rstd1 = at<float>(arena_, s.rstd1), y.rstd2 = at<float>(arena_, s.rstd2), y.lse = at<float>(arena_, s.lse);
    y.h1 = at<Act>(arena_, s.h1), y.h2 = at<Act>(arena_, s.h2), y.act = at<Act>(arena_, s.act);
  }
  x_last_ = at<Act>(arena_, a.x_last);
  head_rows_ = static_cast<int>(a.head_rows);
  x_final_ = at<Act>(arena_, a.x_final), rstd_final_ = at<float>(arena_, a.rstd_final);
  h_ = at<Act>(arena_, a.h), wide_ = at<Act>(arena_, a.wide), tmp_ = at<Act>(arena_, a.tmp);
  dx_ = at<Act>(arena_, a.dx), dx_mid_ = at<Act>(arena_, a.dx_mid), dh_ = at<Act>(arena_, a.dh);
  datt_ = at<Act>(arena_, a.datt), dqkv_ = at<Act>(arena_, a.dqkv);
  losses_ = at<float>(arena_, a.losses), rstd_tmp_ = at<float>(arena_, a.rstd_tmp);
  loss_tmp_ = at<float>(arena_, a.loss_tmp);
  workspace_ = at<char>(arena_, a.workspace);
}

template <typename Act>
void MiniLLMCuda<Act>::linear_forward(Act* out, const Act* in, const Act* W, const Act* b, int rows, int I, int O,
                                      cudaStream_t s) {
  if constexpr (std::is_same_v<Act, bf16>) cuda::linear_forward(gemm_, out, in, W, b, rows, I, O, s);
  else gemm_act(gemm_, false, true, rows, O, I, in, I, W, I, out, O, b, s);
}

template <typename Act>
void MiniLLMCuda<Act>::linear_backward(Act* din, float* dW, float* db, const Act* dout, const Act* in, const Act* W,
                                       int rows, int I, int O, float beta, cudaStream_t s) {
  if constexpr (std::is_same_v<Act, bf16>) {
    cuda::linear_backward(gemm_, din, dW, beta, db, dout, in, W, rows, I, O, workspace_, s);
  } else {
    gemm_grad(gemm_, true, false, O, I, rows, dout, O, in, I, beta, dW, I, s);
    if (db) bias_backward(db, dout, rows, O, workspace_, s);
    if (din) gemm_act(gemm_, false, false, rows, I, O, dout, O, W, I, din, I, nullptr, s);
  }
}

template <typename Act>
void MiniLLMCuda<Act>::block_forward_to_f1(const std::vector<const Act*>& P, int l, const Act* h1, cudaStream_t s) {
  const int D = config_.dim, Q = heads_.q_dim(), QKV = heads_.row();
  const int FIn = swiglu_ ? 2 * config_.ffn_hidden() : config_.ffn_hidden();
  const auto W = block_params(table_, P, l);
  Layer& a = layers_[l];
  linear_forward(a.qkv, h1, W[kQkv], W[kQkvBias], N_, D, QKV, s);  // (N, Q + 2KV)
  if (config_.preset.positions == Positions::rope)
    rope_forward(a.qkv, B_, T_, heads_, config_.rope_theta, config_.rope_scaling, 0, s);
  attention_forward(a.att, a.lse, a.qkv, B_, T_, heads_, config_.preset.mask == Mask::causal, s);  // (N, Q)
  linear_forward(tmp_, a.att, W[kOut], W[kOutBias], N_, Q, D, s);
  // x_mid = x + proj; h2 = RMSNorm2(x_mid)
  Act* h2 = a.h2 ? a.h2 : h_;
  residual_rmsnorm_forward(a.x_mid, h2, a.rstd2, a.x, tmp_, W[kNorm2], N_, D, config_.norm_eps, s);
  linear_forward(a.f1, h2, W[kFfnIn], nullptr, N_, D, FIn, s);  // (N, F) or (N, 2F) = [gate | up]
}

template <typename Act>
void MiniLLMCuda<Act>::forward_blocks(const std::vector<const Act*>& P, const int32_t* inputs, cudaStream_t s,
                                      UnitHooks* hooks) {
  const int D = config_.dim, L = config_.layers, F = config_.ffn_hidden();
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
    if (swiglu_)
      swiglu_forward(act, a.f1, N, F, s);
    else
      silu_forward(act, a.f1, N * F, s);
    linear_forward(tmp_, act, W[kFfnOut], nullptr, N_, F, D, s);
    if (l + 1 < L) {  // x_{l+1} = x_mid + ffn; h = RMSNorm1_{l+1}(x_{l+1})
      if (hooks) hooks->before_forward(l + 1);
      Layer& next = layers_[l + 1];
      residual_rmsnorm_forward(next.x, next.h1 ? next.h1 : h_, next.rstd1, a.x_mid, tmp_,
                               block_params(table_, P, l + 1)[kNorm1], N_, D, eps, s);
    } else if (config_.preset.final_norm) {  // x_L = x_mid + ffn; x_final = RMSNorm_final(x_L)
      residual_rmsnorm_forward(x_last_, x_final_, rstd_final_, a.x_mid, tmp_, P[table_.final_norm], N_, D, eps, s);
    } else {
      residual_add(x_last_, a.x_mid, tmp_, N * D, s);
    }
    if (hooks) hooks->after_forward(l);
  }
  if (L == 0 && config_.preset.final_norm)
    residual_rmsnorm_forward(nullptr, x_final_, rstd_final_, x_last_, nullptr, P[table_.final_norm], N_, D, eps, s);
}

template <typename Act>
void MiniLLMCuda<Act>::head_and_loss(const std::vector<const Act*>& P, const int32_t* targets, float* loss_sum,
                                     Act* d_head_input, float* dW_head, float beta, cudaStream_t s) {
  const int D = config_.dim, V = config_.vocab;
  const Act* W = P[table_.head_or_embed()];
  const Act* x = head_input();
  PYLON_RANGE("model", "head");
  for (int r = 0; r < N_; r += head_rows_) {
    const int n = std::min(head_rows_, N_ - r);
    const int64_t at = static_cast<int64_t>(r) * D;
    // The chunk's logits (n, V) in wide_; the loss per row, and in place d(loss_scale·Σ loss)/d(logits).
    linear_forward(wide_, x + at, W, nullptr, n, D, V, s);
    cross_entropy_forward_backward(losses_ + r, wide_, targets + r, n, V, loss_scale_, s);
    if (!dW_head) continue;
    // d(head input) = dlogits·W; dW += dlogitsᵀ·(head input), the first chunk with the caller's beta.
    linear_backward(d_head_input + at, dW_head, nullptr, wide_, x + at, W, n, D, V, r == 0 ? beta : 1.f, s);
  }
  loss_mean(loss_tmp_, losses_, N_, workspace_, s);
  add_scalar(loss_sum, loss_tmp_, s);
}

template <typename Act>
void MiniLLMCuda<Act>::forward(const std::vector<const Act*>& P, const int32_t* inputs, const int32_t* targets,
                               float* loss_sum, cudaStream_t s, UnitHooks* hooks) {
  forward_blocks(P, inputs, s, hooks);
  head_and_loss(P, targets, loss_sum, nullptr, nullptr, 0.f, s);
  if (hooks) hooks->after_forward(-1);
}

template <typename Act>
void MiniLLMCuda<Act>::forward_backward(const std::vector<const Act*>& P, const std::vector<float*>& G,
                                        const int32_t* inputs, const int32_t* targets, float* loss_sum,
                                        bool accumulate, cudaStream_t s, UnitHooks* hooks) {
  const int D = config_.dim, V = config_.vocab, L = config_.layers, Q = heads_.q_dim(), QKV = heads_.row();
  const int F = config_.ffn_hidden(), FIn = swiglu_ ? 2 * F : F;
  const float eps = config_.norm_eps;
  const int64_t N = N_;
  const float beta = accumulate ? 1.f : 0.f;
  const bool tied = table_.head < 0;
  forward_blocks(P, inputs, s, hooks);
  if (hooks) hooks->after_forward(-1);
  PYLON_RANGE("model", "backward");
  // The gradients that kernels add into (the embedding, norms, biases) start at zero unless
  // accumulating; the GEMM-written ones are overwritten (beta 0). Zeroed once the unit is entered;
  // an untied head's embedding only after the last block (unit_hooks.h), the root's others (a final
  // norm) first. A tied head's GEMM writes the embedding's first.
  auto zero_added_grads = [&](int unit, bool embedding) {
    if (accumulate) return;
    for (size_t i = 0; i < table_.params.size(); ++i) {
      const ParamInfo& p = table_.params[i];
      const bool is_embedding = static_cast<int>(i) == table_.embed;
      const bool gemm_written = p.shape.size() == 2 && !is_embedding;
      if (p.unit == unit && !gemm_written && is_embedding == embedding)
        PYLON_CUDA_CHECK(cudaMemsetAsync(G[i], 0, static_cast<size_t>(p.numel) * sizeof(float), s));
    }
  };
  // The head and the loss, chunk by chunk: d(head input), and dW_head (a tied head's into the
  // embedding's gradient, which the lookups add to at the end); then through the final norm.
  if (hooks) hooks->before_backward(-1);
  zero_added_grads(-1, false);
  Act* d_head_input = config_.preset.final_norm ? dh_ : dx_;
  head_and_loss(P, targets, loss_sum, d_head_input, G[table_.head_or_embed()], beta, s);
  if (config_.preset.final_norm)
    rmsnorm_backward(dx_, G[table_.final_norm], dh_, nullptr, x_last_, P[table_.final_norm], rstd_final_, N_, D,
                     workspace_, s);
  for (int l = L - 1; l >= 0; --l) {
    profile::Range layer_range("layer", "block_backward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    Layer& a = layers_[l];
    if (hooks) hooks->before_backward(l);
    // Read after the hook: it places the unit's weights and gradient slots (unit_hooks.h).
    const auto W = block_params(table_, P, l);
    const auto dW = block_params(table_, G, l);
    zero_added_grads(l, false);
    if (recompute_ == Recompute::full && l + 1 < L) {  // the shared buffers hold block L-1 after forward
      residual_rmsnorm_forward(nullptr, h_, a.rstd1, a.x, nullptr, W[kNorm1], N_, D, eps, s);
      block_forward_to_f1(P, l, h_, s);
    }
    // MLP branch: x_out = x_mid + W2·act(W1·h2), h2 = RMSNorm2(x_mid).
    // da = dx·W2 first: a recomputed act(f1) is formed in the same pass as df1 and overwrites f1
    // (SiLU) or da (SwiGLU, df1 then over f1), which backward reads for the last time there.
    gemm_act(gemm_, false, false, N_, F, D, dx_, D, W[kFfnOut], F, wide_, F, nullptr, s);  // da = dx·W2
    const Act* act = a.act ? a.act : a.f1;
    if (swiglu_) {
      swiglu_backward(a.f1, wide_, wide_, a.f1, N, F, s);  // df1 over f1, act over da
      act = wide_;
    } else if (a.act) {
      silu_backward(wide_, wide_, a.f1, N * F, s);  // df1
    } else {
      silu_recompute_backward(a.f1, wide_, wide_, a.f1, N * F, s);  // SiLU(f1), df1
    }
    const Act* df1 = swiglu_ ? a.f1 : wide_;
    gemm_grad(gemm_, true, false, D, F, N_, dx_, D, act, F, beta, dW[kFfnOut], F, s);  // dW2 += dxᵀ·a
    if (!a.h2) residual_rmsnorm_forward(nullptr, h_, rstd_tmp_, a.x_mid, nullptr, W[kNorm2], N_, D, eps, s);
    linear_backward(dh_, dW[kFfnIn], nullptr, df1, a.h2 ? a.h2 : h_, W[kFfnIn], N_, D, FIn, beta, s);
    // db_out += Σ rows of dx_mid, summed by the norm's backward as it writes dx_mid.
    rmsnorm_backward(dx_mid_, dW[kNorm2], dh_, dx_, a.x_mid, W[kNorm2], a.rstd2, N_, D, workspace_, s,
                     dW[kOutBias]);
    // Attention branch: x_mid = x + W_out·att [+ b_out].
    linear_backward(datt_, dW[kOut], nullptr, dx_mid_, a.att, W[kOut], N_, Q, D, beta, s);
    attention_backward(dqkv_, datt_, a.qkv, a.att, a.lse, B_, T_, heads_, config_.preset.mask == Mask::causal,
                       workspace_, workspace_bytes_, s);
    if (config_.preset.positions == Positions::rope)
      rope_backward(dqkv_, B_, T_, heads_, config_.rope_theta, config_.rope_scaling, 0, s);
    if (!a.h1) residual_rmsnorm_forward(nullptr, h_, rstd_tmp_, a.x, nullptr, W[kNorm1], N_, D, eps, s);
    linear_backward(dh_, dW[kQkv], dW[kQkvBias], dqkv_, a.h1 ? a.h1 : h_, W[kQkv], N_, D, QKV, beta, s);
    rmsnorm_backward(dx_, dW[kNorm1], dh_, dx_mid_, a.x, W[kNorm1], a.rstd1, N_, D, workspace_, s);
    if (hooks) hooks->after_backward(l);
  }
  if (!tied) zero_added_grads(-1, true);
  embedding_backward(G[table_.embed], dx_, inputs_, N_, D, V, workspace_, s);
  if (hooks) hooks->after_backward(-1);
}

template class MiniLLMCuda<bf16>;
template class MiniLLMCuda<float>;

}  // namespace pylon::cuda
