// The training loop, one for every device and world size: what is not device-specific (the data
// order, the schedule, evaluation and checkpoint cadence, the metrics, the progress line,
// checkpoints and their metadata, resume checks) is here; a device plugs in as a TrainStep (the
// CPU ranks' in train/trainer.cpp, the GPUs' in train/cuda/trainer_cuda.cpp).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "dist/fsdp.h"
#include "io/token_file.h"
#include "profile/session.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/trainer.h"

namespace pylon {

// One optimizer step's results on this rank.
struct StepResult {
  double loss = 0;          // mean over the global batch (every rank's micro-steps)
  double grad_norm = 0;     // global, before clipping
  double ms = 0;            // the step's time: wall clock on the CPU, device events on GPUs
  int64_t peak_mem_bytes = 0;  // this rank's peak so far: the process's resident set on the CPU,
                               // device memory in use on a GPU
  // This rank's GPU over the steps of about the last second (profile::GpuWindow); energy_j < 0:
  // not measured (CPU ranks, no NVML).
  double energy_j = -1;          // per step
  double power_w = 0;            // mean board power
  double sm_clock_mhz = 0;       // mean SM clock
  double power_capped_frac = 0;  // share of the samples with the power cap in force
};

// A device's training step. The loop calls, for each step t (1-based), run(t) with step t's
// micro-batches, which the step loads as it needs them; and result(s) for every step in order, at
// most lag() steps behind run().
class TrainStep {
 public:
  virtual ~TrainStep() = default;
  // The device's part of the run's description line ("on 2 GPUs (bf16 compute, ...)").
  virtual std::string describe() const = 0;
  // 0: run(t) finishes step t. 1: it enqueues step t, whose results are read while t + 1 runs.
  virtual int lag() const = 0;
  // Optimizer step t on `batches` (batches.step() == t): forward and backward over the micro-steps
  // with the units' gathers and reduce-scatters, clipping, AdamW at learning rate lr. The CPU step
  // loads each micro-batch just before its forward; a lagging step loads all of step t's while
  // step t − 1 runs.
  virtual void run(const StepBatches& batches, float lr) = 0;
  // Step t's results (waits for it). Called once per step, in order.
  virtual StepResult result(int64_t t) = 0;
  // Fields of step t's metrics row that only this device has (after result(t)).
  virtual void add_metrics(int64_t /*t*/, nlohmann::json& /*row*/) {}
  // Mean loss over `steps` micro-batches of `data` in the training order, each rank scoring its
  // share of the rows, with the weights after the last step run. Collective.
  virtual double evaluate(const TokenFile& data, int64_t steps) = 0;
  // The shards on the host with the values after the last step run, for a checkpoint.
  virtual FsdpModel& checkpoint_shards() = 0;
};

// Collective, before any other: every rank must run the same model and the same loop (ranks started
// by hand each parse their own flags). A rank whose options differ from rank 0's would hand its
// collectives buffers of other sizes (Gloo aborts the process) or train another model: one error
// on every rank naming those that differ. Paths (data, checkpoints, metrics) may differ.
void check_ranks_agree(const TrainOptions& o, Communicator& comm);

// The shards' starting values: a --resume checkpoint's, --init-from's, or initialised from --seed.
void init_shards(const TrainOptions& o, const CheckpointInfo& resume, FsdpModel& fsdp);

// Collective: every rank of comm runs the same loop. `profile`: this device's profiling options.
// Only rank 0 prints and writes metrics. Throws pylon::Error (data, checkpoints, divergence, a
// failed peer).
TrainResult run_training(const TrainOptions& o, const CheckpointInfo& resume, Communicator& comm,
                         TrainStep& step, const profile::ProfileOptions& profile);

}  // namespace pylon
