// AdamW with PyTorch's semantics (torch.optim.AdamW, decoupled weight decay, bias correction).
#pragma once

#include <cstdint>

namespace pylon {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

// One update of n parameters at optimizer step t (1-based) with learning rate lr:
//   p -= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//   p -= lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  const AdamWConfig& c, int64_t t);

// sqrt(Σ g²) accumulated in double.
double sum_of_squares(const float* g, int64_t n);
void scale_in_place(float* x, int64_t n, float s);

}  // namespace pylon
