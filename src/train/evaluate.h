// Mean loss of a model over the first `steps` micro-batches of a token file (DESIGN §2 order).
#pragma once

#include <cstdint>
#include <functional>

#include "io/token_file.h"
#include "model/minillm.h"

namespace pylon {

struct EvalResult {
  double loss = 0;     // mean over all positions
  int64_t tokens = 0;  // positions scored
};

EvalResult evaluate(MiniLLM& model, const float* params, const TokenFile& data, int batch, int seq,
                    int64_t steps);

// The same mean for a model that scores one row at a time from position 0 (the decoders: CPU
// over an edge file, Vulkan): score(tokens (seq), logits (seq, vocab)); cross-entropy in double.
using RowScorer = std::function<void(const int32_t* tokens, int n, float* logits)>;
EvalResult evaluate_rows(const RowScorer& score, int vocab, const TokenFile& data, int batch,
                         int seq, int64_t steps);

}  // namespace pylon
