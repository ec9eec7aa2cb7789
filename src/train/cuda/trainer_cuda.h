// The training loop on CUDA devices, any world size: FSDP over NCCL (one rank per GPU, GPU =
// LOCAL_RANK), bf16 compute (options.dtype "bf16") or fp32 throughout ("fp32"), fp32 master
// weights, AdamW state and gradient reduction; every step is enqueued without host
// synchronisation (metrics are read one step late). A world of one runs the same loop without
// communicators.
#pragma once

#include <chrono>

#include "dist/rendezvous.h"
#include "train/trainer.h"

namespace pylon {

// Collective over env's ranks. `timeout` bounds the rendezvous and every wait for a step: a dead
// or hung peer makes this rank throw pylon::Error naming it.
TrainResult train_cuda(const TrainOptions& options, const DistEnv& env = {},
                       std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace pylon
