// Rotary position embedding (rotate-half form) on the q and k thirds of a packed qkv buffer.
#include <cmath>

#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon::cpu {
namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward: the transpose of a rotation).
template <typename T>
void rope_rotate(T* qkv, int B, int Tn, const HeadLayout& l, T theta, int pos0, const RopeScaling& scaling, T sign) {
  const int hd = l.head_dim, half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* row = qkv + (static_cast<int64_t>(b) * Tn + t) * l.row();
      for (int i = 0; i < half; ++i) {
        const T inv_freq = scaled_inv_freq(std::pow(theta, -T(2 * i) / T(hd)), scaling);
        const T angle = T(pos0 + t) * inv_freq;
        const T c = std::cos(angle), s = sign * std::sin(angle);
        for (int part = 0; part < 2; ++part) {  // q's heads, then k's
          const int heads = part == 0 ? l.heads : l.kv_heads;
          for (int h = 0; h < heads; ++h) {
            T* x = row + part * l.q_dim() + h * hd;
            const T x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c - x2 * s;
            x[i + half] = x2 * c + x1 * s;
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, int B, int Tn, const HeadLayout& l, T theta, int pos0, const RopeScaling& scaling) {
  PYLON_RANGE_SHAPES("op", "rope_forward", {B, Tn, l.row()}, {l.heads, l.kv_heads});
  rope_rotate(qkv, B, Tn, l, theta, pos0, scaling, T(1));
}

template <typename T>
void rope_backward(T* dqkv, int B, int Tn, const HeadLayout& l, T theta, int pos0, const RopeScaling& scaling) {
  PYLON_RANGE_SHAPES("op", "rope_backward", {B, Tn, l.row()}, {l.heads, l.kv_heads});
  rope_rotate(dqkv, B, Tn, l, theta, pos0, scaling, T(-1));
}

#define PYLON_INSTANTIATE(T)                                      \
  template void rope_forward<T>(T*, int, int, const HeadLayout&, T, int, const RopeScaling&);  \
  template void rope_backward<T>(T*, int, int, const HeadLayout&, T, int, const RopeScaling&);
PYLON_INSTANTIATE(float)
PYLON_INSTANTIATE(double)

}  // namespace pylon::cpu
