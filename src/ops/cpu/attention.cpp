// Multi-head and grouped-query attention over a packed qkv buffer, materialising the (T, T)
// probabilities per head: the plain definition that fused kernels are tested against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int B, int Tn, const HeadLayout& l, bool causal) {
  PYLON_RANGE_SHAPES("op", "attention_forward", {B, Tn, l.row()}, {l.heads, l.kv_heads});
  const int hd = l.head_dim, ld = l.row(), ldo = l.q_dim(), group = l.heads / l.kv_heads;
  const T scale = T(1) / std::sqrt(T(hd));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < l.heads; ++h) {
      const int g = h / group;  // its key/value head
      const T* q = qkv + static_cast<int64_t>(b) * Tn * ld + h * hd;
      const T* k = qkv + static_cast<int64_t>(b) * Tn * ld + l.q_dim() + g * hd;
      const T* v = k + l.kv_dim();
      T* p = probs + (static_cast<int64_t>(b) * l.heads + h) * Tn * Tn;  // (T, T)
      gemm<T>(false, true, Tn, Tn, hd, scale, q, ld, k, ld, T(0), p, Tn);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < Tn; ++i) {
        T* row = p + static_cast<int64_t>(i) * Tn;
        const int n_keys = causal ? i + 1 : Tn;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < n_keys; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
        for (int j = 0; j < n_keys; ++j) sum += (row[j] = std::exp(row[j] - mx));
        for (int j = 0; j < n_keys; ++j) row[j] /= sum;
        for (int j = n_keys; j < Tn; ++j) row[j] = T(0);
      }
      T* o = out + static_cast<int64_t>(b) * Tn * ldo + h * hd;
      gemm<T>(false, false, Tn, hd, Tn, T(1), p, Tn, v, ld, T(0), o, ldo);
    }
  }
}

template <typename T>
void attention_cached(T* out, const T* qkv, const T* k_cache, const T* v_cache, int n, int pos0, const HeadLayout& l) {
  PYLON_RANGE_SHAPES("op", "attention_cached", {n, l.row()}, {pos0, l.heads, l.kv_heads});
  const int hd = l.head_dim, group = l.heads / l.kv_heads, ld = l.row(), ldc = l.kv_dim(), ldo = l.q_dim();
  const T scale = T(1) / std::sqrt(T(hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < l.heads; ++h) {
      const int keys = pos0 + i + 1;  // causal: itself and everything before
      const int g = h / group;        // its cache head
      const T* q = qkv + static_cast<int64_t>(i) * ld + static_cast<int64_t>(h) * hd;
      std::vector<T> s(static_cast<size_t>(keys));
      T mx = -std::numeric_limits<T>::infinity();
      for (int j = 0; j < keys; ++j) {
        const T* k = k_cache + static_cast<int64_t>(j) * ldc + static_cast<int64_t>(g) * hd;
        T dot = 0;
        for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      T sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      T* o = out + static_cast<int64_t>(i) * ldo + static_cast<int64_t>(h) * hd;
      std::fill(o, o + hd, T(0));
      for (int j = 0; j < keys; ++j) {
        const T* v = v_cache + static_cast<int64_t>(j) * ldc + static_cast<int64_t>(g) * hd;
        const T p = s[j] / sum;
        for (int c = 0; c < hd; ++c) o[c] += p * v[c];
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int B, int Tn, const HeadLayout& l) {
  PYLON_RANGE_SHAPES("op", "attention_backward", {B, Tn, l.row()}, {l.heads, l.kv_heads});
  const int hd = l.head_dim, ld = l.row(), ldo = l.q_dim(), group = l.heads / l.kv_heads;
  const T scale = T(1) / std::sqrt(T(hd));
  std::vector<T> dp(static_cast<size_t>(Tn) * Tn);  // (T, T): dP, then dS in place
  for (int b = 0; b < B; ++b) {
    T* rows = dqkv + static_cast<int64_t>(b) * Tn * ld;
    for (int t = 0; t < Tn; ++t)  // dk and dv sum over the query heads of their group
      std::fill(rows + static_cast<int64_t>(t) * ld + l.q_dim(), rows + static_cast<int64_t>(t + 1) * ld, T(0));
    for (int h = 0; h < l.heads; ++h) {
      const int g = h / group;
      const int64_t qo = static_cast<int64_t>(b) * Tn * ld + h * hd;
      const int64_t ko = static_cast<int64_t>(b) * Tn * ld + l.q_dim() + g * hd, vo = ko + l.kv_dim();
      const T *q = qkv + qo, *k = qkv + ko, *v = qkv + vo;
      T *dq = dqkv + qo, *dk = dqkv + ko, *dv = dqkv + vo;
      const T* p = probs + (static_cast<int64_t>(b) * l.heads + h) * Tn * Tn;
      const T* dO = dout + static_cast<int64_t>(b) * Tn * ldo + h * hd;
      gemm<T>(false, true, Tn, Tn, hd, T(1), dO, ldo, v, ld, T(0), dp.data(), Tn);  // dP = dO·vᵀ
      gemm<T>(true, false, Tn, hd, Tn, T(1), p, Tn, dO, ldo, T(1), dv, ld);         // dv += Pᵀ·dO
#pragma omp parallel for schedule(static)
      for (int i = 0; i < Tn; ++i) {  // dS = P ∘ (dP − Σ_j P∘dP); masked entries have P = 0
        T* d = dp.data() + static_cast<int64_t>(i) * Tn;
        const T* pr = p + static_cast<int64_t>(i) * Tn;
        T dot = 0;
        for (int j = 0; j < Tn; ++j) dot += pr[j] * d[j];
        for (int j = 0; j < Tn; ++j) d[j] = pr[j] * (d[j] - dot);
      }
      gemm<T>(false, false, Tn, hd, Tn, scale, dp.data(), Tn, k, ld, T(0), dq, ld);  // dq = s·dS·k
      gemm<T>(true, false, Tn, hd, Tn, scale, dp.data(), Tn, q, ld, T(1), dk, ld);   // dk += s·dSᵀ·q
    }
  }
}

#define PYLON_INSTANTIATE(T)                                                                    \
  template void attention_forward<T>(T*, T*, const T*, int, int, const HeadLayout&, bool);      \
  template void attention_cached<T>(T*, const T*, const T*, const T*, int, int, const HeadLayout&); \
  template void attention_backward<T>(T*, const T*, const T*, const T*, int, int, const HeadLayout&);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
