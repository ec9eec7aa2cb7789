// The training loop on one CUDA device: bf16 compute, fp32 master weights, AdamW state and
// gradients; every step is enqueued without host synchronisation (metrics are read one step late).
#pragma once

#include "train/trainer.h"

namespace pylon {

TrainResult train_cuda(const TrainOptions& options);

}  // namespace pylon
