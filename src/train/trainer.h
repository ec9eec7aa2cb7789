// The training loop, one for every world size: data -> forward/backward over K micro-steps with
// FSDP's gathers and reduce-scatters around each unit -> global-norm clip -> AdamW on the shards
// -> metrics, progress (rank 0), evaluation and sharded checkpoints. World 1 is the same code
// with the single-rank communicator.
#pragma once

#include <cstdint>
#include <string>

#include "dist/communicator.h"
#include "dist/fault_injection.h"
#include "model/config.h"
#include "model/recompute.h"
#include "profile/session.h"
#include "ops/adamw.h"
#include "train/checkpoint.h"
#include "train/schedule.h"

namespace pylon {

struct TrainOptions {
  ModelConfig model;
  std::string device = "cpu";  // cpu | cuda (one rank per GPU)
  std::string dtype = "bf16";  // cuda: bf16 (bf16 compute, fp32 master) | fp32 (fp32 throughout); cpu: fp32 always
  int batch = 8;        // rows per rank per micro-step
  int seq = 256;        // tokens per row
  int64_t steps = 100;  // optimizer steps (total, including any resumed ones)
  int grad_accum = 1;   // micro-steps per optimizer step
  AdamWConfig adamw;
  ScheduleConfig schedule;
  float grad_clip = 1.0f;  // global-norm clipping; 0 = off
  uint64_t seed = 0;       // parameter initialisation
  std::string data, val_data, tokenizer;
  std::string init_from, save_dir, resume_dir, metrics_path;
  int64_t save_every = 0, eval_every = 0, eval_steps = 8, log_every = 10;
  bool reshard_after_forward = true;  // false: ZeRO-2 (units stay gathered until their backward)
  bool prefetch = true;               // FSDP collectives on a worker thread (see FsdpOptions)
  bool no_sync = false;               // accumulate gradients locally, reduce at the last micro-step
  bool check_reshard = false;         // debug: NaN in freed parameter slots (see FsdpOptions)
  bool reduce_bf16 = false;           // cuda: reduce-scatter gradients in bf16 (--reduce-dtype bf16)
  bool split_root = true;             // cuda: the head reduced as its backward ends (FsdpCudaOptions)
  bool one_gpu_reshard = false;       // cuda, world 1: no whole bf16 copy (FsdpCudaOptions::persistent_at_one)
  Recompute recompute = Recompute::selective;  // cuda: activations kept vs recomputed (model/recompute.h)
  bool cuda_graph = false;            // cuda: replay a captured step as a CUDA graph (train/cuda/trainer_cuda.cpp)
  profile::ProfileOptions profile;    // --profile DIR and its step schedule (CPU ranges)
  TestFaults faults;                  // tests: a rank that dies or hangs (dist/fault_injection.h)
};

struct TrainResult {
  int64_t steps_done = 0;
  float final_loss = 0;          // global mean
  int64_t peak_mem_bytes = 0;    // max over ranks
  double final_val_loss = -1;  // < 0 when no validation ran
  double seconds = 0;
};

// The checks train() starts with, without building the model: options, that the data and
// validation files open, that the tokenizer loads, that a --resume checkpoint (its checksums) or
// --init-from file fits the model. The launcher runs them once before starting ranks, so bad
// input is one error line, not one per rank. On the CPU, also the memory plan: `local_ranks` ranks
// of a `world` on this machine must fit in its available memory (train/memory_plan.h); on CUDA,
// that the plan's sizes can be computed (each rank compares the plan with its GPU's free memory
// before allocating: train/cuda/trainer_cuda.h). Returns the checkpoint's metadata when resuming.
// Throws pylon::Error.
CheckpointInfo check_train_options(const TrainOptions& options, int world = 1, int local_ranks = 1);

// Collective: every rank of comm calls it with the same options. Only rank 0 prints and writes
// metrics. Throws pylon::Error (bad options, data, checkpoints; divergence; a failed peer).
TrainResult train(const TrainOptions& options, Communicator& comm);
// A world of one.
TrainResult train(const TrainOptions& options);

}  // namespace pylon
