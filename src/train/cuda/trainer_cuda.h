// The training loop on CUDA devices, any world size: FSDP over NCCL (one rank per GPU, GPU =
// LOCAL_RANK), bf16 compute (options.dtype "bf16") or fp32 throughout ("fp32"), fp32 master
// weights, AdamW state and gradient reduction; every step is enqueued without host
// synchronisation (metrics are read one step late). A world of one runs the same loop without
// communicators.
#pragma once

#include <chrono>

#include "dist/rendezvous.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace pylon {

// Collective over env's ranks. `timeout` bounds the rendezvous and every wait for a step: a dead
// or hung peer makes this rank throw pylon::Error naming it.
TrainResult train_cuda(const TrainOptions& options, const DistEnv& env = {},
                       std::chrono::milliseconds timeout = std::chrono::minutes(5));

// The device memory one rank of `world` allocates to train with o (train/memory_plan.h's
// cuda_train_memory with the CUDA kernels' and libraries' scratch), computed without allocating.
// train_cuda refuses a run whose plan exceeds its GPU's free memory before the step allocates.
MemoryPlan cuda_step_memory(const TrainOptions& o, int world);

}  // namespace pylon
