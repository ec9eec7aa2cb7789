// The AdamW op's contract (PyTorch's torch.optim.AdamW: decoupled weight decay, bias correction),
// which ops/cpu/adamw.h implements as the reference and ops/cuda/adamw.h on the GPU. One update of
// a parameter p with gradient g at optimizer step t (1-based), learning rate lr:
//   p -= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//   p -= lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
// with the bias corrections computed in fp64 and rounded to fp32.
#pragma once

namespace pylon {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

}  // namespace pylon
