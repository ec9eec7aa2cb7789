// Mean loss of a model over the first `steps` micro-batches of a token file (DESIGN §2 order).
#pragma once

#include <cstdint>

#include "io/token_file.h"
#include "model/minillm.h"

namespace pylon {

struct EvalResult {
  double loss = 0;     // mean over all positions
  int64_t tokens = 0;  // positions scored
};

EvalResult evaluate(MiniLLM& model, const float* params, const TokenFile& data, int batch, int seq,
                    int64_t steps);

}  // namespace pylon
