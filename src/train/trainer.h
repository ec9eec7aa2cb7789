// The training loop on one CPU rank: data -> forward/backward over K micro-steps -> clip ->
// AdamW -> metrics, progress, evaluation and checkpoints.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "train/adamw.h"
#include "train/schedule.h"

namespace pylon {

struct TrainOptions {
  ModelConfig model;
  std::string device = "cpu";  // cpu | cuda
  int batch = 8;        // rows per micro-step
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
};

struct TrainResult {
  int64_t steps_done = 0;
  float final_loss = 0;
  double final_val_loss = -1;  // < 0 when no validation ran
  double seconds = 0;
};

TrainResult train(const TrainOptions& options);

}  // namespace pylon
