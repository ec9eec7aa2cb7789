// The CPU reference ops: the specification every CUDA and Vulkan kernel is tested against.
// Row-major; N = number of rows (tokens, B*T). Templated on float (training) and double
// (finite-difference checks). Backward functions ADD into parameter gradients (dW += ...) and
// OVERWRITE input gradients (dx = ...).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/head_layout.h"
#include "core/rope_scaling.h"

namespace pylon::cpu {

// out (N, C) = table[ids] with table (V, C).
template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int N, int C);
// dtable (V, C) += scatter of dout (N, C) by ids.
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int N, int C);

// NoDeduce<T>: optional pointers (nullptr allowed) that must not drive template deduction.
template <typename T>
using NoDeduce = std::type_identity_t<T>;

// out (N, O) = in (N, I) · Wᵀ + b, W (O, I), b (O) or nullptr.
template <typename T>
void linear_forward(T* out, const T* in, const T* W, const NoDeduce<T>* b, int N, int I, int O);
// din (N, I) = dout · W (skipped if din is nullptr); dW += doutᵀ · in; db += Σ_rows dout.
template <typename T>
void linear_backward(NoDeduce<T>* din, T* dW, NoDeduce<T>* db, const T* dout, const T* in,
                     const T* W, int N, int I, int O);

// out = in / sqrt(mean(in², row) + eps) * w; rstd (N) keeps 1/sqrt(...) for backward.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* w, int N, int C, T eps);
template <typename T>
void rmsnorm_backward(T* din, T* dw, const T* dout, const T* in, const T* w, const T* rstd, int N,
                      int C);

// Rotary embedding, rotate-half form, in place on the q and k thirds of qkv (B, T, 3*D):
// for head h, i < hd/2, position p = pos0 + t, angle = p * scaled_inv_freq(theta^(-2i/hd))
// (core/rope_scaling.h; unscaled by default):
//   (x_i, x_{i+hd/2}) <- (x_i cos - x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin).
template <typename T>
void rope_forward(T* qkv, int B, int Tn, const HeadLayout& l, T theta, int pos0 = 0, const RopeScaling& scaling = {});
template <typename T>
void rope_forward(T* qkv, int B, int Tn, int D, int H, T theta, int pos0 = 0) {
  rope_forward(qkv, B, Tn, HeadLayout::multi_head(D, H), theta, pos0);
}
// The inverse rotation, in place on dqkv: gradient w.r.t. the un-rotated q and k.
template <typename T>
void rope_backward(T* dqkv, int B, int Tn, const HeadLayout& l, T theta, int pos0 = 0,
                   const RopeScaling& scaling = {});
template <typename T>
void rope_backward(T* dqkv, int B, int Tn, int D, int H, T theta, int pos0 = 0) {
  rope_backward(dqkv, B, Tn, HeadLayout::multi_head(D, H), theta, pos0);
}

// Multi-head attention on qkv (B, T, 3*D) = [q | k | v], heads of hd = D/H:
// out (B, T, D) = concat_h softmax(q_h k_hᵀ / sqrt(hd) [+ causal mask]) v_h.
// probs (B, H, T, T) keeps the softmax for backward.
// The same with grouped-query heads: qkv (B, T, l.row()), out (B, T, l.q_dim()), probs (B, heads, T, T).
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int B, int Tn, const HeadLayout& l, bool causal);
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int B, int Tn, int D, int H, bool causal) {
  attention_forward(out, probs, qkv, B, Tn, HeadLayout::multi_head(D, H), causal);
}
// Decoding: n queries at positions pos0 .. pos0 + n - 1 against a KV cache, query i seeing keys
// 0 .. pos0 + i (causal). q: the first l.q_dim() of each row of qkv (n, l.row()); k_cache, v_cache
// (pos0 + n, l.kv_dim()) with rows pos0 .. already appended; out (n, l.q_dim()); scores scaled by
// 1/sqrt(head_dim); query head h reads cache head h / (heads / kv_heads).
template <typename T>
void attention_cached(T* out, const T* qkv, const T* k_cache, const T* v_cache, int n, int pos0, const HeadLayout& l);
// dqkv (B, T, 3*D) = gradient of out w.r.t. qkv, given dout (B, T, D).
// The same with grouped-query heads: dqkv (B, T, l.row()), dout (B, T, l.q_dim()); a key/value
// head's gradient sums over the query heads that read it.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int B, int Tn, const HeadLayout& l);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int B, int Tn, int D, int H) {
  attention_backward(dqkv, dout, qkv, probs, B, Tn, HeadLayout::multi_head(D, H));
}

// out = x * sigmoid(x), elementwise over n values.
template <typename T>
void silu_forward(T* out, const T* in, int64_t n);
template <typename T>
void silu_backward(T* din, const T* dout, const T* in, int64_t n);

// SwiGLU over rows of [gate | up]: out (N, F) = SiLU(gate) · up, in (N, 2F).
template <typename T>
void swiglu_forward(T* out, const T* in, int64_t N, int64_t F);
// din (N, 2F) = the gradient of out w.r.t. [gate | up], given dout (N, F).
template <typename T>
void swiglu_backward(T* din, const T* dout, const T* in, int64_t N, int64_t F);

// Cross-entropy per row: losses (N) = logsumexp(logits_row) - logits_row[target].
// probs (N, V) = softmax(logits); may alias logits (computed in place).
template <typename T>
void cross_entropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets, int N,
                           int V);
// dlogits (N, V) = scale * (probs - onehot(target)); may alias probs.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, int N, int V,
                            T scale);

}  // namespace pylon::cpu
