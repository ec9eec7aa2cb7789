// Choosing the next token from logits: greedy (temperature 0) or temperature sampling restricted
// to the top-k tokens and then to the smallest set whose probability reaches top-p.
#pragma once

#include "core/rng.h"

namespace pylon {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy (argmax)
  int top_k = 40;            // 0 = no limit
  float top_p = 0.95f;       // 1 = no limit
};

int sample_token(const float* logits, int vocab, const SamplerOptions& o, Rng& rng);

}  // namespace pylon
